"""What V8's code log says about a process's JIT code, and the source
positions (with inlined functions) of an address in it.

Every isolate (the main thread and each worker) logs to its own file, with
its own script ids and function records; code addresses are process-wide,
so all isolates of a process share one address map. V8 never logs code
deletion: a new object overlapping an older one replaces it. Replaced
objects are kept for a while with the time they were replaced, so a sample
taken before the replacement still resolves to the code it ran.
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from sortedcontainers import SortedList

from profiler.jit.v8.log_parser import (
    MAX_SCRIPT_LINES,
    CodeCreation,
    CodeMove,
    CodeSourceInfo,
    PositionTable,
    ScriptSource,
    SharedFunctionMove,
    V8LogEvent,
)

RETIRED_KEEP_NS = 10_000_000_000  # samples are resolved well within this
MAX_RETIRED = 1 << 16  # replaced code objects kept for late samples, newest first
MAX_RETIRED_SCAN = 4096  # a lookup looks at most this far back among them
MAX_SCRIPTS_PER_ISOLATE = 50_000
MAX_FUNCTIONS_PER_ISOLATE = 2_000_000
MAX_INLINE_DEPTH = 64  # a cycle in a hostile table must end


@dataclass
class Script:
    """A script of the code log: its URL and, once its source came, where its lines begin."""

    url: str
    line_starts: Sequence[int] | None = None  # None until its script-source arrives (an array: 4 bytes a line)
    # For a log without sources: the lines of the script's file, None when
    # it could not be read or a function's declared position disagreed.
    file_line_starts: Sequence[int] | None = None
    file_looked: bool = False

    def line_and_column(self, offset: int) -> tuple[int, int] | None:
        return position_in(self.line_starts, offset)


def position_in(line_starts: Sequence[int] | None, offset: int) -> tuple[int, int] | None:
    """(line, column), both from 1, of a script offset."""
    if line_starts is None or offset < 0:
        return None
    line = bisect.bisect_right(line_starts, offset)
    if line >= MAX_SCRIPT_LINES:
        return None  # past the lines whose starts were kept
    return line, offset - line_starts[line - 1] + 1


@dataclass
class SharedFunction:
    """A JS function (V8's SharedFunctionInfo), shared by all its code objects."""

    name: str = ""  # as logged: "<function> <script>:<line>:<column>"
    tag: str = "JS"
    script_id: int = -1  # learnt from a code-source-info of any of its code
    start_offset: int = -1  # in its script, likewise: where its declared line and column are


@dataclass
class IsolateLog:
    """Per-isolate tables: script ids and function addresses are the isolate's own."""

    scripts: dict[int, Script] = field(default_factory=dict)
    functions: dict[int, SharedFunction] = field(default_factory=dict)

    def function(self, address: int) -> SharedFunction:
        found = self.functions.get(address)
        if found is None:
            if len(self.functions) >= MAX_FUNCTIONS_PER_ISOLATE:
                self.functions.pop(next(iter(self.functions)))
            found = self.functions[address] = SharedFunction()
        return found

    def script(self, script_id: int) -> Script | None:
        return self.scripts.get(script_id)


@dataclass
class InlineSource:
    """A code object's position table and the functions inlined into it."""

    positions_text: str
    inlining_functions: list[int]  # per inlining id: index into functions (-1: unknown)
    inlining_call_sites: list[int]
    inlining_parents: list[int]
    functions: list[SharedFunction | None]
    _positions: PositionTable | None = None

    @property
    def positions(self) -> PositionTable:
        if self._positions is None:
            self._positions = PositionTable.parse(self.positions_text)
        return self._positions


@dataclass
class CodeObject:
    """A piece of code the log created, where it lives until moved or retired."""

    sequence: int  # unique within its process: a memo key that survives moves
    start: int
    size: int
    created_ns: int  # CLOCK_MONOTONIC estimate of its creation
    tag: str
    marker: str
    name: str
    function: SharedFunction | None
    isolate: IsolateLog
    source: InlineSource | None = None
    retired_ns: int | None = None

    @property
    def end(self) -> int:
        return self.start + self.size


@dataclass(frozen=True)
class SourceFrame:
    """One frame of an inline stack."""

    function: SharedFunction | None  # None: a function V8 logged before jitprof saw its log
    script: Script | None
    script_offset: int  # -1 when unknown
    inlined: bool


@dataclass
class CodeMap:
    """All live code objects of one process, by address."""

    # Sorted containers: a log that creates code at descending addresses
    # would make a plain list's inserts quadratic.
    _starts: SortedList = field(default_factory=SortedList)
    _objects: dict[int, CodeObject] = field(default_factory=dict)
    _retired: deque[CodeObject] = field(default_factory=lambda: deque(maxlen=MAX_RETIRED))
    _created: int = 0
    latest_ns: int = 0

    def __len__(self) -> int:
        return len(self._objects)

    def apply(self, isolate: IsolateLog, event: V8LogEvent, time_ns: int) -> None:
        """time_ns: when the event happened (CLOCK_MONOTONIC), best estimate."""
        self.latest_ns = max(self.latest_ns, time_ns)
        if isinstance(event, CodeCreation):
            function = None
            if event.shared_function:
                function = isolate.function(event.shared_function)
                function.name, function.tag = event.name, event.tag
            self._created += 1
            self._insert(
                CodeObject(
                    self._created, event.start, event.size, time_ns, event.tag, event.marker, event.name, function, isolate
                )
            )
        elif isinstance(event, CodeSourceInfo):
            self._attach_source(isolate, event)
        elif isinstance(event, ScriptSource):
            script = isolate.scripts.get(event.script_id) or _add_script(isolate, event.script_id, event.url)
            script.url = event.url
            script.line_starts = event.line_starts
        elif isinstance(event, CodeMove):
            moved = self._objects.get(event.source)
            if moved is not None and moved.isolate is isolate:
                self._remove(moved)
                moved.start, moved.created_ns = event.destination, time_ns
                self._insert(moved)
        elif isinstance(event, SharedFunctionMove):
            function = isolate.functions.pop(event.source, None)
            if function is not None:
                isolate.functions[event.destination] = function

    def _attach_source(self, isolate: IsolateLog, info: CodeSourceInfo) -> None:
        code = self._objects.get(info.start)
        if code is None or code.isolate is not isolate:
            return
        if code.function is not None:
            code.function.script_id = info.script_id
            code.function.start_offset = info.function_start
            if info.script_id not in isolate.scripts:  # a log without sources: the script known by its id alone
                _add_script(isolate, info.script_id, "")
        if not info.positions:
            return  # Sparkplug, Ignition, Maglev before V8 13.6: function level only
        code.source = InlineSource(
            info.positions,
            [entry.function_index for entry in info.inlinings],
            [entry.call_site for entry in info.inlinings],
            [entry.parent for entry in info.inlinings],
            [isolate.function(address) for address in info.inlined_functions],
        )

    def _insert(self, code: CodeObject) -> None:
        if code.size <= 0:
            return
        index = self._starts.bisect_left(code.end)
        while index > 0:
            previous = self._objects[self._starts[index - 1]]
            if previous.end <= code.start:
                break
            self._remove(previous)
            previous.retired_ns = code.created_ns
            self._retired.append(previous)
            index -= 1
        self._starts.add(code.start)
        self._objects[code.start] = code
        self._prune_retired(code.created_ns)

    def _remove(self, code: CodeObject) -> None:
        del self._objects[code.start]
        self._starts.remove(code.start)

    def _prune_retired(self, now_ns: int) -> None:
        while self._retired and now_ns - (self._retired[0].retired_ns or 0) > RETIRED_KEEP_NS:
            self._retired.popleft()

    def lookup(self, address: int, time_ns: int | None = None) -> CodeObject | None:
        """The code at address when the sample was taken (time_ns), or now."""
        index = self._starts.bisect_right(address)
        live = None
        if index:
            candidate = self._objects[self._starts[index - 1]]
            if candidate.start <= address < candidate.end:
                live = candidate
        if time_ns is None or (live is not None and live.created_ns <= time_ns):
            return live
        for retired in itertools.islice(reversed(self._retired), MAX_RETIRED_SCAN):  # replaced after the sample: what ran then
            if retired.start <= address < retired.end and retired.created_ns <= time_ns < (retired.retired_ns or 0):
                return retired
        return live

    def objects(self) -> Iterator[CodeObject]:
        return iter(self._objects.values())


def _add_script(isolate: IsolateLog, script_id: int, url: str) -> Script:
    if len(isolate.scripts) >= MAX_SCRIPTS_PER_ISOLATE:
        isolate.scripts.pop(next(iter(isolate.scripts)))
    script = isolate.scripts[script_id] = Script(url)
    return script


def inline_stack(code: CodeObject, offset: int) -> list[SourceFrame]:
    """Source frames at a code offset, outermost first (the V8
    SourcePosition::InliningStack walk); one frame when the code has no table."""
    isolate = code.isolate
    outer_script = _script_of(isolate, code.function)
    source = code.source
    if source is None:
        return [SourceFrame(code.function, outer_script, -1, False)]
    positions = source.positions
    index = bisect.bisect_right(positions.code_offsets, offset) - 1
    if index < 0:
        return [SourceFrame(code.function, outer_script, -1, False)]
    script_offset = positions.script_offsets[index]
    inlining = positions.inlining_ids[index]
    inner: list[SourceFrame] = []
    depth = 0
    while 0 <= inlining < len(source.inlining_parents) and depth < MAX_INLINE_DEPTH:
        function_index = source.inlining_functions[inlining]
        function = source.functions[function_index] if 0 <= function_index < len(source.functions) else None
        inner.append(SourceFrame(function, _script_of(isolate, function), script_offset, True))
        script_offset = source.inlining_call_sites[inlining]
        inlining = source.inlining_parents[inlining]
        depth += 1
    inner.append(SourceFrame(code.function, outer_script, script_offset, False))
    inner.reverse()
    return inner


def _script_of(isolate: IsolateLog, function: SharedFunction | None) -> Script | None:
    if function is None or function.script_id < 0:
        return None
    return isolate.script(function.script_id)
