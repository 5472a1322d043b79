import ctypes
import struct

import pytest

from profiler.kernel.events import (
    EventType,
    MalformedEvent,
    ProcessEvent,
    RawSample,
    WalkEnd,
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


def test_a_deferred_sample_carries_its_stack_copy():
    header = _RawSampleHeader(event_type=1, pid=10, tid=10, frame_count=1, walk_end=WalkEnd.DEFERRED)
    copy = _RawStackCopy(pc=0x4000, sp=0x7000, fp=0x7040, copy_length=16, flags=3)
    event = decode(record(header, (0x1234,), copy, bytes(range(16))))
    assert event.addresses == (0x1234,)
    assert event.stack_copy is not None
    assert (event.stack_copy.pc, event.stack_copy.sp, event.stack_copy.fp) == (0x4000, 0x7000, 0x7040)
    assert event.stack_copy.exact_pc and event.stack_copy.reached_end
    assert event.stack_copy.data == bytes(range(16))


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
