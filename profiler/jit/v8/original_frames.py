"""JavaScript frames as their authors wrote them: each frame of a script
with a source map becomes the frame of its original source, line, column and
function name (a minifier's `a` restored from the map's `names`).

The symbolizer notes the JS frames it makes (cheap: a list append); a thread
of its own finds each script's map while its process is alive (its files
are kept open), reads a map only when one of its frames is first seen, and
looks up all the positions that have come in since its last pass in one
pass over the map. The run's profile keeps the generated frames; `originals`
says what each became, for every output, the live view and the raw profile
(so `jitprof report` shows a saved run the same way, maps or no maps on the
machine it runs on).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from profiler.jit.v8.js_view import is_js
from profiler.jit.v8.names import ASYNC_PREFIX, js_display, short_script
from profiler.jit.v8.source_map_files import (
    ScriptFiles,
    SourceMapUnavailable,
    TargetUser,
    find_source_map,
    script_path,
)
from profiler.jit.v8.source_maps import Original, SourceMap, SourceMapError, parse_source_map
from profiler.model.profile import Frame, FrameKind

PASS_INTERVAL_S = 0.5
MAX_OPEN_SCRIPTS = 256  # each holds a descriptor or two until the run ends
MAX_SCRIPTS = 1 << 16  # scripts remembered, with a map or without
MAX_PARSED_MAP_BYTES = 256 << 20  # maps kept parsed between passes (least recently used go)
MAX_FRAMES = 1 << 19  # frames noted; past this, new ones are shown as generated
MAX_PENDING = 1 << 18
MAX_PROCESSES = 1 << 16
NAME_SEARCH_CHARS = 256  # how far before a function's start its name is looked for
MAX_PROBLEMS = 8
_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*")


@dataclass
class OriginalStats:
    """How many source maps were found and read, and frames mapped."""

    with_maps: int = 0  # scripts found to name a map
    maps_read: int = 0
    frames_mapped: int = 0


@dataclass(frozen=True)
class _Process:
    """Whose files a process's source maps are read as, and from which root."""

    root: tuple[int, int]  # its root directory's device and inode
    user: TargetUser

    @classmethod
    def of(cls, pid: int) -> _Process | None:
        user = TargetUser.of_process(pid)
        try:
            root = os.stat(f"/proc/{pid}/root")
        except OSError:
            return None
        return cls((root.st_dev, root.st_ino), user) if user is not None else None


def _own_root() -> tuple[int, int]:
    root = os.stat("/")
    return (root.st_dev, root.st_ino)


@dataclass
class _Script:
    """A generated script's source map, and the frames waiting for it."""

    files: ScriptFiles | None  # None: no map, or one that cannot be used
    parsed: SourceMap | None = None
    frames: list[Frame] = field(default_factory=list)  # waiting for the next pass


