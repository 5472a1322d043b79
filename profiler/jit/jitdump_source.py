"""Names for JIT code from jitdump files, exact by time (see jitdump.py).

A writer maps its dump executable so that `perf record` sees it, which makes
the dump show in /proc/PID/maps: that is how it is found, whatever directory
the runtime chose, and it is opened through /proc/PID/map_files, which names
the very file mapped (no path to swap for a symlink). It must be a regular
file owned by the process's user.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from profiler.jit.contract import Runtime
from profiler.jit.jitdump import CodeLoad, JitdumpFile
from profiler.jit.jitdump_files import mapped_dumps, remove_jitdumps
from profiler.jit.names import frame_for_name
from profiler.jit.rescan import Rescan
from profiler.jit.symbol_source import JitSymbolSource
from profiler.kernel.address_spaces import JIT_MODULE
from profiler.kernel.proc_status import process_uid
from profiler.kernel.procmaps import MapEntry
from profiler.model.profile import Frame, FrameKind

TAIL_INTERVAL_S = 0.01
MAX_DUMPS_PER_PROCESS = 64  # JavaScriptCore writes one per thread that compiles


@dataclass
class _ProcessDumps:
    """The jitdumps of one process, and when they were last read."""

    pid: int
    owner_uid: int | None
    runtime: Runtime | None = None
    dumps: list[JitdumpFile] = field(default_factory=list)
    identities: set[tuple[int, int]] = field(default_factory=set)
    refused: str = ""
    rescan: Rescan = field(default_factory=Rescan)
    last_tail: float = 0.0


@dataclass(frozen=True)
class JitdumpReport:
    """What one process's jitdumps gave, for the end of a run."""

    pid: int
    path: str
    loads: int
    error: str
    insane_debug_records: int

    def warning(self) -> str:
        return f"jitprof: warning: jitdump of pid {self.pid} ({self.path or 'not read'}): {self.error}"


