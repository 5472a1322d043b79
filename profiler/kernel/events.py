"""Records that come up from the BPF program, decoded from the ring buffer.

The ctypes layouts are the structs of bpf/jitprof_abi.h (tests/kernel/test_abi.py
compiles the header and checks them).
"""

from __future__ import annotations

import ctypes
import enum
import struct
import sys
from dataclasses import dataclass
from typing import NamedTuple

MAX_FRAMES = 127  # walked by the kernel
MAX_STACK_FRAMES = 2048  # in all, the rest walked from a copy of the stack
COMM_LEN = 16
CONTEXT_WAKE = 0x80  # a sample's context_kind: its read stopped short and it woke the ring's reader
THREAD_CONTEXT_BYTES = 176  # of an OpenTelemetry thread context record, or a node one, at most, in a sample


class EventType(enum.IntEnum):
    SAMPLE = 1
    FORK = 2
    EXEC = 3
    EXIT = 4
    MAPS_CHANGED = 5
    DISCOVERED = 6  # --all: a process sampled for the first time
    THREAD_WAITS = 7  # --off-cpu: a thread exits with waits not reported (address: ns, length: how many)
    WORK_STARTED = 8  # --off-cpu: a pool thread starts a work item (address: its key, the time it was submitted)
    THREAD_RUNNABLE = 9  # --off-cpu: a thread exits with time runnable not reported (address: ns)
    WAITS_WITHOUT_RSEQ = 10  # --off-cpu: a thread without rseq waits: report waits at system calls' returns
    # Not the kernel ring's: from its mapping records (profiler/kernel/mapping_records.py).
    EXEC_MAPPED = 11  # a process made [address, address + length) executable (any process: the followed are kept)
    MAPPINGS_LOST = 12  # records lost to a full ring: every followed process's maps are read again


# Kinds user space makes itself, never in the kernel's ring (their codes are none of jitprof_abi.h's).
USER_SPACE_EVENTS = frozenset({EventType.EXEC_MAPPED, EventType.MAPPINGS_LOST})


class WalkEnd(enum.IntEnum):
    """How the in-kernel stack walk ended."""

    COMPLETE = 0
    TRUNCATED = 1  # hit the frame limit
    NO_MAPPING = 2  # an address outside every known executable mapping
    READ_FAULT = 3  # the stack could not be read
    BAD_FRAME = 4  # the frame-pointer chain went backwards
    NO_USER_REGS = 5  # no user registers to start from
    DEFERRED = 6  # the kernel sent a stack copy: user space finishes the walk
    COPY_TOO_SHORT = 7  # finished from a copy that did not reach the end of the stack
    THREAD_EXITING = 8  # in the kernel on its way out, its user memory gone: no user stack

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", " ")

    @property
    def cut_short(self) -> bool:
        """Did the walk stop before the end of a stack that was there?"""
        return self not in (WalkEnd.COMPLETE, WalkEnd.THREAD_EXITING)


class Counter(enum.IntEnum):
    """Indexes of the BPF per-CPU counter array."""

    SAMPLES = 0
    RINGBUF_FULL = 1
    KSTACK_FAILED = 2
    EVENTS_LOST = 3
    OFF_CPU_UNTRACKED = 4


COUNTER_COUNT = len(Counter)


class _RawSampleHeader(ctypes.Structure):
    """Followed by frame_count addresses, and for a deferred walk by a
    _RawStackCopy and its bytes."""

    _fields_ = [
        ("event_type", ctypes.c_uint32),
        ("pid", ctypes.c_uint32),
        ("tid", ctypes.c_uint32),
        ("cpu", ctypes.c_uint16),
        ("v8_frame_count", ctypes.c_uint16),
        ("time_ns", ctypes.c_uint64),
        ("kernel_stack_id", ctypes.c_int32),
        ("frame_count", ctypes.c_uint16),
        ("walk_end", ctypes.c_uint8),
        ("user_mode", ctypes.c_uint8),
        ("comm", ctypes.c_char * COMM_LEN),
        ("off_cpu_ns", ctypes.c_uint64),
        ("short_wait_ns", ctypes.c_uint64),
        ("short_waits", ctypes.c_uint32),
        ("off_cpu_flags", ctypes.c_uint32),
        ("work", ctypes.c_uint64),
        ("parent_work", ctypes.c_uint64),
        ("runnable_ns", ctypes.c_uint64),
        ("context_size", ctypes.c_uint8),
        ("context_kind", ctypes.c_uint8),
        ("async_count", ctypes.c_uint8),
        ("async_flags", ctypes.c_uint8),
        ("reserved", ctypes.c_char * 4),
        ("context", ctypes.c_char * THREAD_CONTEXT_BYTES),
    ]


