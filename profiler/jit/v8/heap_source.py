"""JavaScript frames named from V8's own objects, in any node process, with
no flag and no restart: the kernel sends, with each JS frame, its function's
SharedFunctionInfo and its code (or, in the interpreter, its bytecode array
and offset); this source reads those objects from the live process's memory
(/proc/PID/mem, read-only) through the layout of its binary's V8
(jit/v8/heap/layout.py) and gives the frame its function, script, line and
column, tier and the functions the JIT inlined into it.

Everything read is checked (jit/v8/heap/objects.py): an object that moved or
died since the sample reads as the wrong type, a code object that is not the
one the pc ran is outside its range, and the frame is left to the other
sources (perf map, code log) or unnamed, never misnamed. What is read is
cached per object, so a steady program costs a few reads per new function.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import functools
import os
import queue
import struct
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from profiler.jit.symbol_source import JitSymbolSource, RecordedFrames
from profiler.jit.v8.heap import positions
from profiler.jit.v8.heap.layout import LayoutError, V8Layout, layout_of_file
from profiler.jit.v8.heap.objects import HEAP_OBJECT_TAG, CodeInfo, HeapReader, Script, SharedInfo, is_smi, smi_value
from profiler.jit.v8.names import ASYNC_PREFIX, Tier, js_display
from profiler.kernel.address_spaces import JIT_MODULE
from profiler.kernel.events import (
    MAX_ASYNC_FRAMES,
    MAX_STACK_FRAMES,
    V8_FUNCTION_WINDOW,
    V8_NO_BYTECODE_OFFSET,
    V8_SLOTS_BYTES,
    AsyncFrameSlots,
    AsyncKind,
    RawSample,
    StackCopy,
    V8FrameSlots,
)
from profiler.kernel.late_walks import WalkedFrame
from profiler.kernel.process_memory import USER_SPACE_END, MemoryThread, ProcessMemory
from profiler.kernel.procmaps import MapEntry, read_maps
from profiler.model.profile import Frame, FrameKind
from profiler.native import elf_format, library
from profiler.native.elf import MAX_ELF_BYTES
from profiler.safety import files

MAX_CACHED = 200_000  # objects remembered per process (a big app has ~50 k functions)
MAX_CACHED_LINE_ENDS = 8 << 20  # scripts' line ends remembered per process (32 MiB; a large bundle has 0.1 M lines)
CACHE_LIFETIME_S = 60.0  # then what was read is read again: a full GC may reuse an address
RETRY_FAILED_S = 0.5  # a frame that could not be named is tried again after this
MAX_NOTED_CALLERS = 4096  # per process (about 2 MiB)
MAX_AHEAD = 100_000  # frames waiting to be named ahead of the symbolizer
MAX_COPIES_AHEAD = 64  # stack copies waiting to be read from ahead of the symbolizer
MAX_EARLY_READS = 512  # stack copies whose functions were read at sample time, kept until walked
_SLOTS = struct.Struct("<5Q")  # bytecode offset, bytecode array, argument count, function, context
FUNCTION_SLOT = -V8_SLOTS_BYTES + 3 * 8  # from a JS frame's frame pointer: its JSFunction (the fourth of _SLOTS)
_U32 = struct.Struct("<I")
_S32 = struct.Struct("<i")
MAX_INLINE_DEPTH = 64
MAX_INLINED_FUNCTIONS = 4096
INLINING_POSITION_BYTES = 16


class V8Kernel(Protocol):
    """What this source asks of the kernel half: to send a process's JS frames."""

    def set_v8_process(
        self, pid: int, builtins: list[tuple[int, int]], function_window: int, shared_at: int, code_at: int
    ) -> bool: ...

    def clear_v8_process(self, pid: int) -> None: ...

    def set_v8_async(self, pid: int, config: dict[str, int | tuple[int, ...]]) -> bool: ...

    def clear_v8_async(self, pid: int) -> None: ...


def _frame_key(record: V8FrameSlots, address: int, leaf: bool) -> tuple[object, ...]:
    """What names a frame: the same words at the same address name it the same."""
    return (record.shared, record.code, record.bytecode_array, record.bytecode_offset, record.interpreter, address, leaf)


