import ctypes
import struct

import pytest

from profiler.kernel.events import (
    V8_ASYNC_CUT,
    AsyncFrameSlots,
    AsyncKind,
    EventType,
    MalformedEvent,
    ProcessEvent,
    RawSample,
    WalkEnd,
    _RawAsyncFrame,
    _RawProcessEvent,
    _RawSampleHeader,
    _RawStackCopy,
    _RawV8Frame,
    decode_event,
)


def record(header: _RawSampleHeader, addresses=(), copy: _RawStackCopy | None = None, stack: bytes = b"") -> ctypes.Array:
    data = bytes(header) + struct.pack(f"<{len(addresses)}Q", *addresses)
    if copy is not None:
        data += bytes(copy) + stack
    return ctypes.create_string_buffer(data, len(data))


def decode(buffer, size=None):
    return decode_event(memoryview(buffer).cast("B")[: len(buffer) if size is None else size])


def test_a_sample_is_its_header_and_its_frames():
    header = _RawSampleHeader(
        event_type=1, pid=10, tid=11, cpu=1, time_ns=5, kernel_stack_id=-1, frame_count=3, walk_end=2, user_mode=1, comm=b"node"
    )
    event = decode(record(header, (0x10, 0x20, 0x30)))
    assert isinstance(event, RawSample)
    assert event.addresses == (0x10, 0x20, 0x30)
    assert event.walk_end is WalkEnd.NO_MAPPING and event.comm == "node" and event.user_mode
    assert event.stack_copy is None


def test_a_samples_callers_words_leave_out_its_leaf():
    """The key its callers are remembered under: their addresses and V8
    slots, not the leaf's, which moves from sample to sample."""

    def callers(addresses, frames):
        header = _RawSampleHeader(event_type=1, pid=10, tid=10, frame_count=len(addresses), v8_frame_count=len(frames))
        data = bytes(record(header, addresses)) + b"".join(bytes(_RawV8Frame(*frame)) for frame in frames)
        event = decode(ctypes.create_string_buffer(data, len(data)))
        assert [slots.frame_index for slots in event.v8_frames] == [frame[4] for frame in frames]
        return event.caller_words

    leaf = (0x100, 0x200, 0x300, 7, 0, 0)
    caller = (0x110, 0x210, 0x310, 9, 1, 0)
    words = callers((0x10, 0x20), [leaf, caller])
    assert words == struct.pack("<Q", 0x20) + bytes(_RawV8Frame(*caller))
    assert callers((0x11, 0x20), [(0x100, 0x200, 0x300, 8, 0, 0), caller]) == words
    assert callers((0x10, 0x20), [caller]) == words  # no slots read for the leaf
    assert callers((0x10, 0x21), [leaf, caller]) != words
    assert callers((0x10, 0x20), [leaf, (0x110, 0x210, 0x310, 10, 1, 0)]) != words
    assert callers((0x10,), []) == b"" and callers((), []) == b""


def test_a_samples_async_callers_follow_its_js_frames():
    header = _RawSampleHeader(
        event_type=1, pid=10, tid=10, frame_count=2, v8_frame_count=1, async_count=3, async_flags=V8_ASYNC_CUT
    )
    callers = [(0x501, 96, AsyncKind.FUNCTION, 0), (0, 1, AsyncKind.ALL, 0), (0x601, 40, AsyncKind.GENERATOR, 0)]
    data = bytes(record(header, (0x10, 0x20))) + bytes(_RawV8Frame(0x100, 0x200, 0x300, 7, 0, 0))
    data += b"".join(bytes(_RawAsyncFrame(*caller)) for caller in callers)
    event = decode(ctypes.create_string_buffer(data, len(data)))
    assert event.async_frames == (
        AsyncFrameSlots(AsyncKind.FUNCTION, 0x501, 96),
        AsyncFrameSlots(AsyncKind.ALL, 0, 1),
        AsyncFrameSlots(AsyncKind.GENERATOR, 0x601, 40),
    )
    assert event.async_cut and len(event.v8_frames) == 1
    with pytest.raises(MalformedEvent):  # fewer bytes than its callers
        decode(ctypes.create_string_buffer(data, len(data)), len(data) - 1)
    header.async_count, header.async_flags = 0, 0
    plain = bytes(record(header, (0x10, 0x20))) + bytes(_RawV8Frame(0x100, 0x200, 0x300, 7, 0, 0))
    event = decode(ctypes.create_string_buffer(plain, len(plain)))
    assert event.async_frames == () and not event.async_cut


def test_a_deferred_sample_carries_its_stack_copy():
    header = _RawSampleHeader(event_type=1, pid=10, tid=10, frame_count=1, walk_end=WalkEnd.DEFERRED)
    copy = _RawStackCopy(pc=0x4000, sp=0x7000, fp=0x7040, copy_length=16, flags=3)
    event = decode(record(header, (0x1234,), copy, bytes(range(16))))
    assert event.addresses == (0x1234,)
    assert event.stack_copy is not None
    assert (event.stack_copy.pc, event.stack_copy.sp, event.stack_copy.fp) == (0x4000, 0x7000, 0x7040)
    assert event.stack_copy.exact_pc and event.stack_copy.reached_end
    assert event.stack_copy.data == bytes(range(16))
    assert event.stack_copy.address == 0x7000 and event.stack_copy.word_at(0x7008) == int.from_bytes(
        bytes(range(8, 16)), "little"
    )


