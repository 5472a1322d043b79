"""The sampler's ring buffer: records taken in bounded batches (gathered in
C, see profiler/native/ring_batch.py) and handed, decoded, to the run's handlers."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from profiler.errors import JitprofError
from profiler.kernel.bpf_calls import Ring
from profiler.kernel.events import EventType, KernelTraffic, MalformedEvent, ProcessEvent, RawSample, decode_event
from profiler.kernel.mapping_records import MappingRecords, NewMapping
from profiler.native.ring_batch import RingBatch
from profiler.safety import limits

MAPPING_WAKEUP_GAP_S = 0.05  # at most one wakeup by mapping records this often


class EventStream:
    def __init__(self, ring_map_fd: int, ring_bytes: int, mapping_records: MappingRecords | None = None) -> None:
        self._ring_map_fd = ring_map_fd
        self._ring_bytes = ring_bytes
        self._ring: Ring | None = None
        self._handlers: list[Callable[[RawSample | ProcessEvent], None]] = []
        self._malformed = 0
        self.traffic = KernelTraffic()
        self._batch: RingBatch | None = None
        # The kernel's records of new executable mappings (None: the ring has them, from the system calls' tracepoints).
        self.mapping_records = mapping_records
        self._mappings_lost = 0
        self._mappings_armed_at: float | None = None  # when mapping records were last let wake the poll
        self._mapping_wakeup_used = False  # records came since: a CPU's may have woken it, and wake it no more

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
        records = self.mapping_records
        if records is not None:
            if self._mappings_armed_at is None:
                self._arm_mapping_wakeups(records)
            elif self._mapping_wakeup_used:
                left_s = self._mappings_armed_at + MAPPING_WAKEUP_GAP_S - time.monotonic()
                if left_s <= 0:
                    self._arm_mapping_wakeups(records)
                else:
                    # Not woken by records till then: wait no longer, so that
                    # new code is read within the gap, not at the poll's timeout.
                    timeout_ms = min(timeout_ms, math.ceil(left_s * 1000))
        more_waiting = batch.full  # the last batch stopped short of the ring's end
        batch.clear()
        if not more_waiting:
            self._ring.poll(timeout_ms, batch)
        if not batch.full:
            self._ring.consume(batch)
        # Read after the batch is taken: every mapping its events came after is
        # here (code runs only once it is mapped). Each is told in its time's
        # place among them, as the system calls' tracepoints told it in the
        # ring: after the fork and exec of its process, before the samples in
        # its code (noted even if the process is gone before its maps are read).
        mappings = records.drain() if records is not None else []
        if mappings:
            self._mapping_wakeup_used = True
        told = 0
        for record in batch.records():
            event = self._decode(record)
            if event is None:
                continue
            while told < len(mappings) and mappings[told].time_ns <= event.time_ns:
                self._tell_mapping(mappings[told])
                told += 1
            self._deliver(event)
        for mapping in mappings[told:]:
            self._tell_mapping(mapping)
        if records is not None and records.lost != self._mappings_lost:
            self._mappings_lost = records.lost
            self._deliver(ProcessEvent(EventType.MAPPINGS_LOST, 0, 0, 0, time.monotonic_ns(), ""))
        return batch.full

    def _arm_mapping_wakeups(self, records: MappingRecords) -> None:
        """A mapping record wakes the poll, once per CPU until armed again:
        the first change of a quiet process is read at once, and a process
        mapping in a loop wakes the reader at most every MAPPING_WAKEUP_GAP_S."""
        assert self._ring is not None
        for descriptor in records.descriptors:
            self._ring.watch(descriptor)
        self._mappings_armed_at = time.monotonic()
        self._mapping_wakeup_used = False

    def _tell_mapping(self, mapping: NewMapping) -> None:
        self._deliver(
            ProcessEvent(EventType.EXEC_MAPPED, mapping.pid, mapping.tid, 0, mapping.time_ns, "", mapping.address, mapping.length)
        )

    @property
    def malformed_events(self) -> int:
        """Records that could not be decoded or did not fit a batch."""
        return self._malformed + (self._batch.dropped if self._batch is not None else 0)

    def _decode(self, record: memoryview) -> RawSample | ProcessEvent | None:
        traffic = self.traffic
        size = len(record)
        traffic.records += 1
        traffic.bytes += size
        try:
            event = decode_event(record)
        except MalformedEvent:
            self._malformed += 1
            return None
        if isinstance(event, RawSample):
            traffic.samples += 1
            traffic.sample_bytes += size
            if event.stack_copy is not None:
                traffic.stack_copies += 1
                traffic.stack_copy_bytes += len(event.stack_copy.data)
        return event

    def _deliver(self, event: RawSample | ProcessEvent) -> None:
        for handler in self._handlers:
            handler(event)

    def close(self) -> None:
        if self._ring is not None:
            self._ring.close()
            self._ring = None
