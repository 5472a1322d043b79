"""Where Bun's JavaScript functions are defined: the script and line of the
function JavaScriptCore names `JSC-DFG: leaf#BiF1ZL` in its jitdump.

The six characters after `#` (its CodeBlockHash) are the low 32 bits of the
SHA-1 of the function's source text, from its parameters' `(` to its closing
`}`, xor 1 for a constructor's code, in base 62. That text is bun's runtime
copy of the script, not the file: bun transpiles every script it loads
(types stripped, code reprinted, constants inlined), and a CommonJS module's
copy is indented inside its wrapper (whose own code, the module's top-level
code, is hashed whole). Bun's own transpiler (Bun.Transpiler, target bun,
inlining) makes that copy again: transpile.js, run with the process's own
bun as the process's user, for the scripts its command line names (`bun
test`'s test files) and those they import. Every function in the copies is hashed; a name is placed only
when its hash is found in one script, and given a line only where the file's
definitions of that name line up one to one with the copy's. An ES module's
top-level code is named by its script's path.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import hashlib
import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from profiler.jit.v8.names import js_display
from profiler.kernel.proc_status import command_line, process_uid, start_time, status_field
from profiler.model.profile import Frame
from profiler.safety.processes import run_as_user

TRANSPILER = Path(__file__).with_name("transpile.js")
MAX_SCRIPTS = 256  # a process's scripts transpiled: its own and what they import
MAX_SCRIPT_BYTES = 16 << 20  # their text and copies together (tsc: 11.5 MiB)
MAX_OUTPUT_BYTES = 3 * MAX_SCRIPT_BYTES  # JSON escapes: a little over the two texts
TRANSPILE_DEADLINE_S = 10.0  # about 60 ms for a few small scripts, 0.3 s for tsc
INDEX_DEADLINE_S = 20.0  # hashing and pairing 16 MiB of scripts: about 3 s
MAX_PROCESSES = 64  # processes whose scripts are kept
SHARED_FOR_S = 60.0  # a command's scripts transpiled once serve its other processes this long
HASHED_PER_BYTE = 16  # how many times its size a script's functions may hash to, together
COMMONJS_PARAMETERS = "(exports, require, module, __filename, __dirname)"
NAME_NOT_MATERIALIZED = "<name not materialized>"
MODULE_CODE = -1  # where a script's top-level code "begins", among its functions
SCRIPT_SUFFIXES = (".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts", ".cts", ".tsx")  # an ES module's code is named by its path
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_JSC_JS_NAME = re.compile(r"^JSC-(?:Baseline|DFG|FTL|DFGOSREntry): (.*)#([0-9A-Za-z]{6})$", re.DOTALL)
_NOT_FUNCTIONS = frozenset({"if", "for", "while", "switch", "catch", "with", "return", "typeof", "await", "yield"})


def code_block_hash(text: str, constructor: bool = False) -> str:
    """JavaScriptCore's CodeBlockHash of a function's source text, as it prints it."""
    digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).digest()
    value = int.from_bytes(digest[:4], "little")
    if value in (0, 1):
        value += 0x2D5A93D0
    value ^= int(constructor)
    characters = []
    for _ in range(6):
        characters.append(_ALPHABET[value % 62])
        value //= 62
    return "".join(reversed(characters))


_CODE_MARK = re.compile(r"""[(){}\[\]"'`]|//|/\*""")
_TEMPLATE_MARK = re.compile(r"\\.|`|\$\{", re.DOTALL)
_STRING_REST = {quote: re.compile(rf"(?:[^{quote}\\\n]|\\.)*", re.DOTALL) for quote in "\"'"}


@dataclass(frozen=True)
class ScannedScript:
    """A transpiled script's functions, from their parameters' `(` to just
    past their body's `}`, and the literal text of its template literals
    (which a CommonJS wrapper does not indent)."""

    spans: list[tuple[int, int]]
    template_text: list[tuple[int, int]]