def test_a_copy_read_page_by_page_starts_at_sps_page_and_has_no_bytes_in_its_holes():
    """The page at sp was never touched (a large frame's bottom): the copy
    starts at sp's page, and what lies in its holes is not the stack's."""
    header = _RawSampleHeader(event_type=1, pid=10, tid=10, frame_count=0, walk_end=WalkEnd.DEFERRED)
    data = bytes(4096) + (0x1122).to_bytes(8, "little") * 512
    copy = _RawStackCopy(pc=0x4000, sp=0x7FF0_1F00, fp=0x7FF0_2010, copy_length=len(data), flags=4 | 1, holes=0b1)
    stack = decode(record(header, (), copy, data)).stack_copy
    assert stack is not None and stack.paged and stack.holes == 1 and stack.reached_end
    assert stack.address == 0x7FF0_1000
    assert stack.word_at(0x7FF0_2010) == 0x1122
    assert stack.word_at(0x7FF0_1F00) is None  # in the hole
    assert stack.word_at(0x7FF0_1FFC) is None  # half in it
    assert stack.bytes_at(0x7FF0_2FF8, 8) is not None and stack.bytes_at(0x7FF0_2FF8, 9) is None  # past the end


def test_decodes_process_events():
    raw = _RawProcessEvent(event_type=2, pid=20, tid=20, parent_pid=10, time_ns=7, comm=b"sh")
    event = decode_event(memoryview(raw).cast("B"))
    assert isinstance(event, ProcessEvent) and event.event_type is EventType.FORK and event.parent_pid == 10


@pytest.mark.parametrize(
    "frame_count,walk_end,addresses,copy_length,stack,size",
    [
        (60000, 0, (), None, b"", None),  # more frames than the kernel sends
        (3, 0, (1, 2), None, b"", None),  # fewer addresses than it says
        (0, 77, (), None, b"", None),  # an unknown walk end
        (0, WalkEnd.DEFERRED, (), None, b"", None),  # deferred without its copy
        (0, WalkEnd.DEFERRED, (), 64, b"x" * 16, None),  # a copy shorter than it says
        (0, WalkEnd.COPY_TOO_SHORT, (), None, b"", None),  # an end only user space gives
        (0, 0, (), None, b"", 40),  # a truncated header
    ],
)
def test_malformed_samples_raise(frame_count, walk_end, addresses, copy_length, stack, size):
    header = _RawSampleHeader(event_type=1, frame_count=frame_count, walk_end=walk_end)
    copy = _RawStackCopy(copy_length=copy_length) if copy_length is not None else None
    with pytest.raises(MalformedEvent):
        decode(record(header, addresses, copy, stack), size)


@pytest.mark.parametrize("event_type,size", [(99, 100), (2, 8)])
def test_malformed_records_raise(event_type, size):
    raw = _RawProcessEvent(event_type=event_type)
    with pytest.raises(MalformedEvent):
        decode_event(memoryview(raw).cast("B")[:size])


def test_a_wait_carries_its_time_and_the_threads_short_waits():
    header = _RawSampleHeader(
        event_type=1,
        pid=10,
        tid=12,
        time_ns=9,
        kernel_stack_id=-1,
        frame_count=1,
        walk_end=0,
        comm=b"node",
        off_cpu_ns=250_000_000,
        short_wait_ns=3_000,
        short_waits=4,
        work=77,
        runnable_ns=500,
    )
    event = decode(record(header, (0x10,)))
    assert isinstance(event, RawSample)
    assert (event.off_cpu_ns, event.short_wait_ns, event.short_waits, event.work, event.runnable_ns) == (
        250_000_000,
        3_000,
        4,
        77,
        500,
    )
    assert not event.stack_moved and not event.submits_work and not event.time_only and not event.preempted


def test_time_runnable_walked_where_it_was_preempted_is_flagged():
    header = _RawSampleHeader(event_type=1, pid=10, tid=12, frame_count=1, walk_end=0, off_cpu_flags=4, runnable_ns=30_000_000)
    event = decode(record(header, (0x10,)))
    assert isinstance(event, RawSample) and event.preempted and event.runnable_ns == 30_000_000 and event.off_cpu_ns == 0


def test_a_submit_of_work_is_flagged_with_its_parent():
    header = _RawSampleHeader(event_type=1, pid=10, tid=10, frame_count=0, walk_end=0, off_cpu_flags=2, work=5, parent_work=3)
    event = decode(record(header))
    assert isinstance(event, RawSample) and event.submits_work and (event.work, event.parent_work) == (5, 3)


def test_thread_waits_and_work_started_become_time_records():
    from profiler.kernel.events import thread_waits_record, work_started_record  # noqa: PLC0415

    waits = ProcessEvent(EventType.THREAD_WAITS, 10, 12, 0, 100, "node", address=7_000, length=3)
    record_ = thread_waits_record(waits)
    assert record_.time_only and record_.short_wait_ns == 7_000 and record_.short_waits == 3 and not record_.addresses
    runnable = thread_waits_record(ProcessEvent(EventType.THREAD_RUNNABLE, 10, 12, 0, 100, "node", address=900))
    assert runnable.time_only and runnable.runnable_ns == 900 and runnable.short_wait_ns == 0
    started = work_started_record(ProcessEvent(EventType.WORK_STARTED, 10, 13, 0, 1_000, "libuv-worker", address=400))
    assert started.work_started and started.work == 400 and started.off_cpu_ns == 600