@dataclass
class _Process:
    """One node process whose V8 objects are read: its layout and what was read."""

    pid: int
    layout: V8Layout
    reader: HeapReader
    thread: MemoryThread  # all reading of its memory is done here
    interpreter_entries: list[tuple[int, int]]  # in the process's addresses (each copy of the builtins)
    builtins: list[tuple[int, int]]  # the builtins' own ranges (each copy)
    shared: dict[int, SharedInfo | None] = field(default_factory=dict)
    scripts: dict[int, Script] = field(default_factory=dict)
    codes: dict[int, CodeInfo | None] = field(default_factory=dict)
    bytecode_tables: dict[int, bytes | None] = field(default_factory=dict)
    code_starts: list[int] = field(default_factory=list)  # code found by address, sorted by start
    code_ranges: list[tuple[int, int, int]] = field(default_factory=list)  # (start, end, Code)
    inlinings: dict[int, _Inlining | None] = field(default_factory=dict)
    # Whose each BytecodeArray is, from interpreted frames the kernel read at
    # sample time: a frame walked later from a stack copy is named by its
    # bytecode, not by a function read after the sample (which may have moved).
    bytecode_owners: dict[int, int] = field(default_factory=dict)
    frames: dict[tuple[object, ...], RecordedFrames] = field(default_factory=dict)
    async_names: dict[AsyncFrameSlots, Frame | None] = field(default_factory=dict)
    # When naming it whole last failed, and what could be said (its function alone).
    failed: dict[tuple[object, ...], tuple[float, RecordedFrames | None]] = field(default_factory=dict)
    ahead: set[tuple[object, ...]] = field(default_factory=set)  # frames queued to be named ahead
    # Samples' callers (their words) whose frames were queued or known, while
    # the caches are of noted_generation: a loop's samples differ in their leaf.
    noted_callers: set[bytes] = field(default_factory=set)
    noted_generation: int = 0
    # What the functions of a stack copy's frames were just after its sample
    # (by the copy's id, checked by a weak reference to it): the walk of the
    # copy, seconds later, names them by these, not by what has moved since.
    early_reads: collections.OrderedDict[int, tuple[weakref.ref[StackCopy], dict[int, bytes]]] = field(
        default_factory=collections.OrderedDict
    )
    cached_since: float = field(default_factory=time.monotonic)
    scripts_counted: int = 0  # how many scripts line_ends counts
    line_ends: int = 0
    named: int = 0
    unnamed: int = 0
    generation: int = 0  # of the caches

    def expire(self, now: float) -> None:
        cached = len(self.frames) + len(self.shared) + len(self.failed) + len(self.bytecode_owners)
        # A target can compile one long source under many names: each is a
        # script of its own. Scripts are only added between expiries: counted when one is.
        if len(self.scripts) != self.scripts_counted:
            self.scripts_counted = len(self.scripts)
            self.line_ends = sum(len(script.line_ends) for script in self.scripts.values() if script.line_ends is not None)
        too_many = cached > MAX_CACHED or self.line_ends > MAX_CACHED_LINE_ENDS
        if now - self.cached_since > CACHE_LIFETIME_S or too_many:
            self.generation += 1
            self.shared.clear()
            self.scripts.clear()
            self.codes.clear()
            self.bytecode_tables.clear()
            self.frames.clear()
            self.async_names.clear()
            self.failed.clear()
            self.code_starts.clear()
            self.code_ranges.clear()
            self.inlinings.clear()
            self.bytecode_owners.clear()
            self.cached_since = now


@dataclass(frozen=True)
class _Inlining:
    """An optimized code's inlined functions and their call positions."""

    shared: int  # the code's own function (tagged SharedFunctionInfo)
    functions: tuple[SharedInfo | None, ...]  # inlined, by the ids the positions table uses
    positions: bytes  # 16 bytes each: the caller's position, the function's index


@dataclass(frozen=True)
class V8HeapReport:
    """Whether one process's V8 objects could be read, for the end of a run."""

    pid: int
    problem: str  # "" when its frames could be read