def scan_functions(text: str) -> ScannedScript:
    """One pass matching brackets, strings, template literals and comments.
    A regular expression holding a bracket or a quote may pair some wrongly,
    which only leaves those functions unplaced: their hashes are not found."""
    closing: dict[int, int] = {}  # an opening bracket's index: its partner's
    stack: list[int] = []
    templates: list[int] = []  # depth of the bracket stack at each open `${`
    literal: list[tuple[int, int]] = []
    index, length = 0, len(text)
    in_template, literal_start = False, 0
    while index < length:
        if in_template:
            mark = _TEMPLATE_MARK.search(text, index)
            if mark is None:
                literal.append((literal_start, length))
                break
            index = mark.end()
            if mark.group(0) == "`":
                literal.append((literal_start, mark.start()))
                in_template = False
            elif mark.group(0) == "${":
                literal.append((literal_start, mark.start()))
                templates.append(len(stack))
                stack.append(mark.start() + 1)
                in_template = False
            continue
        mark = _CODE_MARK.search(text, index)
        if mark is None:
            break
        token, at = mark.group(0), mark.start()
        index = mark.end()
        if token in "({[":
            stack.append(at)
        elif token in ")}]":
            if stack:
                closing[stack.pop()] = at
                if templates and templates[-1] == len(stack):
                    templates.pop()
                    in_template, literal_start = True, at + 1  # the `}` of a `${...}`: back in the template
        elif token in "\"'":
            rest = _STRING_REST[token].match(text, index)
            index = (rest.end() if rest else index) + 1
        elif token == "`":
            in_template, literal_start = True, index
        elif token == "//":
            newline = text.find("\n", index)
            index = length if newline < 0 else newline
        elif token == "/*":
            end = text.find("*/", index)
            index = length if end < 0 else end + 2
    spans = []
    for opened, closed in closing.items():
        if text[opened] != "(" or _keyword_before(text, opened):
            continue
        body = _body_start(text, closed + 1)
        if body is not None and body in closing:
            spans.append((opened, closing[body] + 1))
    spans.sort()
    return ScannedScript(spans, literal)


def indented(text: str, start: int, end: int, template_text: list[tuple[int, int]]) -> str:
    """text[start:end] as a CommonJS module's copy has it: each line after the
    first indented two more spaces, but not inside a template literal's text."""
    pieces, at = [], start
    first = bisect.bisect_left(template_text, (start, start)) - 1
    for literal_start, literal_end in template_text[max(first, 0) :]:
        if literal_start >= end:
            break
        if literal_end <= at:
            continue
        pieces.append(text[at : max(literal_start, at)].replace("\n", "\n  "))
        upto = min(literal_end, end)
        pieces.append(text[max(literal_start, at) : upto])
        at = upto
    pieces.append(text[at:end].replace("\n", "\n  "))
    return "".join(pieces)


def _keyword_before(text: str, opened: int) -> bool:
    """Is this `(` a statement's (`if (`, `for (`), not a function's?"""
    before = text[max(0, opened - 16) : opened].rstrip()
    word = re.search(r"[A-Za-z_$][\w$]*$", before)
    return word is not None and word.group(0) in _NOT_FUNCTIONS


def _body_start(text: str, index: int) -> int | None:
    """After a `)`: the index of a function body's `{` (`) {`, `) => {`)."""
    rest = text[index : index + 8]
    stripped = rest.lstrip()
    offset = index + len(rest) - len(stripped)
    if stripped.startswith("=>"):
        after = text[offset + 2 : offset + 10]
        offset += 2 + len(after) - len(after.lstrip())
        stripped = text[offset : offset + 1]
    return offset if stripped.startswith("{") else None


