"""Where Bun's JavaScript functions are defined: the script and line of the
function JavaScriptCore names `JSC-DFG: leaf#BiF1ZL` in its jitdump, found
from the hash (jit/bun/scripts.py) in bun's own copies of the scripts.

Bun's transpiler (Bun.Transpiler, target bun, inlining) makes those copies
again: transpile.js, run with jitprof's own bun as the process's user
(jit/bun/transpiler.py), as soon as the run follows it, for the scripts its
command line names (`bun test`'s test files) and those they import. A name is placed only when
its hash is found in one script. An ES module's top-level code is named by
its script's path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import re
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from profiler.jit.bun import index_cache
from profiler.jit.bun.scripts import MODULE_CODE, BunScript
from profiler.jit.bun.transpiler import TRANSPILE_DEADLINE_S, TranspiledScript, command_of, transpiled_scripts
from profiler.jit.v8.names import js_display
from profiler.kernel.proc_status import process_uid, start_time
from profiler.model.profile import Frame

INDEX_DEADLINE_S = 20.0  # hashing and pairing 16 MiB of scripts: about 3 s
MAX_PROCESSES = 64  # processes whose scripts are kept
MAX_KEPT_BYTES = 48 << 20  # all processes' texts and copies kept at once (tsc's: 11.5 MiB)
SHARED_FOR_S = 60.0  # a command's scripts transpiled once serve its other processes this long
NAME_NOT_MATERIALIZED = "<name not materialized>"
MIN_FUNCTIONS_JUDGED = 20  # distinct functions sampled before a process's placing is judged
PLACED_ENOUGH = 0.5
SCRIPT_SUFFIXES = (".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts", ".cts", ".tsx")  # an ES module's code is named by its path
_JSC_JS_NAME = re.compile(r"^JSC-(?:Baseline|DFG|FTL|DFGOSREntry): (.*)#([0-9A-Za-z]{6})$", re.DOTALL)


@dataclass(frozen=True)
class FunctionPlace:
    """Where a function is defined: its script, and its 1-based line and column (0: not known)."""

    script: str
    line: int
    column: int
    module_code: bool = False  # the script's top-level code, not a function of it
    name: str = ""  # the function's name in the script, where JavaScriptCore gave none


@dataclass
class _ProcessScripts:
    """A process's scripts, transpiled and indexed in the background as it
    is followed (ready: done), and the places asked of them."""

    scripts: list[BunScript] = field(default_factory=list)
    problem: str = ""
    places: dict[str, FunctionPlace | None] = field(default_factory=dict)
    ready: threading.Event = field(default_factory=threading.Event)

    def unplaced_problem(self) -> str:
        """Most of its functions not in the scripts read: the scripts it
        loads as it runs (prettier's plugins, a dynamic import) are not."""
        asked = len(self.places)
        found = sum(1 for place in self.places.values() if place is not None)
        if asked < MIN_FUNCTIONS_JUDGED or found >= asked * PLACED_ENOUGH:
            return ""
        return (
            f"{found:,} of its {asked:,} JavaScript functions sampled are in the scripts its command line names and "
            "imports (scripts it loads as it runs, by a path made at run time, are not read)"
        )


class BunFunctions:
    """The places of Bun processes' functions, kept per process; processes
    of one user running the same scripts with the same bun share one
    transpiling (a test runner's workers, a server's cluster)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._processes: OrderedDict[tuple[int, int | None], _ProcessScripts] = OrderedDict()  # by pid and start time
        self._by_command: OrderedDict[tuple, tuple[float, list[BunScript], str]] = OrderedDict()
        self._queue: queue.SimpleQueue[tuple[int, _ProcessScripts]] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._transpiling: set[int] = set()  # the process groups of transpilers running now
        self._kept_bytes = 0  # the texts and copies of the commands kept

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
                index_cache.indexed(script)
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

    def _transpiled(self, pid: int) -> tuple[list[BunScript], str]:
        directory, arguments = command_of(pid) or ("", [])
        command = (process_uid(pid), directory, *arguments)
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

        transpiled, problem = transpiled_scripts(pid, running)
        scripts = [BunScript(script.path, script.original, script.runtime) for script in transpiled]
        with self._lock:
            self._by_command[command] = (now, scripts, problem)
            self._kept_bytes += _size(transpiled)
            # Over the byte budget or the count, the oldest are let go (their
            # processes' frames stay unplaced): a user's crafted scripts
            # cannot make root keep gigabytes.
            while len(self._by_command) > 1 and (len(self._by_command) > MAX_PROCESSES or self._kept_bytes > MAX_KEPT_BYTES):
                _time, dropped, _problem = self._by_command.popitem(last=False)[1]
                self._kept_bytes -= _size(dropped)
                dropped.clear()  # the processes sharing it let it go too
        return scripts, problem

    def place_frame(self, pid: int, name: str, frame: Frame) -> Frame:
        return placed_frame(frame, self.place(pid, name))

    def problems(self) -> dict[int, str]:
        with self._lock:
            found = {(pid, scripts.problem or scripts.unplaced_problem()) for (pid, _started), scripts in self._processes.items()}
        return {pid: problem for pid, problem in found if problem}


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


def _place_in(scripts: list[BunScript], function: str, hashed: str) -> FunctionPlace | None:
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


def _size(scripts: Iterable[BunScript] | Iterable[TranspiledScript]) -> int:
    return sum(len(script.original) + len(script.runtime) for script in scripts)
