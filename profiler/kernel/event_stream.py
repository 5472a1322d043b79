"""The sampler's ring buffer: records taken in bounded batches and handed,
decoded, to the run's handlers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from profiler.errors import JitprofError
from profiler.kernel.events import KernelTraffic, MalformedEvent, ProcessEvent, RawSample, decode_event

CONSUME_BUDGET_S = 0.2  # the longest one poll spends taking records


class EventStream:
    def __init__(self, lib: Any, ring_map_fd: int) -> None:
        self._lib = lib
        self._ring_map_fd = ring_map_fd
        self._ring: int | None = None
        self._ring_callback: Any = None
        self._handlers: list[Callable[[RawSample | ProcessEvent], None]] = []
        self.malformed_events = 0
        self.traffic = KernelTraffic()
        self._consume_until = 0.0

    def on_event(self, handler: Callable[[RawSample | ProcessEvent], None]) -> None:
        self._handlers.append(handler)
        if self._ring is None:
            from bcc.libbcc import _RINGBUF_CB_TYPE  # noqa: PLC0415

            self._ring_callback = _RINGBUF_CB_TYPE(self._dispatch)
            self._ring = self._lib.bpf_new_ringbuf(self._ring_map_fd, self._ring_callback, None)
            if not self._ring:
                raise JitprofError(
                    "cannot open the BPF ring buffer", "check `ulimit -l` (locked memory) and the kernel's BPF support"
                )

    def _dispatch(self, _ctx: int, data: int, size: int) -> int:
        traffic = self.traffic
        traffic.records += 1
        traffic.bytes += size
        try:
            event = decode_event(data, size)
        except MalformedEvent:
            self.malformed_events += 1
        else:
            if isinstance(event, RawSample):
                traffic.samples += 1
                traffic.sample_bytes += size
                if event.stack_copy is not None:
                    traffic.stack_copies += 1
                    traffic.stack_copy_bytes += len(event.stack_copy.data)
            for handler in self._handlers:
                handler(event)
        # A negative answer stops libbpf's consume loop (this record counts as
        # taken): a storm of events cannot keep the loop from -d and signals.
        return -1 if time.monotonic() > self._consume_until else 0

    def poll(self, timeout_ms: int, budget_s: float = CONSUME_BUDGET_S) -> None:
        """Wait for a process event or the timeout, then take records for at
        most budget_s; what is left waits for the next poll."""
        if self._ring is None:
            time.sleep(timeout_ms / 1000)
            return
        self._consume_until = time.monotonic() + timeout_ms / 1000 + budget_s
        self._lib.bpf_poll_ringbuf(self._ring, timeout_ms)
        self._consume_until = time.monotonic() + budget_s
        self._lib.bpf_consume_ringbuf(self._ring)

    def close(self) -> None:
        if self._ring is not None:
            self._lib.bpf_free_ringbuf(self._ring)
            self._ring = None