_IDENTIFIER = r"[A-Za-z_$][\w$]*"
_TYPE_PARAMETERS = r"(?:<[^>()]*>\s*)?"
# Where functions are defined, by name (group 1) and their parameters' `(`
# (group 2): `function name(`, a method `name(...) {`, `name = function(`,
# `name: (...) =>`. The same patterns read the file and its copy, so that
# their lists of a name line up.
_DEFINITIONS = (
    re.compile(rf"\bfunction\s*\*?\s*({_IDENTIFIER})\s*{_TYPE_PARAMETERS}(\()"),
    re.compile(
        rf"(?:^|[{{;,}}\s])(?:(?:static|async|get|set)\s+|\*\s*)*({_IDENTIFIER})\s*{_TYPE_PARAMETERS}(\()[^()]*\)\s*(?::[^{{;=()]*)?\{{",
        re.MULTILINE,
    ),
    re.compile(
        rf"\b({_IDENTIFIER})\s*[:=]\s*(?:async\s+)?(?:function\b\s*\*?\s*(?:{_IDENTIFIER})?\s*)?(\()(?=[^()]*\)\s*(?::[^=;{{()]*)?(?:=>|\{{))"
    ),
)
_FIRST_PARAMETER = re.compile(rf"\(\s*(?:\.\.\.)?({_IDENTIFIER})?")


def definitions(text: str) -> dict[str, list[int]]:
    """Each name's definitions in a script: where their parameters' `(` are, in order."""
    found: dict[str, set[int]] = {}
    for pattern in _DEFINITIONS:
        for match in pattern.finditer(text):
            name = match.group(1)
            if name not in _NOT_FUNCTIONS and name != "function":
                found.setdefault(name, set()).add(match.start(2))
    return {name: sorted(starts) for name, starts in found.items()}


def _first_parameter(text: str, opened: int) -> str:
    matched = _FIRST_PARAMETER.match(text, opened)
    return (matched.group(1) or "") if matched else ""


@dataclass(frozen=True)
class FunctionPlace:
    """Where a function is defined: its script, and its 1-based line and column (0: not known)."""

    script: str
    line: int
    column: int
    module_code: bool = False  # the script's top-level code, not a function of it
    name: str = ""  # the function's name in the script, where JavaScriptCore gave none


class _Script:
    """One script as bun has it: the file's text and bun's copy, indexed once
    (the copy's functions by hash, both texts' definitions by name), under
    a lock: processes of one command share their scripts."""

    def __init__(self, path: str, original: str, runtime: str) -> None:
        self.path, self.original, self.runtime = path, original, runtime
        self._lock = threading.Lock()
        self._index: _ScriptIndex | None = None

    def index(self) -> _ScriptIndex:
        with self._lock:
            if self._index is None:
                self._index = _index_script(self.original, self.runtime)
            return self._index

    def functions_hashed(self) -> dict[str, list[int]]:
        return self.index().hashes

    def name_at(self, start: int) -> str:
        """The name the copy defines the function beginning at start with ("": none, or several)."""
        names = self.index().names_at.get(start, [])
        return names[0] if len(names) == 1 else ""

    def line_of(self, name: str, start: int) -> tuple[int, int]:
        """The file's line and column (1-based) of the function whose copy
        begins at start, or (0, 0) when its definitions do not line up."""
        index = self.index()
        in_copy = index.runtime_definitions.get(name, [])
        in_file = index.original_definitions.get(name, [])
        if start not in in_copy or len(in_copy) != len(in_file):
            return (0, 0)
        at = in_file[in_copy.index(start)]
        # A definition the patterns missed in one and another they took for one
        # would shift the pairs: the paired ones must begin alike.
        if _first_parameter(self.runtime, start) != _first_parameter(self.original, at):
            return (0, 0)
        return self._line_and_column(at)

    def unnamed_line_of(self, start: int) -> tuple[int, int]:
        """The file's line and column of a function no pattern names (an arrow
        passed as an argument, `obj.key = function`), paired by its order
        among such functions between the two paired definitions around it,
        when as many lie there in the file as in the copy and they begin alike;
        else (0, 0)."""
        index = self.index()
        copy_starts = [anchor[0] for anchor in index.anchors]
        after = bisect.bisect_left(copy_starts, start)
        copy_low, file_low = index.anchors[after - 1] if after > 0 else (-1, -1)
        copy_high, file_high = index.anchors[after] if after < len(index.anchors) else (len(self.runtime), len(self.original))
        in_copy = _between(index.runtime_unnamed, copy_low, copy_high)
        in_file = _between(index.original_unnamed, file_low, file_high)
        if start not in in_copy or len(in_copy) != len(in_file):
            return (0, 0)
        at = in_file[in_copy.index(start)]
        if _first_parameter(self.runtime, start) != _first_parameter(self.original, at):
            return (0, 0)
        return self._line_and_column(at)

    def _line_and_column(self, at: int) -> tuple[int, int]:
        line_starts = self.index().line_starts
        line = bisect.bisect_right(line_starts, at)
        return line, at - line_starts[line - 1] + 1


