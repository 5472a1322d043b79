"""The sampler's ring buffer: records taken in bounded batches (gathered in
C, see profiler/native/ring_batch.py) and handed, decoded, to the run's handlers."""

from __future__ import annotations

import time
from collections.abc import Callable

from profiler.errors import JitprofError
from profiler.kernel.bpf_calls import Ring
from profiler.kernel.events import KernelTraffic, MalformedEvent, ProcessEvent, RawSample, decode_event
from profiler.native.ring_batch import RingBatch
from profiler.safety import limits


class EventStream:
    def __init__(self, ring_map_fd: int, ring_bytes: int) -> None:
        self._ring_map_fd = ring_map_fd
        self._ring_bytes = ring_bytes
        self._ring: Ring | None = None
        self._handlers: list[Callable[[RawSample | ProcessEvent], None]] = []
        self._malformed = 0
        self.traffic = KernelTraffic()
        self._batch: RingBatch | None = None

    def on_event(self, handler: Callable[[RawSample | ProcessEvent], None]) -> None:
        self._handlers.append(handler)
        if self._ring is None:
            self._batch = RingBatch()
            try:
                self._ring = Ring(self._ring_map_fd, self._ring_bytes)
            except OSError as error:
                # Mapping it takes address space: a limit the shell set is named first.
                limited = limits.describe_limits()
                raise JitprofError(
                    f"cannot open the BPF ring buffer: {error.strerror}",
                    f"{limited}: raise it and run again"
                    if limited
                    else "check `ulimit -l` (locked memory) and the kernel's BPF support",
                ) from error

    def poll(self, timeout_ms: int) -> bool:
        """Wait for a process event or the timeout (none while records are
        known to wait), take a batch of records and hand each, decoded, to
        the handlers. True if the batch was full: more may wait."""
        if self._ring is None or self._batch is None:
            time.sleep(timeout_ms / 1000)
            return False
        batch = self._batch
        more_waiting = batch.full  # the last batch stopped short of the ring's end
        batch.clear()
        if not more_waiting:
            self._ring.poll(timeout_ms, batch)
        if not batch.full:
            self._ring.consume(batch)
        for record in batch.records():
            self._dispatch(record)
        return batch.full

    @property
    def malformed_events(self) -> int:
        """Records that could not be decoded or did not fit a batch."""
        return self._malformed + (self._batch.dropped if self._batch is not None else 0)

    def _dispatch(self, record: memoryview) -> None:
        traffic = self.traffic
        size = len(record)
        traffic.records += 1
        traffic.bytes += size
        try:
            event = decode_event(record)
        except MalformedEvent:
            self._malformed += 1
            return
        if isinstance(event, RawSample):
            traffic.samples += 1
            traffic.sample_bytes += size
            if event.stack_copy is not None:
                traffic.stack_copies += 1
                traffic.stack_copy_bytes += len(event.stack_copy.data)
        for handler in self._handlers:
            handler(event)

    def close(self) -> None:
        if self._ring is not None:
            self._ring.close()
            self._ring = None
