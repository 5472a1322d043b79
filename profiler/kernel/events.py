"""Records that come up from the BPF program, decoded from the ring buffer.

The ctypes layouts mirror the structs in bpf/sampler.bpf.c.
"""

from __future__ import annotations

import ctypes
import enum
from dataclasses import dataclass

MAX_FRAMES = 127
COMM_LEN = 16


class EventType(enum.IntEnum):
    SAMPLE = 1
    FORK = 2
    EXEC = 3
    EXIT = 4
    MAPS_CHANGED = 5


class WalkEnd(enum.IntEnum):
    """How the in-kernel stack walk ended."""

    COMPLETE = 0
    TRUNCATED = 1  # hit the frame limit
    NO_MAPPING = 2  # an address outside every known executable mapping
    READ_FAULT = 3  # the stack could not be read
    BAD_FRAME = 4  # the frame-pointer chain went backwards
    NO_USER_REGS = 5  # no user registers to start from

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", " ")


class Counter(enum.IntEnum):
    """Indexes of the BPF per-CPU counter array."""

    SAMPLES = 0
    RINGBUF_FULL = 1
    KSTACK_FAILED = 2
    EVENTS_LOST = 3


COUNTER_COUNT = len(Counter)


class _RawSample(ctypes.Structure):
    _fields_ = [
        ("event_type", ctypes.c_uint32),
        ("pid", ctypes.c_uint32),
        ("tid", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32),
        ("time_ns", ctypes.c_uint64),
        ("kernel_stack_id", ctypes.c_int32),
        ("frame_count", ctypes.c_uint16),
        ("walk_end", ctypes.c_uint8),
        ("user_mode", ctypes.c_uint8),
        ("comm", ctypes.c_char * COMM_LEN),
        ("addresses", ctypes.c_uint64 * MAX_FRAMES),
    ]


class _RawProcessEvent(ctypes.Structure):
    _fields_ = [
        ("event_type", ctypes.c_uint32),
        ("pid", ctypes.c_uint32),
        ("tid", ctypes.c_uint32),
        ("parent_pid", ctypes.c_uint32),
        ("time_ns", ctypes.c_uint64),
        ("comm", ctypes.c_char * COMM_LEN),
        ("address", ctypes.c_uint64),
        ("length", ctypes.c_uint64),
    ]


@dataclass(frozen=True)
class RawSample:
    """One sample as the kernel took it: addresses leaf first."""

    pid: int
    tid: int
    cpu: int
    time_ns: int
    comm: str
    addresses: tuple[int, ...]
    walk_end: WalkEnd
    kernel_stack_id: int
    user_mode: bool


@dataclass(frozen=True)
class ProcessEvent:
    event_type: EventType
    pid: int
    tid: int
    parent_pid: int
    time_ns: int
    comm: str
    address: int = 0  # MAPS_CHANGED: the range that became executable
    length: int = 0


class MalformedEvent(ValueError):
    pass


def decode_event(data: int, size: int) -> RawSample | ProcessEvent:
    """Decode one ring-buffer record (a pointer and its size from BCC)."""
    if size < 4:
        raise MalformedEvent(f"record of {size} bytes")
    event_type = ctypes.cast(data, ctypes.POINTER(ctypes.c_uint32)).contents.value
    if event_type == EventType.SAMPLE:
        if size < ctypes.sizeof(_RawSample):
            raise MalformedEvent(f"sample of {size} bytes")
        raw = ctypes.cast(data, ctypes.POINTER(_RawSample)).contents
        count = min(raw.frame_count, MAX_FRAMES)
        try:
            walk_end = WalkEnd(raw.walk_end)
        except ValueError as error:
            raise MalformedEvent(f"walk end {raw.walk_end}") from error
        return RawSample(
            pid=raw.pid,
            tid=raw.tid,
            cpu=raw.cpu,
            time_ns=raw.time_ns,
            comm=raw.comm.decode("utf-8", "replace"),
            addresses=tuple(raw.addresses[:count]),
            walk_end=walk_end,
            kernel_stack_id=raw.kernel_stack_id,
            user_mode=bool(raw.user_mode),
        )
    if event_type in (EventType.FORK, EventType.EXEC, EventType.EXIT, EventType.MAPS_CHANGED):
        if size < ctypes.sizeof(_RawProcessEvent):
            raise MalformedEvent(f"process event of {size} bytes")
        raw_process = ctypes.cast(data, ctypes.POINTER(_RawProcessEvent)).contents
        return ProcessEvent(
            event_type=EventType(event_type),
            pid=raw_process.pid,
            tid=raw_process.tid,
            parent_pid=raw_process.parent_pid,
            time_ns=raw_process.time_ns,
            comm=raw_process.comm.decode("utf-8", "replace"),
            address=raw_process.address,
            length=raw_process.length,
        )
    raise MalformedEvent(f"event type {event_type}")