@dataclass(frozen=True)
class _ScriptIndex:
    hashes: dict[str, list[int]]  # a hash: where the functions that have it begin in the copy
    runtime_definitions: dict[str, list[int]]
    original_definitions: dict[str, list[int]]
    names_at: dict[int, list[str]]  # the copy's definitions by where they begin
    line_starts: list[int]  # the file's
    # Definitions paired between the copy and the file (copy's start, file's),
    # in order; and, in each, where the functions no pattern names begin.
    anchors: list[tuple[int, int]]
    runtime_unnamed: list[int]
    original_unnamed: list[int]


def _between(starts: list[int], low: int, high: int) -> list[int]:
    return starts[bisect.bisect_right(starts, low) : bisect.bisect_left(starts, high)]


def _index_script(original: str, runtime: str) -> _ScriptIndex:
    hashes: dict[str, list[int]] = {}
    scanned = scan_functions(runtime)
    # Nested functions are hashed with all they nest in: a script crafted as
    # 100,000 nested arrows would cost its size squared. Innermost first (the
    # hot code), within a budget real scripts stay far under (TypeScript's
    # compiler: 1.8 times its size).
    budget = HASHED_PER_BYTE * len(runtime) + (1 << 20)
    for start, end in sorted(scanned.spans, key=lambda span: span[1] - span[0]):
        budget -= 2 * (end - start)
        if budget < 0:
            break
        # A CommonJS module's copy is indented one level inside its wrapper.
        for variant in {runtime[start:end], indented(runtime, start, end, scanned.template_text)}:
            for constructor in (False, True):
                hashes.setdefault(code_block_hash(variant, constructor), []).append(start)
    # A CommonJS module's top-level code: the wrapper function around all of it.
    body = "  " + indented(runtime, 0, len(runtime), scanned.template_text)
    hashes.setdefault(code_block_hash(f"{COMMONJS_PARAMETERS} {{\n{body.removesuffix('  ')}}}"), []).append(MODULE_CODE)
    runtime_definitions = definitions(runtime)
    names_at: dict[int, list[str]] = {}
    for name, starts in runtime_definitions.items():
        for at in starts:
            names_at.setdefault(at, []).append(name)
    line_starts = [0, *(match.end() for match in re.finditer("\n", original))]
    original_definitions = definitions(original)
    anchors = _anchors(runtime, original, runtime_definitions, original_definitions)
    copy_named = set(names_at)
    file_named = {at for starts in original_definitions.values() for at in starts}
    return _ScriptIndex(
        hashes,
        runtime_definitions,
        original_definitions,
        names_at,
        line_starts,
        anchors,
        [start for start, _end in scanned.spans if start not in copy_named],
        [start for start, _end in scan_functions(original).spans if start not in file_named],
    )


def _anchors(
    runtime: str, original: str, runtime_definitions: dict[str, list[int]], original_definitions: dict[str, list[int]]
) -> list[tuple[int, int]]:
    """The named definitions that pair one to one (as many of the name in
    each text, beginning alike), in order; kept only while both texts' order
    agrees, so that between two of them the same functions lie."""
    pairs = sorted(
        (copy_at, file_at)
        for name, in_copy in runtime_definitions.items()
        if len(in_copy) == len(original_definitions.get(name, []))
        for copy_at, file_at in zip(in_copy, original_definitions[name], strict=True)
        if _first_parameter(runtime, copy_at) == _first_parameter(original, file_at)
    )
    anchors: list[tuple[int, int]] = []
    for copy_at, file_at in pairs:
        if not anchors or file_at > anchors[-1][1]:
            anchors.append((copy_at, file_at))
    return anchors