class OriginalFrames:
    def __init__(self) -> None:
        self.originals: dict[Frame, Frame] = {}
        self.problems: list[str] = []  # one line each, said at the end of the run
        self.stats = OriginalStats()
        self._lock = threading.Lock()
        self._pending: list[tuple[int, Frame]] = []
        self._seen: set[Frame] = set()  # noted already (the symbolizer's thread only)
        self._processes: dict[int, _Process | None] = {}  # as they were when first noted
        self._scripts: dict[tuple[int, int, str], _Script] = {}
        self._dropped = 0  # scripts whose maps were found unusable (their files closed)
        self._parsed_bytes: OrderedDict[tuple[int, int, str], int] = OrderedDict()
        self._wake = threading.Event()
        self._stop = False
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._run, name="jitprof-source-maps", daemon=True)

    # The symbolizer's thread ----------------------------------------------

    def note_frames(self, pid: int, frames: Sequence[Frame]) -> None:
        """New frames of a sample of pid: its JS frames will be mapped."""
        for frame in frames:
            if frame in self._seen or not (is_js(frame) or _awaits(frame)) or frame.function_line <= 0:
                continue
            if len(self._seen) >= MAX_FRAMES:
                return
            self._seen.add(frame)
            if pid not in self._processes:
                # Now, while it is there: its frames may be looked at after it exits.
                self._keep(pid, _Process.of(pid))
            with self._lock:
                if len(self._pending) < MAX_PENDING:
                    self._pending.append((pid, frame))
                    self._idle.clear()

    def note_process(self, pid: int) -> None:
        """A process followed (or exec'd): its root and user, noted now, while
        it is there. On a slow machine the symbolizer comes to a short
        process's frames after it exited, too late to note them then."""
        process = _Process.of(pid)
        if process is not None:
            self._keep(pid, process)

    def _keep(self, pid: int, process: _Process | None) -> None:
        if len(self._processes) >= MAX_PROCESSES:
            self._processes.clear()
        self._processes[pid] = process

    # Control -----------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def finish(self, budget_s: float, abandon: Callable[[], bool] = lambda: False) -> None:
        """Map what has been noted, then stop the thread: within budget_s, and
        at once when abandon() turns true (the user insisted); frames not
        mapped by then are shown as generated."""
        self._stop = True
        self._wake.set()
        deadline = time.monotonic() + budget_s
        while self._thread.is_alive() and time.monotonic() < deadline and not abandon():
            self._thread.join(min(0.1, budget_s))

    def close(self) -> None:
        self.finish(0.0)
        for script in self._scripts.values():
            if script.files is not None:
                script.files.close()
        self._scripts.clear()

    def wait_idle(self, timeout_s: float) -> bool:
        """(Tests, the live view.) Has everything noted so far been mapped?"""
        self._wake.set()
        return self._idle.wait(timeout_s)

    # The thread --------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait(PASS_INTERVAL_S)
            self._wake.clear()
            with self._lock:
                pending, self._pending = self._pending, []
            if pending:
                try:
                    self.map_frames(pending)
                except Exception as error:  # a bug: the frames it was mapping are shown as generated
                    self._problem(f"source maps: {type(error).__name__}: {error}")
            with self._lock:
                drained = not self._pending
                if drained:
                    self._idle.set()
            if self._stop and drained:
                return

    def map_frames(self, noted: list[tuple[int, Frame]]) -> None:
        """One pass: each script's map found (while its process is there),
        then read and asked once for all its frames' positions."""
        waiting: dict[tuple[int, int, str], _Script] = {}
        for pid, frame in noted:
            key = self._script_key(pid, frame.file)
            if key is None:
                continue
            script = self._scripts.get(key)
            if script is None:
                if len(self._scripts) >= MAX_SCRIPTS:  # those without a map are looked at again if they come back
                    self._scripts = {known: entry for known, entry in self._scripts.items() if entry.files is not None}
                script = self._scripts[key] = _Script(self._find(pid, frame.file))
            if script.files is not None:
                script.frames.append(frame)
                waiting[key] = script
        for key, script in waiting.items():
            frames, script.frames = script.frames, []
            source_map = self._parsed(key, script)
            if source_map is not None:
                self._map_script(key, script, source_map, frames)

    def _script_key(self, pid: int, script: str) -> tuple[int, int, str] | None:
        """A script is the same file for every process with the same root."""
        process = self._processes.get(pid)
        if script_path(script) is None or process is None:
            return None
        return (*process.root, script)

    def _find(self, pid: int, script: str) -> ScriptFiles | None:
        if self.stats.with_maps - self._dropped >= MAX_OPEN_SCRIPTS:
            self._problem(f"more than {MAX_OPEN_SCRIPTS} scripts with source maps; the rest are shown as generated")
            return None
        process = self._processes.get(pid)
        if process is None:
            return None
        root = f"/proc/{pid}/root"
        if not os.path.exists(root) and process.root == _own_root():
            root = "/"  # it has exited; its root was ours, so its files are where they were
        try:
            files = find_source_map(root, script, process.user)
        except SourceMapUnavailable as error:
            self._problem(f"the source map of {short_script(script)} is skipped: {error}")
            return None
        except OSError:
            return None  # the script itself is not readable (removed, or not the target's to read)
        if files is not None:
            self.stats.with_maps += 1
        return files

    def _parsed(self, key: tuple[int, int, str], script: _Script) -> SourceMap | None:
        if script.parsed is not None:
            self._parsed_bytes.move_to_end(key)
            return script.parsed
        assert script.files is not None
        try:
            source_map = parse_source_map(script.files.map_text(), script.files.base)
        except (SourceMapError, SourceMapUnavailable, OSError) as error:
            self._drop(key, script, error)
            return None
        self.stats.maps_read += 1
        script.parsed = source_map
        self._parsed_bytes[key] = source_map.size_bytes()
        while sum(self._parsed_bytes.values()) > MAX_PARSED_MAP_BYTES and len(self._parsed_bytes) > 1:
            oldest, _ = self._parsed_bytes.popitem(last=False)
            self._scripts[oldest].parsed = None  # read again if its frames come back
        return source_map

    def _drop(self, key: tuple[int, int, str], script: _Script, error: Exception) -> None:
        """A map that cannot be used: one line, and its script's frames stay as generated."""
        self._problem(f"the source map of {short_script(key[2])} is skipped: {error}")
        if script.files is not None:
            script.files.close()
        script.files, script.parsed = None, None
        self._parsed_bytes.pop(key, None)
        self._dropped += 1

    def _map_script(self, key: tuple[int, int, str], script: _Script, source_map: SourceMap, frames: list[Frame]) -> None:
        assert script.files is not None
        names = {frame: _function_name(frame) for frame in frames}
        try:
            names_at = self._name_positions(script.files, names) if source_map.has_names() else {}
            asked: list[tuple[int, int]] = []
            for frame in frames:
                asked.append((frame.function_line, max(frame.function_column, 1)))
                asked.append((frame.line, max(frame.column, 1)) if frame.line_exact else asked[-1])
                asked.append(names_at.get(frame, asked[-2]))
            found = source_map.originals(asked)
        except SourceMapError as error:
            self._drop(key, script, error)
            return
        for index, frame in enumerate(frames):
            start, at, named = found[3 * index : 3 * index + 3]
            name_position = names_at.get(frame)
            if start is None and frame.function_line == 1 and frame.function_column <= 1:
                start = _top_level(source_map, at)
            if start is None:
                continue
            name = names[frame]
            if name is not None and name_position is not None and named is not None and named.name:
                if named.segment_column == name_position[1]:
                    name = _with_last_name(name, named.name)
            self.originals[frame] = _original_frame(frame, name, start, at)
            self.stats.frames_mapped += 1

    def _name_positions(self, files: ScriptFiles, names: dict[Frame, str | None]) -> dict[Frame, tuple[int, int]]:
        """Where each frame's function name is in the generated script: the
        last time it is written before the function's start, where a map
        gives the original name."""
        try:
            text = files.script_text()
        except (OSError, SourceMapUnavailable):
            return {}
        lines = text.split(b"\n")
        found: dict[Frame, tuple[int, int]] = {}
        for frame, name in names.items():
            identifier = _last_identifier(name) if name else None
            if identifier is None or frame.function_line > len(lines):
                continue
            line = lines[frame.function_line - 1].decode("utf-8", "replace")
            start = max(frame.function_column - 1, 0)
            window_start = max(start - NAME_SEARCH_CHARS, 0)
            matches = list(re.finditer(rf"(?<![\w$]){re.escape(identifier)}(?![\w$])", line[window_start:start]))
            if matches:
                found[frame] = (frame.function_line, window_start + matches[-1].start() + 1)
        return found

    def _problem(self, line: str) -> None:
        if line not in self.problems and len(self.problems) < MAX_PROBLEMS:
            self.problems.append(line)