OFF_CPU_STACK_MOVED = 1
SAMPLE_SUBMITS_WORK = 2
OFF_CPU_PREEMPTED = 4


class _RawV8Frame(ctypes.Structure):
    _fields_ = [
        ("shared", ctypes.c_uint64),
        ("code", ctypes.c_uint64),
        ("bytecode_array", ctypes.c_uint64),
        ("bytecode_offset", ctypes.c_int32),
        ("frame_index", ctypes.c_uint16),
        ("flags", ctypes.c_uint16),
    ]


class _RawAsyncFrame(ctypes.Structure):
    _fields_ = [
        ("shared", ctypes.c_uint64),
        ("position", ctypes.c_int32),
        ("kind", ctypes.c_uint16),
        ("reserved", ctypes.c_uint16),
    ]


MAX_ASYNC_FRAMES = 64
V8_ASYNC_CUT = 1  # struct sample_event.async_flags: the chain went on past what was read


class AsyncKind(enum.IntEnum):
    """What awaits: struct v8_async_frame.kind."""

    FUNCTION = 1
    GENERATOR = 2
    ALL = 3
    ALL_SETTLED = 4
    ANY = 5


class AsyncFrameSlots(NamedTuple):
    """One async caller as the kernel read it (the target's words, unchecked):
    the awaiting function's SharedFunctionInfo and its generator's bytecode
    offset, or a combinator (shared 0) and its element's index."""

    kind: int  # AsyncKind
    shared: int
    position: int


V8_NO_BYTECODE_OFFSET = -1
V8_FRAME_INTERPRETER = 1
V8_FUNCTION_WINDOW = 32
V8_SLOTS_BYTES = 40  # a JS frame's slots read below its frame pointer
# A HotSpot interpreted frame's slots, from its frame pointer (sent as a V8FrameSlots: Method* as shared, bcp as bytecode_array).
HOTSPOT_FP_METHOD = -24
HOTSPOT_FP_BCP = -64
HOTSPOT_SLOTS_BYTES = 64
MAX_V8_FRAMES = MAX_FRAMES  # JS frames sent per sample


class _RawStackCopy(ctypes.Structure):
    _fields_ = [
        ("pc", ctypes.c_uint64),
        ("sp", ctypes.c_uint64),
        ("fp", ctypes.c_uint64),
        ("rbx", ctypes.c_uint64),
        ("copy_length", ctypes.c_uint32),
        ("flags", ctypes.c_uint16),
        ("holes", ctypes.c_uint16),
    ]


