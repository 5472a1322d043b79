"""Reading the kernel's mapping records from a perf ring: records that wrap
at the ring's end, lost records counted, a torn or foreign ring skipped,
never read past what the kernel wrote. The ring here is memory laid out as
the kernel lays it out (the real one is read in e2e/test_mapping_records.py)."""

import mmap
import struct

from profiler.kernel import mapping_records
from profiler.kernel.mapping_records import PAGE, MappingRecords, NewMapping

DATA_PAGES = 1


def a_ring() -> tuple[MappingRecords, mmap.mmap]:
    ring = mmap.mmap(-1, PAGE + DATA_PAGES * PAGE)
    records = MappingRecords.__new__(MappingRecords)
    records._descriptors, records._rings, records._data_bytes, records.lost = [], [ring], DATA_PAGES * PAGE, 0
    return records, ring


def mmap_record(pid: int, address: int, length: int, name: bytes = b"//anon", time_ns: int = 0) -> bytes:
    body = struct.pack("<IIQQQ", pid, pid + 1, address, length, 0) + name + b"\0"
    body += b"\0" * (-len(body) % 8) + struct.pack("<Q", time_ns or address)  # sample_id: the time
    return struct.pack("<IHH", mapping_records.RECORD_MMAP, 0, 8 + len(body)) + body


def write(ring: mmap.mmap, start: int, data: bytes) -> int:
    """data written at ring position start (wrapping), the head moved past it."""
    size = DATA_PAGES * PAGE
    for index, byte in enumerate(data):
        ring[PAGE + (start + index) % size] = byte
    struct.pack_into("<QQ", ring, 1024, start + len(data), start)  # data_head, data_tail
    return start + len(data)


def test_records_are_read_and_the_tail_moves_past_them():
    records, ring = a_ring()
    first, second = mmap_record(42, 0x7F0000001000, 0x5000, time_ns=20), mmap_record(43, 0x7F0000009000, 0x1000, time_ns=10)
    head = write(ring, 0, first + second)
    # In the order they were made (another CPU's ring may hold an earlier one: sorted by time).
    assert records.drain() == [NewMapping(43, 44, 0x7F0000009000, 0x1000, 10), NewMapping(42, 43, 0x7F0000001000, 0x5000, 20)]
    assert struct.unpack_from("<Q", ring, 1032)[0] == head
    assert records.drain() == []


def test_a_record_that_wraps_at_the_rings_end_is_read_whole():
    records, ring = a_ring()
    start = DATA_PAGES * PAGE - 24  # the header and part of the body before the end
    write(ring, start, mmap_record(7, 0xDEAD0000, 0x2000, b"/usr/lib/libfoo.so", time_ns=99))
    assert records.drain() == [NewMapping(7, 8, 0xDEAD0000, 0x2000, 99)]


def test_lost_records_are_counted():
    records, ring = a_ring()
    lost = struct.pack("<IHHQQQ", mapping_records.RECORD_LOST, 0, 32, 1, 17, 5)
    write(ring, 0, lost + mmap_record(9, 0x1000, 0x1000, time_ns=6))
    assert records.drain() == [NewMapping(9, 10, 0x1000, 0x1000, 6)]
    assert records.lost == 17


def test_a_torn_record_or_a_head_past_the_ring_is_skipped_not_read_past():
    records, ring = a_ring()
    torn = struct.pack("<IHH", mapping_records.RECORD_MMAP, 0, 4)  # shorter than its header
    head = write(ring, 0, torn + b"\0" * 4 + mmap_record(9, 0x1000, 0x1000))
    assert records.drain() == []
    assert struct.unpack_from("<Q", ring, 1032)[0] == head
    too_long = struct.pack("<IHH", mapping_records.RECORD_MMAP, 0, 4096)  # past the head
    head = write(ring, head, too_long + b"\0" * 8)
    assert records.drain() == []
    assert struct.unpack_from("<Q", ring, 1032)[0] == head
    struct.pack_into("<QQ", ring, 1024, head + 10 * DATA_PAGES * PAGE, head)  # more than the ring holds
    assert records.drain() == []
    assert struct.unpack_from("<Q", ring, 1032)[0] == head + 10 * DATA_PAGES * PAGE