@dataclass
class _ProcessScripts:
    """A process's scripts, transpiled and indexed in the background as it
    is followed (ready: done), and the places asked of them."""

    scripts: list[_Script] = field(default_factory=list)
    problem: str = ""
    places: dict[str, FunctionPlace | None] = field(default_factory=dict)
    ready: threading.Event = field(default_factory=threading.Event)


class BunFunctions:
    """The places of Bun processes' functions, kept per process; processes
    of one user running the same scripts with the same bun share one
    transpiling (a test runner's workers, a server's cluster)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._processes: OrderedDict[tuple[int, int | None], _ProcessScripts] = OrderedDict()  # by pid and start time
        self._by_command: OrderedDict[tuple, tuple[float, list[_Script], str]] = OrderedDict()
        self._queue: queue.SimpleQueue[tuple[int, _ProcessScripts]] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._transpiling: set[int] = set()  # the process groups of transpilers running now

    def stop(self) -> None:
        """The run is over: a transpiler still running is killed, not left behind."""
        with self._lock:
            groups = list(self._transpiling)
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)

    def prepare(self, pid: int) -> None:
        """(As the run follows a bun process.) Transpile and index its scripts
        now, on a thread of their own, while it lives: a short program (tsc)
        is gone before the symbolizer names its first JS frame."""
        with self._lock:
            key = (pid, start_time(pid))
            if key[1] is None or key in self._processes:
                return
            entry = self._add(key)
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="jitprof-bun-scripts", daemon=True)
                self._worker.start()
        self._queue.put((pid, entry))

    def _add(self, key: tuple[int, int | None]) -> _ProcessScripts:
        entry = self._processes[key] = _ProcessScripts()
        while len(self._processes) > MAX_PROCESSES:
            self._processes.popitem(last=False)
        return entry

    def _work(self) -> None:
        while True:
            pid, entry = self._queue.get()
            self._fill(pid, entry)

    def _fill(self, pid: int, entry: _ProcessScripts) -> None:
        try:
            entry.scripts, entry.problem = self._transpiled(pid)
            for script in entry.scripts:
                script.index()
        finally:
            entry.ready.set()

    def _entry(self, pid: int) -> _ProcessScripts | None:
        """pid's scripts, prepared (waiting for them if need be), or read now."""
        started = start_time(pid)
        fill_now = None
        with self._lock:
            entry = self._processes.get((pid, started))
            if entry is None and started is None:  # gone: what was found while it lived
                entry = next((value for (known, _), value in reversed(self._processes.items()) if known == pid), None)
            if entry is None and started is not None:
                entry = fill_now = self._add((pid, started))
        if fill_now is not None:
            self._fill(pid, fill_now)
        if entry is None or not entry.ready.wait(TRANSPILE_DEADLINE_S + INDEX_DEADLINE_S):
            return None
        return entry

    def place(self, pid: int, name: str) -> FunctionPlace | None:
        matched = _JSC_JS_NAME.match(name)
        if matched is None:
            return None
        function, hashed = matched.group(1).strip(), matched.group(2)
        if function.startswith("/") and function.endswith(SCRIPT_SUFFIXES):
            return FunctionPlace(function, 1, 1, module_code=True)  # an ES module's top-level code, named by its script
        entry = self._entry(pid)
        if entry is None:
            return None
        key = f"{function}#{hashed}"
        if key not in entry.places:
            entry.places[key] = _place_in(entry.scripts, function, hashed)
        return entry.places[key]

    def _transpiled(self, pid: int) -> tuple[list[_Script], str]:
        try:
            binary = os.stat(f"/proc/{pid}/exe")
        except OSError:
            return [], ""
        directory, arguments = command_of(pid) or ("", [])
        command = (binary.st_dev, binary.st_ino, binary.st_mtime_ns, process_uid(pid), directory, *arguments)
        now = time.monotonic()
        with self._lock:
            known = self._by_command.get(command)
        if known is not None and now - known[0] < SHARED_FOR_S:
            return known[1], known[2]
        started: list[int] = []

        def running(group: int | None) -> None:
            with self._lock:
                if group is not None:
                    started.append(group)
                    self._transpiling.add(group)
                elif started:
                    self._transpiling.discard(started.pop())

        scripts, problem = transpiled_scripts(pid, running)
        with self._lock:
            self._by_command[command] = (now, scripts, problem)
            while len(self._by_command) > MAX_PROCESSES:
                self._by_command.popitem(last=False)
        return scripts, problem

    def place_frame(self, pid: int, name: str, frame: Frame) -> Frame:
        return placed_frame(frame, self.place(pid, name))

    def problems(self) -> dict[int, str]:
        with self._lock:
            return {pid: scripts.problem for (pid, _started), scripts in self._processes.items() if scripts.problem}