STACK_COPY_REACHED_END = 1
STACK_COPY_EXACT_PC = 2
STACK_COPY_PAGED = 4
STACK_COPY_PAGE_BYTES = 4096


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
class StackCopy:
    """Where a deferred walk resumes, and the user stack from sp up (or
    from sp's page, read page by page: pages not in memory are holes)."""

    pc: int
    sp: int
    fp: int
    exact_pc: bool  # pc is not a return address
    reached_end: bool  # memory beyond the copy was not readable
    data: bytes
    rbx: int = 0  # 0: not known
    paged: bool = False  # data starts at sp's page
    holes: int = 0  # paged: bit i set, data's page i was not readable (zeros)

    @property
    def address(self) -> int:
        """Where data[0] was in the process."""
        return self.sp & ~(STACK_COPY_PAGE_BYTES - 1) if self.paged else self.sp

    def bytes_at(self, address: int, length: int) -> bytes | None:
        """length bytes at a user address, if the copy holds them all."""
        offset = address - self.address
        if offset < 0 or length <= 0 or offset + length > len(self.data):
            return None
        for page in range(offset // STACK_COPY_PAGE_BYTES, (offset + length - 1) // STACK_COPY_PAGE_BYTES + 1):
            if self.holes >> page & 1:
                return None
        return self.data[offset : offset + length]

    def word_at(self, address: int) -> int | None:
        """The 8 bytes at a user address, if the copy holds them."""
        word = self.bytes_at(address, 8)
        return int.from_bytes(word, "little") if word is not None else None


class V8FrameSlots(NamedTuple):
    """What the kernel read of one JS frame (the target's words, unchecked):
    its function's SharedFunctionInfo and code, and the frame's bytecode
    array and offset slots (meaningful for interpreted and baseline frames).
    (A named tuple: made for every JS frame of every sample, several times
    faster than a frozen dataclass, and as immutable and hashable.)"""

    frame_index: int  # the address it belongs to, 0 the leaf
    shared: int
    code: int  # from V8 13 a dispatch handle, not a pointer
    bytecode_array: int
    bytecode_offset: int  # V8_NO_BYTECODE_OFFSET: the slot held no Smi
    interpreter: bool  # the pc is in V8's builtins
    late: bool = False  # read from a stack copy in user space, its function after the sample


@dataclass(slots=True)  # (not frozen: made for every sample, and never changed)
class RawSample:
    """One sample as the kernel took it: addresses leaf first. A deferred
    walk (walk_end DEFERRED) carries the stack to finish it with."""

    pid: int
    tid: int
    cpu: int
    time_ns: int
    comm: str
    addresses: tuple[int, ...]
    walk_end: WalkEnd
    kernel_stack_id: int
    user_mode: bool
    stack_copy: StackCopy | None = None
    v8_frames: tuple[V8FrameSlots, ...] = ()  # by frame_index, each index at most once
    # The callers' words as the kernel wrote them (their addresses and V8
    # slots, not the leaf's): one compact key under which the names of a
    # stack's callers are remembered. Empty once user space changed the stack.
    caller_words: bytes = b""
    # --off-cpu: a wait's nanoseconds off the CPU (0: a CPU sample), and the
    # thread's waits too short to record one by one since its last record.
    off_cpu_ns: int = 0
    short_wait_ns: int = 0
    short_waits: int = 0
    stack_moved: bool = False  # the wait's stack was gone by its end: no frames
    # A threadpool's work item (its key): the one the thread runs, or the one
    # this stack submits (submits_work; parent_work: the one whose completion
    # submits it), or the one a pool thread starts (work_started; off_cpu_ns:
    # how long it was queued).
    work: int = 0
    parent_work: int = 0
    submits_work: bool = False
    work_started: bool = False
    runnable_ns: int = 0  # the thread's time preempted, waiting for a CPU, since its last record
    preempted: bool = False  # no sample or wait of its own: runnable_ns under the stack it was preempted in
    time_only: bool = False  # no sample or wait of its own: a thread's time not reported yet (its exit, the run's end)
    thread_context: bytes = b""  # the thread's context record at the sample (its first bytes; b"": none)
    context_kind: int = 0  # whose: an OpenTelemetry thread context's (0) or node's AsyncLocalStorage (1)
    labels: int = 0  # its label set in the profile (set as it is named: Sample.labels)
    # The async functions awaiting the running one, innermost first, and
    # whether the chain went on past them.
    async_frames: tuple[AsyncFrameSlots, ...] = ()
    async_cut: bool = False

    @property
    def leaf_v8_frame(self) -> V8FrameSlots | None:
        return leaf_v8_frame(self.v8_frames)


def leaf_v8_frame(v8_frames: tuple[V8FrameSlots, ...]) -> V8FrameSlots | None:
    """The leaf's V8 slots, if the kernel read them: it writes them first."""
    return v8_frames[0] if v8_frames and v8_frames[0].frame_index == 0 else None


@dataclass(frozen=True)
class ProcessEvent:
    """A process's fork, exec, exit or new code, from the ring or the mapping records."""

    event_type: EventType
    pid: int
    tid: int
    parent_pid: int
    time_ns: int
    comm: str
    address: int = 0  # MAPS_CHANGED: the range that became executable
    length: int = 0  # (EXEC: the exec count)

    @property
    def exec_count(self) -> int:
        """EXEC: how many times the process has exec'd since it was followed
        (the count maps are read at: see MappingTracker.refresh)."""
        return self.length if self.event_type is EventType.EXEC else 0


@dataclass
class KernelTraffic:
    """What came up the ring buffer: the price of collecting the profile."""

    records: int = 0
    bytes: int = 0
    samples: int = 0
    sample_bytes: int = 0
    stack_copies: int = 0  # samples the kernel could not walk to the end (see late walks)
    stack_copy_bytes: int = 0  # of which copied stack


class MalformedEvent(ValueError):
    pass


def decode_event(record: memoryview) -> RawSample | ProcessEvent:
    """Decode one ring-buffer record (a view of its bytes in a batch)."""
    size = len(record)
    if size < 4:
        raise MalformedEvent(f"record of {size} bytes")
    (event_type,) = _EVENT_TYPE.unpack_from(record)
    if event_type == EventType.SAMPLE:
        return _decode_sample(record, size)
    if EventType.FORK <= event_type <= EventType.WAITS_WITHOUT_RSEQ:
        if size < _PROCESS_EVENT.size:
            raise MalformedEvent(f"process event of {size} bytes")
        _type, pid, tid, parent_pid, time_ns, comm, address, length = _PROCESS_EVENT.unpack_from(record)
        return ProcessEvent(
            event_type=EventType(event_type),
            pid=pid,
            tid=tid,
            parent_pid=parent_pid,
            time_ns=time_ns,
            comm=_command_name(comm),
            address=address,
            length=length,
        )
    raise MalformedEvent(f"event type {event_type}")


_STRUCT_CODES: dict[object, str] = {
    ctypes.c_uint8: "B",
    ctypes.c_uint16: "H",
    ctypes.c_uint32: "I",
    ctypes.c_int32: "i",
    ctypes.c_uint64: "Q",
}


def _struct_of(layout: type[ctypes.Structure]) -> struct.Struct:
    """The layout's fields, in order, for struct: a record's fields in one
    call, several times faster than reading them one ctypes call each (the
    sampling thread decodes every sample)."""
    codes = []
    for field in layout._fields_:
        field_type = field[1]
        if isinstance(field_type, type) and issubclass(field_type, ctypes.Array):
            assert field_type._type_ is ctypes.c_char, field_type  # char[N]
            codes.append(f"{field_type._length_}s")
        else:
            codes.append(_STRUCT_CODES[field_type])
    packed = struct.Struct("<" + "".join(codes))
    assert packed.size == ctypes.sizeof(layout), layout  # no padding the format would miss
    return packed


_EVENT_TYPE = struct.Struct("<I")
_SAMPLE_HEADER = _struct_of(_RawSampleHeader)
_V8_FRAME = _struct_of(_RawV8Frame)
_ASYNC_FRAME = _struct_of(_RawAsyncFrame)
_STACK_COPY = _struct_of(_RawStackCopy)
_PROCESS_EVENT = _struct_of(_RawProcessEvent)
_ADDRESSES = [struct.Struct(f"<{count}Q") for count in range(MAX_FRAMES + 1)]
_WALK_ENDS = {int(end): end for end in WalkEnd}
_HEADER_SIZE = _SAMPLE_HEADER.size
_COPY_SIZE = _STACK_COPY.size
_V8_FRAME_SIZE = _V8_FRAME.size
_MAX_COMMAND_NAMES = 4096
_command_names: dict[bytes, str] = {}
_MAX_IDS = 1 << 16
_ids: dict[int, int] = {}


def _command_name(raw: bytes) -> str:
    """One string per command name, not per sample."""
    name = _command_names.get(raw)
    if name is None:
        if len(_command_names) >= _MAX_COMMAND_NAMES:
            _command_names.clear()
        name = _command_names[raw] = sys.intern(raw.split(b"\0", 1)[0].decode("utf-8", "replace"))
    return name


def _one_id(value: int) -> int:
    """One int object per pid or tid, not one per sample: a run keeps its
    samples (each of those is 28 bytes, a third of what a sample adds)."""
    kept = _ids.setdefault(value, value)
    if len(_ids) > _MAX_IDS:
        _ids.clear()
    return kept


def _decode_sample(record: memoryview, size: int) -> RawSample:
    if size < _HEADER_SIZE:
        raise MalformedEvent(f"sample of {size} bytes")
    (
        _type,
        pid,
        tid,
        cpu,
        v8_count,
        time_ns,
        kernel_stack_id,
        count,
        walk_end_value,
        user_mode,
        comm,
        off_cpu_ns,
        short_wait_ns,
        short_waits,
        off_cpu_flags,
        work,
        parent_work,
        runnable_ns,
        context_size,
        context_kind,
        async_count,
        async_flags,
        _reserved,
        context,
    ) = _SAMPLE_HEADER.unpack_from(record)
    addresses_end = _HEADER_SIZE + 8 * count
    if count > MAX_FRAMES or size < addresses_end:
        raise MalformedEvent(f"sample of {size} bytes with {count} frames")
    walk_end = _WALK_ENDS.get(walk_end_value)
    if walk_end is None:
        raise MalformedEvent(f"walk end {walk_end_value}")
    v8_frames: tuple[V8FrameSlots, ...] = ()
    callers_end = _HEADER_SIZE + 8 if count else _HEADER_SIZE  # the leaf's address is not a caller's
    caller_words = bytes(record[callers_end:addresses_end])
    if v8_count:
        v8_end = addresses_end + v8_count * _V8_FRAME_SIZE
        if v8_count > count or size < v8_end:
            raise MalformedEvent(f"sample of {size} bytes with {v8_count} V8 frames")
        v8_frames = tuple(
            V8FrameSlots(index, shared, code, bytecode_array, offset, bool(flags & V8_FRAME_INTERPRETER))
            for shared, code, bytecode_array, offset, index, flags in _V8_FRAME.iter_unpack(record[addresses_end:v8_end])
            if index < count
        )
        leaf_slots = _V8_FRAME_SIZE if leaf_v8_frame(v8_frames) is not None else 0
        caller_words += record[addresses_end + leaf_slots : v8_end]
        addresses_end = v8_end
    async_frames: tuple[AsyncFrameSlots, ...] = ()
    if async_count:
        async_end = addresses_end + async_count * _ASYNC_FRAME.size
        if async_count > MAX_ASYNC_FRAMES or size < async_end:
            raise MalformedEvent(f"sample of {size} bytes with {async_count} async frames")
        async_frames = tuple(
            AsyncFrameSlots(kind, shared, position)
            for shared, position, kind, _ in _ASYNC_FRAME.iter_unpack(record[addresses_end:async_end])
        )
        addresses_end = async_end
    stack_copy = None
    if walk_end is WalkEnd.DEFERRED:
        if size < addresses_end + _COPY_SIZE:
            raise MalformedEvent(f"deferred sample of {size} bytes")
        pc, sp, fp, rbx, copy_length, flags, holes = _STACK_COPY.unpack_from(record, addresses_end)
        copy_start = addresses_end + _COPY_SIZE
        if size < copy_start + copy_length:
            raise MalformedEvent(f"stack copy of {copy_length} bytes in {size}")
        stack_copy = StackCopy(
            pc=pc,
            sp=sp,
            fp=fp,
            exact_pc=bool(flags & STACK_COPY_EXACT_PC),
            reached_end=bool(flags & STACK_COPY_REACHED_END),
            data=bytes(record[copy_start : copy_start + copy_length]),
            rbx=rbx,
            paged=bool(flags & STACK_COPY_PAGED),
            holes=holes if flags & STACK_COPY_PAGED else 0,
        )
    elif walk_end is WalkEnd.COPY_TOO_SHORT:
        raise MalformedEvent("walk end from user space in a kernel record")
    return RawSample(
        pid=_one_id(pid),
        tid=_one_id(tid),
        cpu=cpu,
        time_ns=time_ns,
        comm=_command_name(comm),
        addresses=_ADDRESSES[count].unpack_from(record, _HEADER_SIZE),
        walk_end=walk_end,
        kernel_stack_id=kernel_stack_id,
        user_mode=bool(user_mode),
        stack_copy=stack_copy,
        v8_frames=v8_frames,
        caller_words=caller_words,
        async_frames=async_frames,
        async_cut=bool(async_flags & V8_ASYNC_CUT),
        off_cpu_ns=off_cpu_ns,
        short_wait_ns=short_wait_ns,
        short_waits=short_waits,
        stack_moved=bool(off_cpu_flags & OFF_CPU_STACK_MOVED),
        work=work,
        parent_work=parent_work,
        submits_work=bool(off_cpu_flags & SAMPLE_SUBMITS_WORK),
        runnable_ns=runnable_ns,
        preempted=bool(off_cpu_flags & OFF_CPU_PREEMPTED),
        thread_context=context[: min(context_size, THREAD_CONTEXT_BYTES)] if context_size else b"",
        context_kind=context_kind & ~CONTEXT_WAKE,
    )


def _time_record(event: ProcessEvent, **time: int | bool) -> RawSample:
    """A record of a process event's time, without a stack."""
    return RawSample(
        pid=event.pid,
        tid=event.tid,
        cpu=0,
        time_ns=event.time_ns,
        comm=event.comm,
        addresses=(),
        walk_end=WalkEnd.COMPLETE,
        kernel_stack_id=-1,
        user_mode=False,
        **time,  # type: ignore[arg-type]
    )


def thread_waits_record(event: ProcessEvent) -> RawSample:
    """--off-cpu: an exiting thread's waits (EventType.THREAD_WAITS) or time
    runnable (THREAD_RUNNABLE) not reported yet, as the record of time without
    a stack of its own."""
    if event.event_type is EventType.THREAD_RUNNABLE:
        return _time_record(event, runnable_ns=event.address, time_only=True)
    return _time_record(event, short_wait_ns=event.address, short_waits=event.length, time_only=True)


def work_started_record(event: ProcessEvent) -> RawSample:
    """--off-cpu: a pool thread starting a work item (EventType.WORK_STARTED),
    with the time the item was queued."""
    return _time_record(event, off_cpu_ns=max(event.time_ns - event.address, 1), work=event.address, work_started=True)
