"""Ring-buffer records gathered in C for one poll (native/ring_batch.c).

The ring's consumer (native/bpf_calls.c) calls jp_ring_collect for each
record with no Python in between; the sampling thread then decodes the batch holding the GIL once.
Called back into Python per record, that thread had to win the GIL back from
a busy one (the symbolizer reading a huge perf map) for every record, and
fell behind the kernel.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from profiler.native import library

# The largest record the sampler sends is a deep stack copy: a sample's
# header, frames and V8 frames, then a copy of up to 256 KiB
# (tests/kernel/test_abi.py checks this bound against jitprof_abi.h).
MAX_RECORD_BYTES = 320 << 10
MAX_RECORDS = 4096  # about 0.2 s of decoding: a storm cannot keep the loop from -d and signals
CAPACITY_BYTES = (8 << 20) + MAX_RECORD_BYTES
_HEADER_BYTES = 8
_RECORD_SIZE = struct.Struct("<I")


class RingBatch:
    """One batch, reused poll after poll."""

    def __init__(self) -> None:
        self._ffi, self._lib = library.load()
        self._buffer = self._ffi.new("uint8_t[]", CAPACITY_BYTES)
        self._batch: Any = self._ffi.new("struct jp_ring_batch *")
        self._batch.buffer = self._buffer
        self._batch.capacity = CAPACITY_BYTES
        self._batch.max_records = MAX_RECORDS
        self._batch.max_record_bytes = MAX_RECORD_BYTES
        self._dropped_before = 0  # in the batches cleared

    @property
    def pointer(self) -> Any:
        """The batch, for native/ (struct jp_ring_batch *)."""
        return self._batch

    @property
    def full(self) -> bool:
        """The batch stopped the consume loop: more records may wait in the ring."""
        return bool(self._batch.full)

    @property
    def dropped(self) -> int:
        """Records that did not fit, in all batches so far."""
        return self._dropped_before + int(self._batch.dropped)

    def __len__(self) -> int:
        return int(self._batch.records)

    def clear(self) -> None:
        self._dropped_before += self._batch.dropped
        self._batch.used = 0
        self._batch.records = 0
        self._batch.dropped = 0
        self._batch.full = 0

    def records(self) -> Iterator[memoryview]:
        """A view of each record's bytes, in the order taken; valid until clear()."""
        used = int(self._batch.used)
        view = memoryview(self._ffi.buffer(self._buffer, used))
        offset = 0
        while offset + _HEADER_BYTES <= used:
            (size,) = _RECORD_SIZE.unpack_from(view, offset)
            start = offset + _HEADER_BYTES
            if start + size > used:
                return  # (never: the collector checks each size against the space left)
            yield view[start : start + size]
            offset = start + ((size + 7) & ~7)
