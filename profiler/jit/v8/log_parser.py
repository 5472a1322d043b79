"""Parser for V8's code log (`--log-code`), fed incrementally as it grows.

One event per line, comma-separated; V8 escapes `,` as `\\x2C`, `\\` as
`\\\\`, a newline as `\\n`, other characters below 256 as `\\xHH` and above
as `\\uXXXX`, so the file is ASCII and every escape stands for one UTF-16
code unit. Only the events that describe code are kept; everything else
(heap, ticks, ...) is skipped. A line that does not parse is counted, never
raised: the file belongs to the profiled program.
"""

from __future__ import annotations

import array
import itertools
import operator
import re
from dataclasses import dataclass, field

MAX_LINE_BYTES = 64 << 20  # a bundled script's source can be tens of MB
MAX_SCRIPT_LINES = 1 << 21  # lines of one script whose starts are kept (later lines get no line number)
MAX_INLINED_FUNCTIONS = 1 << 16

_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|n|\\)")
_ESCAPED_BACKSLASH = re.compile(r"\\\\")
_NEWLINE_ESCAPE = re.compile(r"\\(?:x0[aA]|n)")
_OTHER_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4})")
_POSITION = re.compile(r"C(\d+)O(\d+)(?:I(\d+))?")
_POSITIONS_SHAPE = re.compile(r"^(?:C\d+O\d+(?:I\d+)?)+$")
_INLINING = re.compile(r"F(\d*)O(\d+)(?:I(\d+))?")
_FUNCTION = re.compile(r"S(0x[0-9a-fA-F]+)")
_MARKER = re.compile(r"^o?[~^+*]?'?$")


@dataclass(frozen=True)
class CodeCreation:
    """A code-creation event of the log."""

    tag: str  # JS, Builtin, Handler, RegExp, ... (LazyCompile/Function before Node 19)
    time_us: int  # since the isolate's logger started
    start: int
    size: int
    name: str  # "<function> <script>:<line>:<column>" for JS, unescaped
    shared_function: int  # the SharedFunctionInfo's address, 0 when none
    marker: str  # tier: ~ ^ + * with ' and o; "" when none


@dataclass(frozen=True)
class PositionTable:
    """Ascending machine-code offsets and the source position of each."""

    code_offsets: array.array
    script_offsets: array.array
    inlining_ids: array.array  # -1: the outer function itself

    @classmethod
    def parse(cls, text: str) -> PositionTable:
        """From `C<code>O<script>[I<inlining>]...`; done only for code that is
        sampled (most code never is), which keeps the log's parse fast."""
        entries = _POSITION.findall(text)
        return cls(
            array.array("l", [int(entry[0]) for entry in entries]),
            array.array("l", [int(entry[1]) for entry in entries]),
            array.array("l", [int(entry[2]) if entry[2] else -1 for entry in entries]),
        )


@dataclass(frozen=True)
class Inlining:
    """One inlined call of an optimized code, as the log gives it."""

    function_index: int  # into CodeSourceInfo.inlined_functions; -1 when V8 had none
    call_site: int  # script offset of the call in the parent
    parent: int  # the parent inlining id, -1 for the outer function


@dataclass(frozen=True)
class CodeSourceInfo:
    """An optimized code's source positions and inlined functions."""

    start: int
    script_id: int
    function_start: int  # the function's own offset in its script (its declared line and column)
    positions: str  # as logged: PositionTable.parse reads it
    inlinings: tuple[Inlining, ...]
    inlined_functions: tuple[int, ...]  # SharedFunctionInfo addresses


@dataclass(frozen=True)
class ScriptSource:
    """A script's source event, kept as where its lines begin."""

    script_id: int
    url: str
    line_starts: array.array  # UTF-16 offset where each line begins; the source itself is not kept


@dataclass(frozen=True)
class CodeMove:
    """Code moved by the garbage collector."""

    source: int
    destination: int


@dataclass(frozen=True)
class SharedFunctionMove:
    """A SharedFunctionInfo moved by the garbage collector."""

    source: int
    destination: int


V8LogEvent = CodeCreation | CodeSourceInfo | ScriptSource | CodeMove | SharedFunctionMove


@dataclass(frozen=True)
class V8Version:
    """The V8 version the log says it was written by."""

    major: int
    minor: int


def unescape(text: str) -> str:
    if "\\" not in text:
        return text
    decoded = _ESCAPE.sub(_decode_escape, text)
    if any(0xD800 <= ord(char) <= 0xDFFF for char in decoded):  # UTF-16 pairs written one unit at a time
        decoded = decoded.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return decoded


def _decode_escape(match: re.Match[str]) -> str:
    body = match.group(1)
    if body == "n":
        return "\n"
    if body == "\\":
        return "\\"
    return chr(int(body[1:], 16))


def line_starts(escaped_source: str) -> array.array:
    """Where each line of a logged source begins, in UTF-16 code units
    (the unit of V8's script offsets); each escape is one unit."""
    # Three passes at C speed (a callback per escape takes seconds on a
    # bundle): escaped backslashes first, so every backslash left starts an
    # escape; then newlines; then every other escape.
    units = _ESCAPED_BACKSLASH.sub("_", escaped_source)
    units = _NEWLINE_ESCAPE.sub("\n", units)
    units = _OTHER_ESCAPE.sub("_", units)
    return newline_starts(units)