class V8HeapSymbols(JitSymbolSource):
    def __init__(
        self,
        kernel: V8Kernel | None,
        expand_inlining: bool = True,
        runs_v8: Callable[[int], bool] = lambda _pid: True,
        async_callers: bool = True,
    ) -> None:
        self._kernel = kernel
        self._async_callers = async_callers  # have the kernel read each sample's async callers
        self._async_refused: dict[int, str] = {}  # pid -> why its async callers cannot be read
        self._async_said: set[str] = set()  # the reasons told
        self._runs_v8 = runs_v8  # is a live process one of V8's (node)? Others are not looked at
        self._expand_inlining = expand_inlining  # else inlined code counts in its caller, at the call
        # JS frames are named as their samples arrive, on a thread of their
        # own, while the process lives: the symbolizer may be seconds behind
        # (a cold start), and a short-lived process gone by then.
        self._ahead: queue.SimpleQueue[tuple[int, int, V8FrameSlots | AsyncFrameSlots, bool, tuple[object, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._ahead_count = 0
        self._ahead_thread: threading.Thread | None = None
        # A deep stack's frames past the kernel's walk are walked from a copy
        # of the stack when the symbolizer comes to it, maybe seconds later:
        # by then a scavenge has moved their functions. Their functions are
        # read as the copy arrives, on a thread of its own (the frame queue
        # may be long).
        self._copies: queue.SimpleQueue[tuple[int, RawSample] | None] = queue.SimpleQueue()
        self._copies_count = 0
        self._copies_thread: threading.Thread | None = None
        self._processes: dict[int, _Process] = {}
        self._refused: dict[int, str] = {}  # pid -> why its V8 cannot be read
        self._lock = threading.Lock()

    # Which processes -------------------------------------------------

    def watch(self, pid: int) -> None:
        """A followed process (or one that exec'd): if it runs a V8 jitprof
        can read, have the kernel send its JS frames (else refused(pid) says why)."""
        self.forget(pid)  # an exec: what was known is another program's
        if self._kernel is None or not self._runs_v8(pid):
            return
        try:
            maps = read_maps(pid)
        except OSError:
            return
        entries = node_code_mappings(pid, maps)
        if not entries:
            return
        try:
            layout = layout_of_file(f"/proc/{pid}/map_files/{entries[0].start:x}-{entries[0].end:x}")
            biases = _builtins_biases(pid, entries, layout.builtins)
            memory = ProcessMemory(pid)
        except LayoutError as error:
            self._refused[pid] = str(error)
            return
        except (OSError, ValueError) as error:
            self._refused[pid] = f"cannot read its memory ({error})"
            return
        reader = HeapReader(memory, layout)
        start, end = layout.builtins
        entry_start, entry_end = layout.interpreter_entry
        builtins = [(start + bias, end + bias) for bias in biases]
        process = _Process(
            pid, layout, reader, MemoryThread(memory), [(entry_start + bias, entry_end + bias) for bias in biases], builtins
        )
        window, shared_at, code_at = layout.kernel_window()
        if not self._kernel.set_v8_process(pid, builtins, window, shared_at, code_at):
            memory.close()
            self._refused[pid] = "the kernel's table of V8 processes is full"
            return
        with self._lock:
            self._processes[pid] = process
        if self._async_callers:
            config = layout.async_config()
            if isinstance(config, str):
                self._async_refused[pid] = config
            elif not self._kernel.set_v8_async(pid, config):
                self._async_refused[pid] = "the kernel's table of V8 processes is full"

    def async_refused(self, pid: int) -> str:
        """Why a node's async callers are not read ("" if they are, or were not asked)."""
        return self._async_refused.get(pid, "")

    def epoch(self, pid: int) -> tuple[int, int]:
        """What was read is dropped every CACHE_LIFETIME_S: what was named
        from it is named anew after that."""
        with self._lock:
            process = self._processes.get(pid)
        return (process.generation, 0) if process is not None else (0, 0)

    def refused(self, pid: int) -> str:
        return self._refused.get(pid, "")

    def reads(self, pid: int) -> bool:
        with self._lock:
            return pid in self._processes

    def has_source(self, pid: int) -> bool:
        return self.reads(pid)

    def forget(self, pid: int, remove_as: int | None = None) -> list[str]:
        with self._lock:
            process = self._processes.pop(pid, None)
        self._refused.pop(pid, None)
        refused = self._async_refused.pop(pid, "")
        if process is not None:
            process.thread.close()
            if self._kernel is not None:
                self._kernel.clear_v8_process(pid)
                self._kernel.clear_v8_async(pid)
        return self._async_notes([(pid, refused)] if refused else [])

    def warnings(self) -> list[str]:
        return self._async_notes(list(self._async_refused.items()))

    def _async_notes(self, refusals: list[tuple[int, str]]) -> list[str]:
        """Once per reason in a run (a machine's node 20 processes say it once)."""
        notes = []
        for pid, refused in refusals:
            if refused not in self._async_said:
                self._async_said.add(refused)
                notes.append(f"jitprof: note: node (pid {pid}) shows no async callers ([async] frames): {refused}")
        return notes

    def close(self) -> None:
        if self._ahead_thread is not None:
            self._ahead.put(None)
        if self._copies_thread is not None:
            self._copies.put(None)
        for pid in list(self._processes):
            self.forget(pid)

    def record_walked_frames(self, pid: int, frames: list[WalkedFrame], stack: StackCopy) -> tuple[V8FrameSlots, ...]:
        """What the kernel sends of a JS frame, for frames walked in user space
        from a stack copy (the first moments of a process, code just mapped,
        a stack deeper than the kernel walks): the frame's slots from the
        copy; its function's shared info from the owner of its bytecode when
        known, else from the function as read when the copy arrived, else as
        read now (once per function)."""
        with self._lock:
            process = self._processes.get(pid)
            early = process.early_reads.pop(id(stack), None) if process is not None else None
        if process is None:
            return ()
        found: list[tuple[WalkedFrame, bool, int, int, int]] = []
        for frame in frames:
            if len(found) >= MAX_STACK_FRAMES:
                break
            lookup = frame.pc if frame.index == 0 and stack.exact_pc else frame.pc - 1
            interpreter = any(start <= lookup < end for start, end in process.builtins)
            if not (frame.in_jit_code or interpreter):
                continue
            slots = stack.bytes_at(frame.fp - V8_SLOTS_BYTES, V8_SLOTS_BYTES)
            if slots is None:
                continue
            bytecode_offset, bytecode_array, _arguments, function, context = _SLOTS.unpack(slots)
            if not context & 1 or not function & 1:
                continue  # a stub's frame: its marker
            found.append((frame, interpreter, bytecode_offset, bytecode_array, function))
        owners = process.bytecode_owners
        windows = early[1] if early is not None and early[0]() is stack else {}
        unknown = {function for _frame, _interpreter, _offset, array, function in found if array not in owners} - windows.keys()
        if unknown:
            windows = {**windows, **(process.thread.run(functools.partial(self._read_windows, process, unknown)) or {})}
        _window_start, shared_at, code_at = process.layout.kernel_window()
        records: list[V8FrameSlots] = []
        for frame, interpreter, bytecode_offset, bytecode_array, function in found:
            # (In optimized code the slot is a spill slot: its check of the function rejects a wrong owner.)
            owner = owners.get(bytecode_array)  # (the cache may be cleared meanwhile)
            window = windows.get(function)
            if owner is not None:
                shared, code = owner, 0
            elif window is not None:
                shared = int.from_bytes(window[shared_at : shared_at + 8], "little")
                code = int.from_bytes(window[code_at : code_at + 8], "little")
            else:
                continue
            records.append(
                V8FrameSlots(
                    frame.index,
                    shared,
                    code,
                    bytecode_array,
                    _S32.unpack(_U32.pack(bytecode_offset >> 32))[0]
                    if bytecode_offset & 0xFFFFFFFF == 0
                    else V8_NO_BYTECODE_OFFSET,
                    interpreter,
                    late=True,
                )
            )
        return tuple(records)

    @staticmethod
    def _read_windows(process: _Process, functions: set[int]) -> dict[int, bytes]:
        window_start = process.layout.kernel_window()[0]
        windows = {}
        for function in functions:
            window = process.reader.memory.read(function - 1 + window_start, V8_FUNCTION_WINDOW)
            if window is not None:
                windows[function] = window
        return windows

    def note_sample(self, sample: RawSample) -> None:
        """Name the sample's JS frames ahead of the symbolizer, and read the
        functions of those in its stack copy (see __init__)."""
        process = self._processes.get(sample.pid)
        if process is None:
            return
        if sample.stack_copy is not None and self._copies_count < MAX_COPIES_AHEAD:
            if self._copies_thread is None:
                self._copies_thread = threading.Thread(target=self._read_copies, name="jitprof-v8-copies", daemon=True)
                self._copies_thread.start()
            self._copies_count += 1
            self._copies.put((sample.pid, sample))
        if not sample.v8_frames or self._ahead_count >= MAX_AHEAD:
            return
        if self._ahead_thread is None:
            self._ahead_thread = threading.Thread(target=self._name_ahead, name="jitprof-v8-ahead", daemon=True)
            self._ahead_thread.start()
        # A deep program repeats its frames sample after sample: each is queued
        # once, so the queue keeps pace with what is new (a cold start, with the
        # symbolizer far behind, depends on it); a sample whose callers were
        # seen before has only its leaf looked at.
        callers = sample.caller_words
        if process.noted_generation != process.generation or len(process.noted_callers) >= MAX_NOTED_CALLERS:
            process.noted_callers.clear()
            process.noted_generation = process.generation
        records = sample.v8_frames
        if callers and callers in process.noted_callers:
            leaf_slots = sample.leaf_v8_frame
            records = (leaf_slots,) if leaf_slots is not None else ()
        for record in records:
            leaf = record.frame_index == 0
            address = sample.addresses[record.frame_index] - (0 if leaf else 1)
            key = _frame_key(record, address, leaf)
            if key in process.frames or key in process.ahead:
                continue
            process.ahead.add(key)
            self._ahead_count += 1
            self._ahead.put((sample.pid, address, record, leaf, key))
        if callers:
            process.noted_callers.add(callers)
        # The async callers too: a process that exits, or a symbolizer seconds
        # behind (waits are named as their threads' records close), finds them named.
        for slots in sample.async_frames:
            key = ("async", slots)
            if slots in process.async_names or key in process.ahead:
                continue
            process.ahead.add(key)
            self._ahead_count += 1
            self._ahead.put((sample.pid, 0, slots, False, key))

    def _read_copies(self) -> None:
        while True:
            item = self._copies.get()
            if item is None:
                return
            self._copies_count -= 1
            pid, sample = item
            try:
                self._read_copy(pid, sample)
            except Exception:  # a bug: the walk of the copy meets it again, and reports it
                pass

    def _read_copy(self, pid: int, sample: RawSample) -> None:
        """Read the functions of the JS frames in a sample's stack copy while
        they are where the sample saw them. The frames are found by frame
        pointers alone (V8's code always keeps one), in C: a deep stack has a
        thousand frames, a busy program a hundred such samples a second."""
        with self._lock:
            process = self._processes.get(pid)
        stack = sample.stack_copy
        if process is None or stack is None:
            return
        walked = library.walk_copy(
            [library.WalkMapping(0, USER_SPACE_END, 0, library.MAPPING_JIT)],
            library.WalkStack(stack.data, stack.address, stack.reached_end, stack.holes),
            library.WalkRegisters(stack.pc, stack.sp, stack.fp, stack.exact_pc, stack.rbx),
            MAX_STACK_FRAMES - len(sample.addresses),
        )
        functions = set()
        for frame_pointer in walked.frame_pointers:
            function = stack.word_at(frame_pointer + FUNCTION_SLOT)
            if function is not None and function & HEAP_OBJECT_TAG:
                functions.add(function)
        windows = (process.thread.run(functools.partial(self._read_windows, process, functions)) if functions else None) or {}
        with self._lock:
            process.early_reads[id(stack)] = (weakref.ref(stack), windows)
            while len(process.early_reads) > MAX_EARLY_READS:
                process.early_reads.popitem(last=False)

    def _name_ahead(self) -> None:
        while True:
            item = self._ahead.get()
            if item is None:
                return
            self._ahead_count -= 1
            pid, address, record, leaf, key = item
            try:
                if isinstance(record, AsyncFrameSlots):
                    self._name_async_ahead(pid, record)
                else:
                    self.expand_recorded(pid, address, record, leaf)
            except Exception:  # a bug: the symbolizer meets it again, and reports it
                pass
            process = self._processes.get(pid)
            if process is not None:
                process.ahead.discard(key)

    # Frames --------------------------------------------------------------

    def expand_recorded(
        self, pid: int, address: int, record: V8FrameSlots, leaf: bool, time_ns: int = 0
    ) -> RecordedFrames | None:
        with self._lock:
            process = self._processes.get(pid)
        if process is None:
            return None
        now = time.monotonic()
        process.expire(now)
        key = _frame_key(record, address, leaf)
        known = process.frames.get(key)
        if known is not None:
            return known
        failed_at, partly_before = process.failed.get(key, (-RETRY_FAILED_S, None))
        if failed_at > now - RETRY_FAILED_S:
            return partly_before  # tried a moment ago (code being made, or moved, may read right soon)
        found = process.thread.run(lambda: self._frames(process, address, record, leaf))
        if found is None:
            whole_frame = not leaf and not record.late and not record.interpreter
            partly = process.thread.run(lambda: self._function_only(process, record)) if whole_frame else None
            # Read again once the process has exited (its samples named after
            # it), nothing reads: what was read while it lived stays.
            partly = partly or partly_before
            process.unnamed += 1
            process.failed[key] = (now, partly)
            return partly
        process.named += 1
        process.frames[key] = found
        return found

    def _frames(self, process: _Process, address: int, record: V8FrameSlots, leaf: bool) -> RecordedFrames | None:
        if record.late and not record.interpreter and not leaf:
            record = self._owned_by_code(process, address, record)
        shared = self._shared(process, record.shared)
        if shared is None:
            return None
        if record.interpreter:
            in_entry = any(start <= address < end for start, end in process.interpreter_entries)
            if leaf and in_entry:
                return None  # maybe before the frame is built: its slots may be the caller's
            frame = self._interpreted(process, shared, record)
            if frame is not None and not record.late:
                process.bytecode_owners[record.bytecode_array] = record.shared
            # In a bytecode handler (or another builtin the interpreter called
            # without a frame) that stays the leaf, under its function.
            return RecordedFrames((frame,), keep_native=not in_entry) if frame is not None else None
        code = self._code(process, record.code, address)
        if code is None:
            return None
        layout = process.layout
        if code.kind == layout.code_kind_baseline:
            # Its bytecode is the frame's: else the frame is not this code's (a callee's prologue).
            if not self._same_bytecode(process, code.deoptimization_data, record.bytecode_array):
                return None
            return RecordedFrames((_frame(shared, Tier.BASELINE, None, inlined=False),), keep_native=False)
        if code.kind in (layout.code_kind_maglev, layout.code_kind_turbofan):
            tier = Tier.MAGLEV if code.kind == layout.code_kind_maglev else Tier.TURBOFAN
            inlining = self._inlining(process, code)
            if inlining is None or inlining.shared != record.shared:
                return None  # not the frame's function: a callee that has not built its frame yet
            position = positions.position_at(code.positions, address - code.instruction_start, layout.position_statement_bit)
            frames = self._inlined(shared, inlining, position, tier)
            if not self._expand_inlining:
                frames = frames[:1]
            return RecordedFrames(frames, keep_native=False)
        # The interpreter's trampoline, copied per function (node run with
        # --interpreted-frames-native-stack): an interpreted frame.
        frame = self._interpreted(process, shared, record)
        return RecordedFrames((frame,), keep_native=False) if frame is not None else None

    # Async callers ------------------------------------------------------

    def async_callers(self, sample: RawSample) -> tuple[Frame, ...] | None:
        with self._lock:
            process = self._processes.get(sample.pid)
        if process is None or not sample.async_frames:
            return None
        process.expire(time.monotonic())
        named = process.thread.run(lambda: self._async_names(process, sample.async_frames))
        if not named:
            return None
        if sample.async_cut or len(named) < len(sample.async_frames):
            # Cut where a caller could not be named, or past what the kernel read: said, not guessed.
            named.append(Frame(f"{ASYNC_PREFIX}(callers past {len(named)} not read)", JIT_MODULE, FrameKind.ASYNC))
        named.reverse()
        return tuple(named)

    def _name_async_ahead(self, pid: int, slots: AsyncFrameSlots) -> None:
        with self._lock:
            process = self._processes.get(pid)
        if process is not None:
            process.expire(time.monotonic())
            process.thread.run(lambda: self._async_names(process, (slots,)))

    def _async_names(self, process: _Process, slots: tuple[AsyncFrameSlots, ...]) -> list[Frame]:
        """The callers named, innermost first, up to the first that cannot be."""
        named: list[Frame] = []
        for record in slots[:MAX_ASYNC_FRAMES]:
            if record not in process.async_names:
                process.async_names[record] = self._async_name(process, record)
            frame = process.async_names[record]
            if frame is None:
                break
            named.append(frame)
        return named

    def _async_name(self, process: _Process, record: AsyncFrameSlots) -> Frame | None:
        combinator = _COMBINATORS.get(record.kind)
        if combinator is not None:
            index = f" (index {record.position})" if record.position >= 0 else ""
            return Frame(f"{ASYNC_PREFIX}{combinator}{index}", JIT_MODULE, FrameKind.ASYNC, tier=Tier.BUILTIN.value)
        if record.kind not in (AsyncKind.FUNCTION, AsyncKind.GENERATOR):
            return None
        shared = self._shared(process, record.shared)
        if shared is None:
            return None
        position = None
        bytecode = self._bytecode_of(process, record.shared)
        table = self._bytecode_table(process, bytecode) if bytecode else None
        # Like a frame's offset slot, it counts from the array's tagged address.
        offset = record.position - (process.layout.bytecode_data - HEAP_OBJECT_TAG)
        if table is not None and offset >= 0:
            position = positions.position_at(table, offset, process.layout.position_statement_bit)
        frame = _frame(shared, Tier.INTERPRETED, position, inlined=False)
        return dataclasses.replace(frame, name=ASYNC_PREFIX + frame.name, kind=FrameKind.ASYNC, tier="")

    def _bytecode_of(self, process: _Process, shared: int) -> int:
        """A function's BytecodeArray (0: none), from its shared info's data:
        the array itself, an InterpreterData around it, or baseline code
        that keeps either."""
        reader, layout = process.reader, process.layout
        data = reader.field(shared, layout.shared_function_data) or 0
        kind = reader.instance_type(data)
        if kind == layout.type_code:
            code = self._code_object(process, data)
            data = code.deoptimization_data if code is not None else 0
            kind = reader.instance_type(data)
        if kind == layout.type_interpreter_data:
            for offset in (8, 16):  # after a self pointer, in V8 13 on
                inner = reader.field(data, offset) or 0
                if reader.instance_type(inner) == layout.type_bytecode_array:
                    return inner
            return 0
        return data if kind == layout.type_bytecode_array else 0

    def _function_only(self, process: _Process, record: V8FrameSlots) -> RecordedFrames | None:
        """A frame of compiled code below the leaf, read at its sample, whose
        code no longer reads (freed, deoptimized since): its function slot,
        written by its own prologue, still names it; where in it, and what it
        inlined, are not known. (Not a frame whose pc is in V8's builtins:
        many of those hold a function that is not theirs, or none.)"""
        shared = self._shared(process, record.shared)
        if shared is None:
            return None
        return RecordedFrames((_frame(shared, None, None, inlined=False),), keep_native=False)

    def _owned_by_code(self, process: _Process, address: int, record: V8FrameSlots) -> V8FrameSlots:
        """A frame walked from a stack copy, not the leaf: its pc is a return
        address in its own code, and optimized code names its function (the
        function read after the sample may have moved)."""
        code = self._code(process, record.code, address)
        if code is None or code.kind not in (process.layout.code_kind_maglev, process.layout.code_kind_turbofan):
            return record
        inlining = self._inlining(process, code)
        return record if inlining is None else record._replace(shared=inlining.shared)

    def _same_bytecode(self, process: _Process, held: int, bytecode_array: int) -> bool:
        """Is what baseline code holds (its BytecodeArray, or an InterpreterData
        wrapping it) the frame's bytecode?"""
        if held == bytecode_array:
            return True
        reader = process.reader
        if reader.instance_type(held) != process.layout.type_interpreter_data:
            return False
        # Its BytecodeArray comes first (after a self pointer, in V8 13 on).
        return bytecode_array in (reader.field(held, 8), reader.field(held, 16))

    def _interpreted(self, process: _Process, shared: SharedInfo, record: V8FrameSlots) -> Frame | None:
        if record.bytecode_offset == V8_NO_BYTECODE_OFFSET:
            return None
        table = self._bytecode_table(process, record.bytecode_array)
        if table is None:
            return None
        bytecode_offset = record.bytecode_offset - (process.layout.bytecode_data - HEAP_OBJECT_TAG)
        if bytecode_offset < 0:
            return None
        position = positions.position_at(table, bytecode_offset, process.layout.position_statement_bit)
        return _frame(shared, Tier.INTERPRETED, position, inlined=False)

    def _inlined(self, shared: SharedInfo, inlining: _Inlining, position: int | None, tier: Tier) -> tuple[Frame, ...]:
        """The frames at a position of optimized code: the function and those
        inlined there (innermost last), from its deoptimization data."""
        chain: list[Frame] = []
        depth = 0
        table = inlining.positions
        while position is not None and positions.inlining_id(position) != 0:
            inlining_id = positions.inlining_id(position)
            index = inlining_id - 1
            if depth >= MAX_INLINE_DEPTH or (index + 1) * INLINING_POSITION_BYTES > len(table):
                return (_frame(shared, tier, None, inlined=False),)
            depth += 1
            entry = index * INLINING_POSITION_BYTES
            caller_position = int.from_bytes(table[entry : entry + 8], "little")
            function_index = int.from_bytes(table[entry + 8 : entry + 12], "little", signed=True)
            inlined_shared = inlining.functions[function_index] if 0 <= function_index < len(inlining.functions) else None
            if inlined_shared is None or positions.inlining_id(caller_position) >= inlining_id:
                return (_frame(shared, tier, None, inlined=False),)  # ids only go down: a loop is forged
            chain.append(_frame(inlined_shared, tier, position, inlined=True))
            position = caller_position
        chain.append(_frame(shared, tier, position, inlined=False))
        chain.reverse()
        return tuple(chain)

    def _inlining(self, process: _Process, code: CodeInfo) -> _Inlining | None:
        """What optimized code's deoptimization data says: its function, and
        the functions inlined into it with where."""
        if code.deoptimization_data in process.inlinings:
            return process.inlinings[code.deoptimization_data]
        found = self._read_inlining(process, code)
        process.inlinings[code.deoptimization_data] = found
        return found

    def _read_inlining(self, process: _Process, code: CodeInfo) -> _Inlining | None:
        reader, layout = process.reader, process.layout
        if not code.deoptimization_data:
            return None
        data = reader.array_bytes(code.deoptimization_data, layout.type_fixed_arrays, layout.array_data, 8)
        needed = max(layout.deopt_inlined_count, layout.deopt_literals, layout.deopt_inlining_positions, layout.deopt_shared) + 1
        if data is None or len(data) < needed * 8:
            return None
        words = [int.from_bytes(data[index * 8 : index * 8 + 8], "little") for index in range(needed)]
        shared = words[layout.deopt_shared]
        if layout.deopt_shared_wrapped:
            if reader.instance_type(shared) != layout.type_shared_function_info_wrapper:
                return None
            shared = reader.field(shared, 8) or 0
        count_word = words[layout.deopt_inlined_count]
        if not is_smi(count_word) or not 0 <= smi_value(count_word) <= MAX_INLINED_FUNCTIONS:
            return None
        count = smi_value(count_word)
        if count == 0:
            return _Inlining(shared, (), b"")
        literals = reader.array_bytes(
            words[layout.deopt_literals], layout.type_weak_fixed_arrays | layout.type_fixed_arrays, layout.array_data, 8
        )
        table = reader.byte_array(words[layout.deopt_inlining_positions])
        if literals is None or table is None or count * 8 > len(literals):
            return None
        functions = tuple(
            self._shared(process, _wrapped(reader, layout, int.from_bytes(literals[index * 8 : index * 8 + 8], "little")))
            for index in range(count)
        )
        return _Inlining(shared, functions, table)

    def _shared(self, process: _Process, tagged: int) -> SharedInfo | None:
        if tagged not in process.shared:
            process.shared[tagged] = process.reader.shared_info(tagged, process.scripts)
        return process.shared[tagged]

    def _code(self, process: _Process, tagged: int, address: int) -> CodeInfo | None:
        """The code object the pc ran: the function's own code, or (on-stack
        replacement code, code replaced since) the one whose instructions
        hold the pc."""
        code = self._code_object(process, tagged)
        if code is not None and code.instruction_start <= address < code.instruction_start + code.instruction_size:
            return code
        index = bisect.bisect_right(process.code_starts, address) - 1
        if index >= 0:
            start, end, known = process.code_ranges[index]
            if start <= address < end:
                # Code found here before: still there (it may have died since,
                # and its memory gone to other code)?
                fresh = process.reader.code(known)
                if fresh is not None and fresh.instruction_start == start and fresh.instruction_size == end - start:
                    process.codes[known] = fresh
                    return fresh
                del process.code_starts[index], process.code_ranges[index]
        found = process.reader.code_containing(address)
        if found is None:
            return None
        code = self._code_object(process, found)
        if code is None:
            return None
        start = code.instruction_start
        index = bisect.bisect_left(process.code_starts, start)
        process.code_starts.insert(index, start)
        process.code_ranges.insert(index, (start, start + code.instruction_size, found))
        return code

    def _code_object(self, process: _Process, tagged: int) -> CodeInfo | None:
        if tagged not in process.codes:
            process.codes[tagged] = process.reader.code(tagged)
        return process.codes[tagged]

    def _bytecode_table(self, process: _Process, tagged: int) -> bytes | None:
        if tagged not in process.bytecode_tables:
            process.bytecode_tables[tagged] = process.reader.bytecode_positions(tagged)
        return process.bytecode_tables[tagged]

    def reports(self) -> list[V8HeapReport]:
        with self._lock:
            reading = list(self._processes.values())
        return [V8HeapReport(process.pid, "") for process in reading] + [
            V8HeapReport(pid, problem) for pid, problem in self._refused.items()
        ]


# As V8 names them in Error().stack.
_COMBINATORS: dict[int, str] = {
    AsyncKind.ALL: "Promise.all",
    AsyncKind.ALL_SETTLED: "Promise.allSettled",
    AsyncKind.ANY: "Promise.any",
}


def _wrapped(reader: HeapReader, layout: V8Layout, tagged: int) -> int:
    """A SharedFunctionInfo, unwrapped if it is behind a wrapper (V8 12.5 on)."""
    if layout.type_shared_function_info_wrapper >= 0 and reader.instance_type(tagged) == layout.type_shared_function_info_wrapper:
        return reader.field(tagged, 8) or 0
    return tagged


def _frame(shared: SharedInfo, tier: Tier | None, position: int | None, inlined: bool) -> Frame:
    script = shared.script
    file = script.name if script is not None else ""
    function_line = function_column = 0
    if script is not None and shared.start >= 0:
        start = script.position(shared.start)
        if start is not None:
            function_line, function_column = start
    line, column, exact = function_line, function_column, False
    if script is not None and position is not None:
        offset = positions.script_offset(position)
        where = script.position(offset) if offset >= 0 else None
        if where is not None:
            (line, column), exact = where, True
    return Frame(
        js_display(shared.name, file, function_line),
        JIT_MODULE,
        FrameKind.JIT,
        file,
        line,
        column,
        tier.value if tier is not None else "",  # None: not known
        inlined,
        exact,
        function_line,
        function_column,
    )


def node_code_mappings(pid: int, maps: list[MapEntry]) -> list[MapEntry]:
    """The executable mappings of the file V8 is in: libnode.so, else the executable."""
    try:
        executable = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return []
    candidates = [entry for entry in maps if entry.executable and entry.is_file_backed]
    libraries = [entry for entry in candidates if os.path.basename(entry.path).startswith("libnode.so")]
    if libraries:
        return [entry for entry in libraries if entry.path == libraries[0].path]
    return [entry for entry in candidates if entry.path == executable]


def _builtins_biases(pid: int, entries: list[MapEntry], builtins: tuple[int, int]) -> list[int]:
    """What to add to the file's addresses of the builtins for the addresses
    they run at: the file's own mapping, and the second mapping V8 may make
    of them near its JIT code (for short calls; both run)."""
    with files.open_regular(f"/proc/{pid}/map_files/{entries[0].start:x}-{entries[0].end:x}", MAX_ELF_BYTES) as handle:
        segments, _build_id = elf_format.read_load_segments_and_build_id(handle)
    segment = next(
        (segment for segment in segments if segment.vaddr <= builtins[0] < segment.vaddr + max(segment.file_size, 1)), None
    )
    if segment is None:
        raise ValueError("its builtins are in no segment of its file")
    file_start = builtins[0] - segment.vaddr + segment.file_offset
    holding = [entry for entry in entries if entry.offset <= file_start < entry.offset + entry.end - entry.start]
    if not holding:
        raise ValueError("its builtins are not mapped")
    holding.sort(key=lambda entry: entry.end - entry.start, reverse=True)  # the file's text first, then the copy
    return [entry.start + file_start - entry.offset - builtins[0] for entry in holding[:2]]
