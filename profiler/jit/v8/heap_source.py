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
import os
import threading
import time
from dataclasses import dataclass, field

from profiler.jit.symbol_source import JitSymbolSource, RecordedFrames
from profiler.jit.v8.heap import positions
from profiler.jit.v8.heap.layout import LayoutError, V8Layout, layout_of_file
from profiler.jit.v8.heap.memory import ProcessMemory
from profiler.jit.v8.heap.objects import HEAP_OBJECT_TAG, CodeInfo, HeapReader, Script, SharedInfo
from profiler.jit.v8.names import Tier, short_script
from profiler.kernel.events import V8_NO_BYTECODE_OFFSET, V8FrameSlots
from profiler.kernel.mappings import JIT_MODULE
from profiler.kernel.procmaps import MapEntry, read_maps
from profiler.model.profile import Frame, FrameKind
from profiler.native import elf_format
from profiler.native.elf import MAX_ELF_BYTES
from profiler.safety import files

MAX_CACHED = 200_000  # objects remembered per process (a big app has ~50 k functions)
CACHE_LIFETIME_S = 60.0  # then what was read is read again: a full GC may reuse an address
MAX_INLINE_DEPTH = 64


class V8Kernel:
    """What this source asks of the kernel half: to send a process's JS frames."""

    def set_v8_process(self, pid: int, builtins: tuple[int, int], function_window: int, shared_at: int, code_at: int) -> bool: ...

    def clear_v8_process(self, pid: int) -> None: ...


@dataclass
class _Process:
    pid: int
    layout: V8Layout
    reader: HeapReader
    interpreter_entry: tuple[int, int]  # in the process's addresses
    shared: dict[int, SharedInfo | None] = field(default_factory=dict)
    scripts: dict[int, Script] = field(default_factory=dict)
    codes: dict[int, CodeInfo | None] = field(default_factory=dict)
    bytecode_tables: dict[int, bytes | None] = field(default_factory=dict)
    code_starts: list[int] = field(default_factory=list)  # code found by address, sorted by start
    code_ranges: list[tuple[int, int, int]] = field(default_factory=list)  # (start, end, Code)
    maps_seen: dict[int, int] = field(default_factory=dict)
    frames: dict[tuple[object, ...], RecordedFrames | None] = field(default_factory=dict)
    cached_since: float = field(default_factory=time.monotonic)
    named: int = 0
    unnamed: int = 0

    def expire(self, now: float) -> None:
        if now - self.cached_since > CACHE_LIFETIME_S or len(self.frames) + len(self.shared) > MAX_CACHED:
            self.shared.clear()
            self.scripts.clear()
            self.codes.clear()
            self.bytecode_tables.clear()
            self.frames.clear()
            self.code_starts.clear()
            self.code_ranges.clear()
            self.cached_since = now


@dataclass(frozen=True)
class V8HeapReport:
    pid: int
    problem: str  # "" when its frames could be read