def newline_starts(units: str) -> array.array:
    """Where each line begins in a text of one character per UTF-16 unit."""
    lines = units.split("\n", MAX_SCRIPT_LINES - 1)[:-1]  # the last line ends no line
    # Line i+1 starts after lines 0..i and their i+1 newlines: C loops, not a Python one per line.
    ends = itertools.accumulate(map(len, lines))
    return array.array("I", itertools.chain((0,), map(operator.add, ends, itertools.count(1))))


def _integer(text: str) -> int:
    return int(text, 16) if text.startswith(("0x", "0X")) else int(text)


def parse_line(line: str) -> V8LogEvent | V8Version | None:
    """One event, or None for a line of another kind. Raises ValueError on a
    malformed line of a kind we read."""
    kind, _, rest = line.partition(",")
    if kind == "code-creation":
        return _code_creation(rest.split(","))
    if kind == "code-source-info":
        return _code_source_info(rest.split(","))
    if kind == "script-source":
        script_id, url, source = rest.split(",", 2)
        return ScriptSource(int(script_id), unescape(url), line_starts(source))
    if kind == "code-move":
        source, destination = rest.split(",")[:2]
        return CodeMove(_integer(source), _integer(destination))
    if kind == "sfi-move":
        source, destination = rest.split(",")[:2]
        return SharedFunctionMove(_integer(source), _integer(destination))
    if kind == "v8-version":
        major, minor = rest.split(",")[:2]
        return V8Version(int(major), int(minor))
    return None


def _code_creation(fields: list[str]) -> CodeCreation:
    # tag, kind, time, start, size, name[, sfi, marker]; a name may hold a stray comma.
    if len(fields) < 6:
        raise ValueError("short code-creation")
    tag, _kind, time_text, start_text, size_text = fields[:5]
    rest = fields[5:]
    shared_function = 0
    marker = ""
    if len(rest) >= 3 and rest[-2].startswith("0x") and _MARKER.match(rest[-1]):
        shared_function = int(rest[-2], 16)
        marker = rest[-1]
        rest = rest[:-2]
    size = int(size_text)
    if size < 0:
        raise ValueError("negative code size")
    return CodeCreation(tag, int(time_text), _integer(start_text), size, unescape(",".join(rest)), shared_function, marker)


def _code_source_info(fields: list[str]) -> CodeSourceInfo:
    # start, script, function start, function end, positions, inlinings, functions
    if len(fields) < 7:
        raise ValueError("short code-source-info")
    start = _integer(fields[0])
    script_id = int(fields[1])
    positions = fields[4]
    if positions and not _POSITIONS_SHAPE.match(positions):
        raise ValueError("malformed positions")
    inlinings: tuple[Inlining, ...] = ()
    functions: tuple[int, ...] = ()
    if fields[5]:
        inlinings = tuple(
            Inlining(int(function) if function else -1, int(call_site), int(parent) if parent else -1)
            for function, call_site, parent in _INLINING.findall(fields[5])
        )
        functions = tuple(int(address, 16) for address in _FUNCTION.findall(fields[6]))[:MAX_INLINED_FUNCTIONS]
    return CodeSourceInfo(start, script_id, int(fields[2]), positions, inlinings, functions)


@dataclass
class V8LogReader:
    """Turns appended bytes into events; a line is parsed once it is complete."""

    bad_lines: int = 0
    skipped_long_lines: int = 0
    version: V8Version | None = None
    _partial: bytearray = field(default_factory=bytearray)
    _skipping: bool = False  # inside an over-long line, until its newline

    def feed(self, data: bytes) -> list[V8LogEvent]:
        events: list[V8LogEvent] = []
        begin = 0
        while True:
            end = data.find(b"\n", begin)
            if end < 0:
                self._keep_partial(data[begin:])
                return events
            if self._skipping:
                self._skipping = False
            else:
                if self._partial:
                    self._partial += data[begin:end]
                    line = bytes(self._partial)
                    self._partial.clear()
                else:
                    line = data[begin:end]
                if len(line) > MAX_LINE_BYTES:
                    self.skipped_long_lines += 1
                else:
                    self._parse(line, events)
            begin = end + 1

    def _keep_partial(self, tail: bytes) -> None:
        if self._skipping or not tail:
            return
        if len(self._partial) + len(tail) > MAX_LINE_BYTES:
            self._partial.clear()
            self._skipping = True
            self.skipped_long_lines += 1
            return
        self._partial += tail

    def _parse(self, raw: bytes, events: list[V8LogEvent]) -> None:
        if not raw.startswith((b"code-", b"script-source", b"sfi-move", b"v8-version")):
            return
        try:
            parsed = parse_line(raw.decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            self.bad_lines += 1
            return
        if isinstance(parsed, V8Version):
            self.version = parsed
        elif parsed is not None:
            events.append(parsed)