def placed_frame(frame: Frame, place: FunctionPlace | None) -> Frame:
    """A JS function's frame, shown as node's are (`leaf app.js:6`), with its script and line."""
    if place is None:
        return frame
    # Top-level code is anonymous, as DevTools shows it; an anonymous
    # function keeps its hash (all that tells it apart) until it has a line.
    anonymous = frame.name.startswith("(anonymous)#") and place.line > 0
    function = "" if place.module_code or anonymous else place.name or frame.name
    return dataclasses.replace(
        frame,
        name=js_display(function, place.script, place.line),
        file=place.script,
        line=place.line,
        column=place.column,
        function_line=place.line,
        function_column=place.column,
    )


def _place_in(scripts: list[_Script], function: str, hashed: str) -> FunctionPlace | None:
    found = [(script, start) for script in scripts for start in script.functions_hashed().get(hashed, [])]
    if len({script.path for script, _start in found}) != 1:
        return None  # not found, or in several scripts: unplaced rather than misplaced
    script, start = found[0]
    if start == MODULE_CODE:
        return FunctionPlace(script.path, 1, 1, module_code=True)
    if len(found) > 1:
        return FunctionPlace(script.path, 0, 0)  # the same text twice in a script (a bundle's copies of a helper)
    # JavaScriptCore names some functions compiled off its main thread
    # `<name not materialized>`: the copy says which.
    named = script.name_at(start) if function == NAME_NOT_MATERIALIZED else ""
    line, column = script.line_of(named or function, start) if named or function else (0, 0)
    if line == 0 and not script.name_at(start):
        line, column = script.unnamed_line_of(start)  # a callback, or a name JavaScriptCore inferred
    return FunctionPlace(script.path, line, column, name=named)


def command_of(pid: int) -> tuple[str, list[str]] | None:
    """A live process's working directory and its arguments (after its executable)."""
    try:
        directory = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None
    arguments = command_line(pid)
    return (directory, arguments[1:]) if arguments else None


def transpiled_scripts(pid: int, running: Callable[[int | None], None] | None = None) -> tuple[list[_Script], str]:
    """A live bun process's scripts and their runtime copies, made by its own
    bun as its own user (what it reads, that user could read): nothing of the
    process is touched, and what comes back is checked as the target's words."""
    command = command_of(pid)
    uid_words, gid_words = status_field(pid, "Uid:"), status_field(pid, "Gid:")
    if command is None or uid_words is None or gid_words is None or len(uid_words) < 2 or len(gid_words) < 2:
        return [], ""
    try:
        # /proc/PID/exe: the very binary the process runs, whatever its path now names.
        run = run_as_user(
            [f"/proc/{pid}/exe", str(TRANSPILER), str(MAX_SCRIPTS), str(MAX_SCRIPT_BYTES), command[0], *command[1]],
            int(uid_words[1]), int(gid_words[1]), MAX_OUTPUT_BYTES, TRANSPILE_DEADLINE_S, running,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        return [], f"its scripts could not be transpiled ({type(error).__name__})"
    if run.returncode != 0:
        why = run.overrun or f"bun exited with {run.returncode}"
        return [], f"its scripts could not be transpiled ({why})"
    try:
        document = json.loads(run.output)
        listed = document["scripts"]
        parsed = [
            _Script(entry["path"], entry["original"], entry["runtime"])
            for entry in listed[:MAX_SCRIPTS]
            if isinstance(entry, dict) and all(isinstance(entry.get(key), str) for key in ("path", "original", "runtime"))
        ]
    except (ValueError, KeyError, TypeError, RecursionError):
        return [], "its scripts' transpiler answered nonsense"
    return parsed, ""