class V8HeapSymbols(JitSymbolSource):
    def __init__(self, kernel: V8Kernel | None) -> None:
        self._kernel = kernel
        self._processes: dict[int, _Process] = {}
        self._refused: dict[int, str] = {}  # pid -> why its V8 cannot be read
        self._lock = threading.Lock()

    # Which processes -------------------------------------------------

    def watch(self, pid: int) -> str:
        """A followed process (or one that exec'd): if it runs a V8 jitprof
        can read, have the kernel send its JS frames. Returns why not ("" if
        it can, or runs no V8)."""
        self.forget(pid)
        if self._kernel is None:
            return ""
        try:
            maps = read_maps(pid)
        except OSError:
            return ""
        entries = _v8_mappings(pid, maps)
        if not entries:
            return ""
        try:
            layout = layout_of_file(f"/proc/{pid}/map_files/{entries[0].start:x}-{entries[0].end:x}")
            bias = _builtins_bias(pid, entries, layout.builtins)
            memory = ProcessMemory(pid)
        except LayoutError as error:
            self._refused[pid] = str(error)
            return str(error)
        except (OSError, ValueError) as error:
            return f"cannot read its memory ({error})"
        reader = HeapReader(memory, layout)
        start, end = layout.builtins
        entry_start, entry_end = layout.interpreter_entry
        process = _Process(pid, layout, reader, (entry_start + bias, entry_end + bias))
        window, shared_at, code_at = layout.kernel_window()
        if not self._kernel.set_v8_process(pid, (start + bias, end + bias), window, shared_at, code_at):
            memory.close()
            return "the kernel's table of V8 processes is full"
        with self._lock:
            self._processes[pid] = process
        return ""

    def refused(self, pid: int) -> str:
        return self._refused.get(pid, "")

    def reads(self, pid: int) -> bool:
        with self._lock:
            return pid in self._processes

    def forget(self, pid: int) -> None:
        with self._lock:
            process = self._processes.pop(pid, None)
        self._refused.pop(pid, None)
        if process is not None:
            process.reader.memory.close()
            if self._kernel is not None:
                self._kernel.clear_v8_process(pid)

    def close(self) -> None:
        for pid in list(self._processes):
            self.forget(pid)

    # Frames --------------------------------------------------------------

    def expand_recorded(self, pid: int, address: int, record: V8FrameSlots, leaf: bool) -> RecordedFrames | None:
        with self._lock:
            process = self._processes.get(pid)
        if process is None:
            return None
        now = time.monotonic()
        process.expire(now)
        key = (record.shared, record.code, record.bytecode_offset, record.interpreter, address, leaf)
        if key in process.frames:
            return process.frames[key]
        found = self._frames(process, address, record, leaf)
        process.frames[key] = found
        if found is None:
            process.unnamed += 1
        else:
            process.named += 1
        return found

    def _frames(self, process: _Process, address: int, record: V8FrameSlots, leaf: bool) -> RecordedFrames | None:
        shared = self._shared(process, record.shared)
        if shared is None:
            return None
        if record.interpreter:
            in_entry = process.interpreter_entry[0] <= address < process.interpreter_entry[1]
            if leaf and in_entry:
                return None  # maybe before the frame is built: its slots may be the caller's
            offset = record.bytecode_offset
            if offset == V8_NO_BYTECODE_OFFSET:
                return None
            table = self._bytecode_table(process, record.code)
            if table is None:
                return None
            bytecode_offset = offset - (process.layout.bytecode_data - HEAP_OBJECT_TAG)
            position = positions.position_at(table, bytecode_offset, process.layout.position_statement_bit) if bytecode_offset >= 0 else None
            frame = _frame(shared, Tier.INTERPRETED, position, inlined=False)
            # In a bytecode handler (or another builtin the interpreter called
            # without a frame) that stays the leaf, under its function.
            return RecordedFrames((frame,), keep_native=not in_entry)
        code = self._code(process, record.code, address)
        if code is None:
            return None
        layout = process.layout
        tier = {
            layout.code_kind_baseline: Tier.BASELINE,
            layout.code_kind_maglev: Tier.MAGLEV,
            layout.code_kind_turbofan: Tier.TURBOFAN,
        }.get(code.kind)
        if tier is None:
            return None
        if tier is Tier.BASELINE:
            return RecordedFrames((_frame(shared, tier, None, inlined=False),), keep_native=False)
        position = positions.position_at(code.positions, address - code.instruction_start, layout.position_statement_bit)
        return RecordedFrames(self._inlined(process, shared, code, position, tier), keep_native=False)

    def _inlined(self, process: _Process, shared: SharedInfo, code: CodeInfo, position: int | None, tier: Tier) -> tuple[Frame, ...]:
        """The frames at a position of optimized code: the functions inlined
        there (innermost last), from its deoptimization data."""
        if position is None or positions.inlining_id(position) == 0:
            return (_frame(shared, tier, position, inlined=False),)
        inlining = self._inlining(process, code)
        if inlining is None:
            return (_frame(shared, tier, None, inlined=False),)
        functions, table = inlining
        chain: list[Frame] = []
        seen = 0
        while position is not None and positions.inlining_id(position) != 0 and seen < MAX_INLINE_DEPTH:
            seen += 1
            index = positions.inlining_id(position) - 1
            if (index + 1) * 16 > len(table):
                return (_frame(shared, tier, None, inlined=False),)
            caller_position = int.from_bytes(table[index * 16 : index * 16 + 8], "little")
            function_index = int.from_bytes(table[index * 16 + 8 : index * 16 + 12], "little", signed=True)
            inlined_shared = functions[function_index] if 0 <= function_index < len(functions) else None
            if inlined_shared is None:
                return (_frame(shared, tier, None, inlined=False),)
            chain.append(_frame(inlined_shared, tier, position, inlined=True))
            if positions.inlining_id(caller_position) >= index + 1:
                return (_frame(shared, tier, None, inlined=False),)  # ids only go down: a loop is forged
            position = caller_position
        chain.append(_frame(shared, tier, position, inlined=False))
        chain.reverse()
        return tuple(chain)

    def _inlining(self, process: _Process, code: CodeInfo) -> tuple[list[SharedInfo | None], bytes] | None:
        reader, layout = process.reader, process.layout
        if not code.deoptimization_data:
            return None
        data = reader.array_bytes(code.deoptimization_data, layout.type_fixed_arrays, layout.array_data, 8)
        needed = max(layout.deopt_inlined_count, layout.deopt_literals, layout.deopt_inlining_positions) + 1
        if data is None or len(data) < needed * 8:
            return None
        words = [int.from_bytes(data[index * 8 : index * 8 + 8], "little") for index in range(needed)]
        count_word = words[layout.deopt_inlined_count]
        if count_word & 0xFFFFFFFF:
            return None
        count = count_word >> 32
        literals = reader.array_bytes(
            words[layout.deopt_literals], layout.type_weak_fixed_arrays | layout.type_fixed_arrays, layout.array_data, 8
        )
        table = reader.byte_array(words[layout.deopt_inlining_positions])
        if literals is None or table is None or count * 8 > len(literals):
            return None
        functions = [
            self._shared(process, int.from_bytes(literals[index * 8 : index * 8 + 8], "little")) for index in range(count)
        ]
        return functions, table

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
                return self._code_object(process, known)
        found = process.reader.code_containing(address, process.maps_seen)
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


def _frame(shared: SharedInfo, tier: Tier, position: int | None, inlined: bool) -> Frame:
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
    display = f"{shared.name or '(anonymous)'} {short_script(file)}"
    if function_line:
        display += f":{function_line}"
    return Frame(display.strip(), JIT_MODULE, FrameKind.JIT, file, line, column, tier.value, inlined, exact, function_line)


def _v8_mappings(pid: int, maps: list[MapEntry]) -> list[MapEntry]:
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


def _builtins_bias(pid: int, entries: list[MapEntry], builtins: tuple[int, int]) -> int:
    """What to add to the file's addresses of the builtins for the addresses
    they run at. V8 may map them a second time, apart from the rest of the
    text (near its JIT code, for short calls): that copy is the one that runs."""
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
    entry = min(holding, key=lambda entry: entry.end - entry.start)  # the builtins' own mapping, if any
    return entry.start + file_start - entry.offset - builtins[0]
