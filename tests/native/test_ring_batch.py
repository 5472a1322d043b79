"""Ring-buffer records gathered in C (native/ring_batch.c), called here as
the ring's consumer (native/bpf_calls.c) calls it: each record copied in
order, the loop told to stop while the largest record still fits, nothing
written past the end."""

from __future__ import annotations

import pytest

from profiler.native import library, ring_batch


@pytest.fixture
def native():
    try:
        return library.load()
    except library.NativeUnavailable:
        pytest.skip("native/ is built by make setup")


def collect(native, batch: ring_batch.RingBatch, record: bytes) -> int:
    ffi, lib = native
    data = ffi.from_buffer(record)
    return lib.jp_ring_collect(batch.pointer, data, len(record))


def test_records_come_back_in_order_with_their_sizes(native):
    batch = ring_batch.RingBatch()
    records = [b"", b"a", b"0123456789abcdef", bytes(range(256)) * 3, b"x" * 13]
    assert [collect(native, batch, record) for record in records] == [0] * len(records)
    taken = [bytes(record) for record in batch.records()]
    assert taken == records and len(batch) == len(records) and not batch.full
    batch.clear()
    assert list(batch.records()) == [] and len(batch) == 0


def test_the_loop_stops_at_the_record_limit_with_the_last_record_kept(native, monkeypatch):
    monkeypatch.setattr(ring_batch, "MAX_RECORDS", 3)
    batch = ring_batch.RingBatch()
    assert [collect(native, batch, b"%d" % number) for number in range(3)] == [0, 0, -1]
    assert batch.full and [len(record) for record in batch.records()] == [1, 1, 1]
    batch.clear()
    assert not batch.full and collect(native, batch, b"again") == 0


def test_the_loop_stops_while_the_largest_record_still_fits(native, monkeypatch):
    monkeypatch.setattr(ring_batch, "CAPACITY_BYTES", 2 * ring_batch.MAX_RECORD_BYTES + 1024)
    batch = ring_batch.RingBatch()
    largest = b"\xab" * ring_batch.MAX_RECORD_BYTES
    assert collect(native, batch, largest) == 0  # room for another of the largest
    assert collect(native, batch, largest) == -1 and batch.full  # not for a third
    assert [len(record) for record in batch.records()] == [len(largest)] * 2 and batch.dropped == 0


def test_a_record_that_cannot_fit_is_counted_not_written(native, monkeypatch):
    monkeypatch.setattr(ring_batch, "CAPACITY_BYTES", 4096)
    monkeypatch.setattr(ring_batch, "MAX_RECORD_BYTES", 0)  # a wrong bound: the check must still hold
    batch = ring_batch.RingBatch()
    assert collect(native, batch, b"y" * 4000) == 0
    assert collect(native, batch, b"z" * 200) == -1
    assert len(batch) == 1
    batch.clear()
    assert batch.dropped == 1
