"""New executable memory, from the kernel's own mapping records.

perf's mapping records (PERF_RECORD_MMAP) are written by mmap, and by
mprotect where it makes memory executable, into a ring per CPU, for every
process; the kernel makes them only while someone asks, and only for
executable mappings. jitprof reads them in place of tracepoints on the
mmap and mprotect system calls: attaching any system call's tracepoint
sends every system call of every process on the machine through the
kernel's slow path while jitprof runs (+62 ns each, measured), where these
records cost only the calls that map code. Only the ranges are used; the
records' file names are not read.

Each record carries its time on the sampler's clock: the reader tells its
range among the sampler's events in the order they happened, as the
system calls' tracepoints did through the sampler's ring.
Records lost to a full ring are counted: the caller reads every followed
process's maps again.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
import time
from dataclasses import dataclass

PERF_EVENT_OPEN = 298  # x86-64
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_DUMMY = 9
PERF_FLAG_FD_CLOEXEC = 8
ATTRIBUTES_SIZE = 128  # PERF_ATTR_SIZE_VER7: the kernel takes a smaller or equal struct
ATTRIBUTE_MMAP = 1 << 8  # mapping records (executable mappings only: mmap_data is off)
ATTRIBUTE_EXCLUDE_KERNEL = 1 << 5
ATTRIBUTE_WATERMARK = 1 << 14  # wake the reader after wakeup_watermark bytes: 1, each record
ATTRIBUTE_SAMPLE_ID_ALL = 1 << 18  # each record ends with its time (sample_type: PERF_SAMPLE_TIME)
ATTRIBUTE_USE_CLOCKID = 1 << 25  # on CLOCK_MONOTONIC, the sampler's clock (bpf_ktime_get_ns)
PERF_SAMPLE_TIME = 1 << 2
CLOCKID_AT = 92
PAGE = mmap.PAGESIZE
RING_PAGES = 16  # per CPU: 64 KiB, some 700 records (about 100 bytes each, with a path) between two polls
RECORD_MMAP = 1
RECORD_LOST = 2
HEADER = struct.Struct("<IHH")  # type, misc, size
MMAP_BODY = struct.Struct("<IIQQ")  # pid, tid, address, length (then the offset and the file's name)
DATA_HEAD_AT, DATA_TAIL_AT = 1024, 1032  # in the ring's first page (struct perf_event_mmap_page)
MAX_RECORDS_PER_DRAIN = 8192  # per CPU and poll: the rest waits for the next


@dataclass(frozen=True)
class NewMapping:
    """Memory a process made executable, from the kernel's records."""

    pid: int
    tid: int
    address: int
    length: int
    time_ns: int  # CLOCK_MONOTONIC, as the sampler's events


class MappingRecords:
    """The rings of one perf event per CPU that asks for mapping records.
    OSError when the kernel refuses them (the caller uses the tracepoints)."""

    def __init__(self, cpus: list[int], ring_pages: int = RING_PAGES) -> None:
        self._descriptors: list[int] = []
        self._rings: list[mmap.mmap] = []
        self._data_bytes = ring_pages * PAGE
        self.lost = 0  # records the kernel could not write: a ring was full
        libc = ctypes.CDLL(None, use_errno=True)
        attributes = bytearray(ATTRIBUTES_SIZE)
        struct.pack_into("<IIQ", attributes, 0, PERF_TYPE_SOFTWARE, ATTRIBUTES_SIZE, PERF_COUNT_SW_DUMMY)
        struct.pack_into("<Q", attributes, 24, PERF_SAMPLE_TIME)
        flags = ATTRIBUTE_MMAP | ATTRIBUTE_EXCLUDE_KERNEL | ATTRIBUTE_WATERMARK | ATTRIBUTE_SAMPLE_ID_ALL | ATTRIBUTE_USE_CLOCKID
        struct.pack_into("<QI", attributes, 40, flags, 1)
        struct.pack_into("<i", attributes, CLOCKID_AT, time.CLOCK_MONOTONIC)
        buffer = (ctypes.c_char * ATTRIBUTES_SIZE).from_buffer(attributes)
        try:
            for cpu in cpus:
                descriptor = libc.syscall(PERF_EVENT_OPEN, buffer, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC)
                if descriptor < 0:
                    error = ctypes.get_errno()
                    raise OSError(error, f"perf_event_open for mapping records on CPU {cpu}: {os.strerror(error)}")
                self._descriptors.append(descriptor)
                self._rings.append(mmap.mmap(descriptor, PAGE + self._data_bytes, mmap.MAP_SHARED))
        except BaseException:
            self.close()
            raise

    @property
    def descriptors(self) -> list[int]:
        """The perf events, readable when a record was written (see EventStream's wakeups)."""
        return list(self._descriptors)

    def drain(self) -> list[NewMapping]:
        """The new executable ranges recorded since the last drain, every
        CPU's (every process's: the caller keeps those it follows), in the
        order they were made."""
        found: list[NewMapping] = []
        for ring in self._rings:
            self._drain_ring(ring, found)
        found.sort(key=lambda mapping: mapping.time_ns)
        return found

    def _drain_ring(self, ring: mmap.mmap, found: list[NewMapping]) -> None:
        head = struct.unpack_from("<Q", ring, DATA_HEAD_AT)[0]  # x86: loads are not reordered with older loads
        tail = struct.unpack_from("<Q", ring, DATA_TAIL_AT)[0]
        size = self._data_bytes
        if head - tail > size:  # not the kernel's ring as it writes it: start again from the head
            struct.pack_into("<Q", ring, DATA_TAIL_AT, head)
            return
        records = 0
        while tail < head and records < MAX_RECORDS_PER_DRAIN:
            header = self._read(ring, tail, HEADER.size)
            kind, _misc, record_size = HEADER.unpack(header)
            if record_size < HEADER.size or record_size % 8 != 0 or tail + record_size > head:
                tail = head  # a torn or foreign record: what is left is skipped
                break
            if kind == RECORD_MMAP and record_size >= HEADER.size + MMAP_BODY.size + 8:
                pid, tid, address, length = MMAP_BODY.unpack(self._read(ring, tail + HEADER.size, MMAP_BODY.size))
                (time_ns,) = struct.unpack("<Q", self._read(ring, tail + record_size - 8, 8))  # the record's last word
                found.append(NewMapping(pid, tid, address, length, time_ns))
            elif kind == RECORD_LOST and record_size >= HEADER.size + 16:
                self.lost += struct.unpack("<QQ", self._read(ring, tail + HEADER.size, 16))[1]
            tail += record_size
            records += 1
        struct.pack_into("<Q", ring, DATA_TAIL_AT, tail)  # the kernel may write over what was read

    def _read(self, ring: mmap.mmap, position: int, length: int) -> bytes:
        """length bytes of the data area at a ring position (wrapping at its end)."""
        start = position % self._data_bytes
        first = min(length, self._data_bytes - start)
        data = ring[PAGE + start : PAGE + start + first]
        if first < length:
            data += ring[PAGE : PAGE + length - first]
        return data

    def let_go(self) -> list[int]:
        """The rings unmapped; their perf events' descriptors, for the caller
        to close with its own (a perf event's release waits for RCU grace periods)."""
        for ring in self._rings:
            ring.close()
        descriptors, self._rings, self._descriptors = self._descriptors, [], []
        return descriptors

    def close(self) -> None:
        for descriptor in self.let_go():
            try:
                os.close(descriptor)
            except OSError:
                pass