class JitdumpSymbols(JitSymbolSource):
    """A JIT expander for the symbolizer thread (see symbolizer.JitExpander)."""

    def __init__(self, default_owner_uid: int | None = None, runtime_of: Callable[[int], Runtime | None] | None = None) -> None:
        self._default_owner_uid = default_owner_uid
        self._runtime_of = runtime_of  # which runtime a live process runs: its functions' places
        self._lock = threading.Lock()
        self._scanning = threading.Lock()
        self._processes: dict[int, _ProcessDumps] = {}
        self._frames: dict[tuple[int, int, int, int], Frame] = {}  # (pid, dump, load sequence, line address)

    def watch(self, pid: int) -> None:
        state = self._state(pid)
        if self._runtime_of is not None:  # it may have exec'd another runtime
            state.runtime = self._runtime_of(pid) or state.runtime

    def maps_changed(self, pid: int, entries: Sequence[MapEntry]) -> None:
        """It maps a dump: opened at once, while the process lives (its
        samples may be named after it is gone, and its dump with it)."""
        with self._lock:
            state = self._processes.get(pid)
        if state is not None:
            self._scan(state, mapped_dumps(pid, entries))

    def _state(self, pid: int) -> _ProcessDumps:
        with self._lock:
            state = self._processes.get(pid)
            if state is None:
                # Its runtime, while it lives: its frames may be named after it is gone.
                runtime = self._runtime_of(pid) if self._runtime_of is not None else None
                state = self._processes[pid] = _ProcessDumps(pid, process_uid(pid, self._default_owner_uid), runtime)
            return state

    def expand(self, pid: int, time_ns: int, address: int, caller: bool = False) -> tuple[Frame, ...] | None:
        state = self._state(pid)
        now = time.monotonic()
        if state.rescan.due(now):
            known = len(state.dumps)
            self._scan(state)
            state.rescan.looked(now, len(state.dumps) > known)
        if not state.dumps:
            return None
        _tail_if_due(state, now)
        for number, dump in enumerate(state.dumps):
            load = dump.reader.code.lookup(address, time_ns)
            if load is not None:
                return (self._frame(pid, number, load, address),)
        return None

    def epoch(self, pid: int) -> tuple[int, int]:
        """(revision, time of the latest record) of pid's dumps (see V8LogSymbols.epoch)."""
        with self._lock:
            state = self._processes.get(pid)
        if state is None or not state.dumps:
            return (0, 0)
        _tail_if_due(state, time.monotonic())
        return (
            sum(dump.offset for dump in state.dumps) + len(state.dumps),
            max(dump.reader.last_time_ns for dump in state.dumps),
        )

    def waiting_for(self, pid: int, time_ns: int) -> bool:
        """May the process's dump still describe code run at `time_ns`? (V8
        buffers 2 MiB of records: they can arrive long after the code ran.)"""
        with self._lock:
            state = self._processes.get(pid)
        if state is None:
            return False
        return any(not dump.reader.stopped and dump.reader.last_time_ns < time_ns for dump in state.dumps)

    def read_all(self) -> None:
        """Read every dump to its current end (the run is ending)."""
        with self._lock:
            states = list(self._processes.values())
        for state in states:
            for dump in state.dumps:
                dump.tail()

    def _frame(self, pid: int, number: int, load: CodeLoad, address: int) -> Frame:
        # V8's debug lines give only the innermost inlined position, in a
        # function the frame does not name: its names carry the function's
        # line, and the V8 code log gives exact, inlined lines.
        line = None if load.from_v8 else load.line_at(address)
        key = (pid, number, load.sequence, line.address if line is not None else -1)
        frame = self._frames.get(key)
        if frame is None:
            frame = self._function_frame(pid, number, load)
            if line is not None and line.line > 0:
                frame = Frame(
                    frame.name,
                    JIT_MODULE,
                    FrameKind.JIT,
                    line.file,
                    line.line,
                    line.column,
                    frame.tier,
                    line_exact=True,
                    function_line=frame.function_line,
                    function_column=frame.function_column,
                )
            self._frames[key] = frame
        return frame

    def _function_frame(self, pid: int, number: int, load: CodeLoad) -> Frame:
        """The load's function, placed by its runtime: once per load, not
        once per line in it (placing asks the process's start time)."""
        key = (pid, number, load.sequence, -1)
        frame = self._frames.get(key)
        if frame is None:
            frame = frame_for_name(load.name)
            with self._lock:
                state = self._processes.get(pid)
            runtime = state.runtime if state is not None and not frame.file else None
            if runtime is not None and runtime.place_frame is not None:
                frame = runtime.place_frame(pid, load.name, frame)
            self._frames[key] = frame
        return frame

    def _scan(self, state: _ProcessDumps, map_files: list[str] | None = None) -> None:
        with self._scanning:  # the main thread (maps changed) and the symbolizer's
            self._scan_now(state, mapped_dumps(state.pid) if map_files is None else map_files)

    def _scan_now(self, state: _ProcessDumps, map_files: list[str]) -> None:
        if state.owner_uid is None or len(state.dumps) >= MAX_DUMPS_PER_PROCESS:
            return
        for map_file in map_files:
            try:
                descriptor = os.open(map_file, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
            except OSError:
                continue
            try:
                info = os.fstat(descriptor)
            except OSError:
                os.close(descriptor)
                continue
            identity = (info.st_dev, info.st_ino)
            if identity in state.identities:
                os.close(descriptor)
                continue
            state.identities.add(identity)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != state.owner_uid:
                state.refused = f"{map_file} is not a regular file owned by uid {state.owner_uid}"
                os.close(descriptor)
                continue
            state.dumps.append(JitdumpFile(os.readlink(map_file), descriptor))

    def forget(self, pid: int, remove_as: int | None = None) -> list[str]:
        """A process long gone: close its dumps and let its code go (and
        remove_as: remove the dumps it was told to write, as their owner)."""
        with self._lock:
            state = self._processes.pop(pid, None)
            if state is not None:
                self._frames = {key: frame for key, frame in self._frames.items() if key[0] != pid}
        if state is None:
            return []
        reports = _reports_of(state)
        for dump in state.dumps:
            dump.close()
        if remove_as is not None and state.dumps:
            remove_jitdumps([pid], remove_as)
        return [report.warning() for report in reports if report.error]

    def warnings(self) -> list[str]:
        return [report.warning() for report in self.reports() if report.error]

    def has_source(self, pid: int) -> bool:
        with self._lock:
            state = self._processes.get(pid)
        return state is not None and bool(state.dumps)

    def reports(self) -> list[JitdumpReport]:
        with self._lock:
            states = list(self._processes.values())
        return [report for state in states for report in _reports_of(state)]

    def close(self) -> None:
        with self._lock:
            for state in self._processes.values():
                for dump in state.dumps:
                    dump.close()
                state.dumps.clear()


def _tail_if_due(state: _ProcessDumps, now: float) -> None:
    if now - state.last_tail >= TAIL_INTERVAL_S:
        state.last_tail = now
        for dump in state.dumps:
            dump.tail()


def _reports_of(state: _ProcessDumps) -> list[JitdumpReport]:
    reports = [
        JitdumpReport(state.pid, dump.path, len(dump.reader.code), dump.reader.error, dump.reader.insane_debug_records)
        for dump in state.dumps
    ]
    if state.refused and not state.dumps:
        reports.append(JitdumpReport(state.pid, "", 0, state.refused, 0))
    return reports
