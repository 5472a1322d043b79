import ctypes

import pytest

from profiler.kernel.events import (
    EventType,
    MalformedEvent,
    ProcessEvent,
    RawSample,
    WalkEnd,
    _RawProcessEvent,
    _RawSample,
    decode_event,
)


def test_sample_layout_matches_the_c_struct():
    # 4 u32 + u64 + s32 + u16 + 2 u8 + comm[16] + 127 u64, as in sampler.bpf.c
    assert ctypes.sizeof(_RawSample) == 16 + 8 + 8 + 16 + 127 * 8
    assert ctypes.sizeof(_RawProcessEvent) == 16 + 8 + 16 + 16


def test_decodes_a_sample():
    raw = _RawSample(event_type=1, pid=10, tid=11, cpu=1, time_ns=5, kernel_stack_id=-1, frame_count=3, walk_end=2, user_mode=1, comm=b"node")
    raw.addresses[0], raw.addresses[1], raw.addresses[2] = 0x10, 0x20, 0x30
    event = decode_event(ctypes.addressof(raw), ctypes.sizeof(raw))
    assert isinstance(event, RawSample)
    assert event.addresses == (0x10, 0x20, 0x30)
    assert event.walk_end is WalkEnd.NO_MAPPING and event.comm == "node" and event.user_mode


def test_decodes_process_events():
    raw = _RawProcessEvent(event_type=2, pid=20, tid=20, parent_pid=10, time_ns=7, comm=b"sh")
    event = decode_event(ctypes.addressof(raw), ctypes.sizeof(raw))
    assert isinstance(event, ProcessEvent) and event.event_type is EventType.FORK and event.parent_pid == 10


def test_frame_count_is_clamped():
    raw = _RawSample(event_type=1, frame_count=60000, walk_end=0)
    event = decode_event(ctypes.addressof(raw), ctypes.sizeof(raw))
    assert len(event.addresses) == 127


@pytest.mark.parametrize("event_type,walk_end,size", [(99, 0, 100), (1, 77, None), (1, 0, 64), (2, 0, 8)])
def test_malformed_records_raise(event_type, walk_end, size):
    raw = _RawSample(event_type=event_type, walk_end=walk_end)
    with pytest.raises(MalformedEvent):
        decode_event(ctypes.addressof(raw), size if size is not None else ctypes.sizeof(raw))