def _top_level(source_map: SourceMap, at: Original | None) -> Original | None:
    """A script's top-level code (V8 starts it at 1:1, which maps rarely
    cover): its source's, the one it runs in or the map's only one."""
    if at is not None:
        return Original(at.source, 1, 1, None)
    if len(source_map.sources) == 1:
        return Original(source_map.sources[0], 1, 1, None)
    return None


def _awaits(frame: Frame) -> bool:
    """An async function awaiting the frames below it: mapped as its JS frame would be."""
    return frame.kind is FrameKind.ASYNC and bool(frame.file) and frame.name.startswith(ASYNC_PREFIX)


def _function_name(frame: Frame) -> str | None:
    """The generated function's name ("" anonymous), from its shown name
    `name script:line` (after `[async] `); None when the frame is not named that way."""
    suffix = f" {short_script(frame.file)}:{frame.function_line}"
    if not frame.name.endswith(suffix):
        return None
    name = frame.name.removeprefix(ASYNC_PREFIX) if _awaits(frame) else frame.name
    name = name[: -len(suffix)]
    return "" if name == "(anonymous)" else name


def _last_identifier(name: str) -> str | None:
    """`b` of `a.b`, `get b` or `b`: the part written at the function."""
    last = re.split(r"[. ]", name)[-1]
    return last if _IDENTIFIER.fullmatch(last) else None


def _with_last_name(name: str, original: str) -> str:
    identifier = _last_identifier(name)
    return name[: len(name) - len(identifier)] + original if identifier else original


def _original_frame(frame: Frame, name: str | None, start: Original, at: Original | None) -> Frame:
    exact = frame.line_exact and at is not None and at.source == start.source
    where = at if exact and at is not None else start
    shown = js_display(name, start.source, start.line) if name is not None else frame.name
    if name is not None and _awaits(frame):
        shown = ASYNC_PREFIX + shown
    return Frame(
        shown,
        frame.module,
        frame.kind,
        start.source,
        where.line,
        where.column,
        frame.tier,
        frame.inlined,
        exact,
        start.line,
        start.column,
    )
