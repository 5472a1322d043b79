"""Names for JIT code from perf maps, one map per process, tailed as it grows.

Perf maps carry no timestamps: a sample is named by the entries appended by
the time it is resolved, which the symbolizer does promptly (within a poll
cycle), so code that reuses an address later does not rename old samples.
The JVM's map is different: a snapshot of its code cache, rewritten whole
each time it is asked for, so it is read again from the start (`reload`),
never tailed.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from dataclasses import dataclass, field

from profiler.jit import runtimes
from profiler.jit.names import frame_for_name
from profiler.jit.perfmap import EntryBudget, PerfMapFile, PerfMapRefused, candidate_paths, open_perf_map
from profiler.jit.rescan import Rescan
from profiler.jit.symbol_source import JitSymbolSource
from profiler.kernel.address_spaces import KnownMapping
from profiler.kernel.proc_status import process_uid, started_at
from profiler.model.profile import Frame

TAIL_INTERVAL_S = 0.01
MAX_HELD_MARKS = 1 << 16  # a process's samples are held for seconds, marked per batch (tens a second)


@dataclass
class _ProcessMap:
    """The perf map of one process, and what was read of it."""

    pid: int
    owner_uid: int | None
    runtime: runtimes.Runtime | None
    started_s: float | None = None  # a map written before this is an earlier process's with the pid
    file: PerfMapFile | None = None
    refused: str = ""
    rescan: Rescan = field(default_factory=Rescan)  # a process may write its map after it starts
    last_tail: float = 0.0
    frames: dict[int, Frame] = field(default_factory=dict)  # by entry sequence
    reloads: int = 0
    # While its samples wait to be named after it exits: (monotonic ns, the
    # file's size then), both rising. A sample is named by the lines the map
    # held at the first mark after it: code written later over the same
    # addresses (V8 reuses freed code space) is not its code.
    held_marks: list[tuple[int, int]] = field(default_factory=list)

    def written_by(self, time_ns: int) -> int | None:
        """The map's size at the first mark at or after time_ns (None: no mark then)."""
        marks = self.held_marks
        if not marks or not time_ns:
            return None
        index = bisect.bisect_left(marks, (time_ns, -1))
        return marks[index][1] if index < len(marks) else None


@dataclass(frozen=True)
class PerfMapReport:
    """What one process's perf map gave, for the end of a run."""

    pid: int
    path: str
    entries: int
    skipped_lines: int
    truncated: str  # why reading stopped early, if it did
    refused: str

    def warnings(self) -> list[str]:
        found = []
        if self.refused:
            found.append(f"jitprof: warning: not reading the perf map of pid {self.pid}: {self.refused}")
        if self.skipped_lines:
            found.append(f"jitprof: warning: skipped {self.skipped_lines:,} malformed lines in {self.path}")
        if self.truncated:
            found.append(
                f"jitprof: warning: stopped reading the perf map of pid {self.pid} ({self.path}) at "
                f"{self.truncated}; its later JIT code is unnamed"
            )
        return found


class PerfMapSymbols(JitSymbolSource):
    """A symbol source for the symbolizer thread."""

    def __init__(self, default_owner_uid: int | None = None) -> None:
        # The uid a perf map must belong to when the process has gone before
        # we could ask it (the user jitprof ran the command as).
        self._default_owner_uid = default_owner_uid
        # Two locks, always taken in this order: _reading while a file is
        # read or looked up in (a tail of a huge map takes a while), _lock
        # only for moments (the table of processes, a file swapped). watch
        # runs on the sampling thread and takes _lock alone: it never waits
        # for a read.
        self._reading = threading.Lock()
        self._lock = threading.Lock()
        self._maps: dict[int, _ProcessMap] = {}
        self._budget = EntryBudget()  # every map of the run together

    def watch(self, pid: int) -> None:
        """Note the owner of a process now, while it is alive."""
        with self._lock:
            state = self._maps.get(pid)
            if state is None:
                self._maps[pid] = self._new_state(pid)
            elif state.file is None:  # seen before its exec: what runs now?
                state.runtime = runtimes.runtime_of(pid) or state.runtime

    def _new_state(self, pid: int) -> _ProcessMap:
        return _ProcessMap(pid, process_uid(pid, self._default_owner_uid), runtimes.runtime_of(pid), started_at(pid))

    def resolve(self, pid: int, mapping: KnownMapping, address: int, time_ns: int = 0) -> Frame | None:
        state = self._state(pid)
        with self._reading:  # a reload swaps the file from another thread
            file = state.file
            if file is None:
                return None
            self._tail_if_due(state, file)
            entry = file.index.lookup(address, state.written_by(time_ns))
            if entry is None:
                return None
            frame = state.frames.get(entry.sequence)
            if frame is None:
                frame = frame_for_name(entry.name, state.runtime)
                state.frames[entry.sequence] = frame
            return frame

    def resolve_file_code(self, pid: int, mapping: KnownMapping, address: int, time_ns: int = 0) -> Frame | None:
        return self.resolve(pid, mapping, address, time_ns)

    def samples_held(self, pid: int, until_ns: int) -> None:
        """The map is opened while the process lives (in a container it is
        found only through it), and its size now marked (see held_marks)."""
        state = self._state(pid)
        with self._reading:
            file = state.file
            if file is None or _is_snapshot(state):
                return
            try:
                size = os.fstat(file.descriptor).st_size
            except OSError:
                return
            marks = state.held_marks
            if marks and marks[-1][1] == size:
                marks[-1] = (until_ns, size)  # nothing written since: the mark holds until now
            elif len(marks) < MAX_HELD_MARKS:
                marks.append((until_ns, size))

    def epoch(self, pid: int) -> tuple[int, int]:
        """(revision, 0) of pid's map: lines carry no times (see V8LogSymbols.epoch).
        A watched process's map is opened here while it lives, even when other
        sources name its code: its samples after it exits, and removing the
        map (in a container, found only through the live process), need it."""
        with self._lock:
            state = self._maps.get(pid)
        if state is None:
            return (0, 0)
        if state.file is None:
            state = self._state(pid)  # tries to open it when due (see Rescan)
        with self._reading:
            if state.file is None:
                return (0, 0)
            self._tail_if_due(state, state.file)
            return ((state.reloads << 40) + len(state.file.index), 0)

    def _tail_if_due(self, state: _ProcessMap, file: PerfMapFile) -> None:
        now = time.monotonic()
        # A snapshot is read once when opened, then only by `reload`.
        if _is_snapshot(state):
            if not state.last_tail:
                file.read_all()
                state.last_tail = now
        elif now - state.last_tail >= TAIL_INTERVAL_S:
            file.tail()
            state.last_tail = now

    def reload(self, pid: int) -> int:
        """Read a rewritten map again from its start; returns its entries."""
        state = self._state(pid)
        fresh = _open_map(state, self._budget)
        if fresh is None:
            return 0
        fresh.read_all()
        with self._reading, self._lock:
            old, state.file = state.file, fresh
            state.last_tail = time.monotonic()
            state.frames.clear()  # frames are keyed by the old file's entry order
            state.reloads += 1
            state.refused = ""
        if old is not None:
            with self._reading:
                old.close()
        return len(fresh.index)

    def has_source(self, pid: int) -> bool:
        return self._state(pid).file is not None

    def _state(self, pid: int) -> _ProcessMap:
        with self._lock:
            state = self._maps.get(pid)
            if state is None:
                state = self._maps[pid] = self._new_state(pid)
        if state.file is None and not state.refused:
            now = time.monotonic()
            if state.rescan.due(now):
                state.file = _open_map(state, self._budget)
                state.rescan.looked(now, state.file is not None)
        return state

    def reports(self) -> list[PerfMapReport]:
        with self._reading, self._lock:
            return [_report_of(state) for state in self._maps.values()]

    def remove_files(self, owner_uid: int) -> None:
        """Delete the perf maps read in this run (they exist because we asked)."""
        with self._reading, self._lock:
            for state in self._maps.values():
                if state.file is not None:
                    state.file.remove(owner_uid)

    def forget(self, pid: int, remove_as: int | None) -> list[str]:
        """A process long gone: remove its map (remove_as: the owner, when
        jitprof asked for it) and close it; what went wrong with it."""
        with self._reading:
            with self._lock:
                state = self._maps.pop(pid, None)
            if state is None:
                return []
            report = _report_of(state)
            if state.file is not None:
                if remove_as is not None:
                    state.file.remove(remove_as)
                state.file.close()
        return report.warnings()

    def warnings(self) -> list[str]:
        return [warning for report in self.reports() for warning in report.warnings()]

    def remove_file(self, pid: int) -> bool:
        """Delete one process's perf map, if it is still the file read."""
        with self._reading, self._lock:
            state = self._maps.get(pid)
            if state is None or state.file is None or state.owner_uid is None:
                return False
            return state.file.remove(state.owner_uid)

    def close(self) -> None:
        with self._reading, self._lock:
            for state in self._maps.values():
                if state.file is not None:
                    state.file.close()


def _report_of(state: _ProcessMap) -> PerfMapReport:
    return PerfMapReport(
        state.pid,
        state.file.path if state.file else "",
        len(state.file.index) if state.file else 0,
        state.file.skipped_lines if state.file else 0,
        state.file.truncated if state.file else "",
        state.refused,
    )


def _open_map(state: _ProcessMap, budget: EntryBudget) -> PerfMapFile | None:
    """The process's map, where it is found first; None (with `refused`
    set when the file is not safe) otherwise."""
    if state.owner_uid is None:
        return None  # no owner to check the file against: never read it
    for path in candidate_paths(state.pid):
        try:
            opened = open_perf_map(path, state.owner_uid, budget, not_before=state.started_s)
        except PerfMapRefused as error:
            state.refused = str(error)
            return None
        if opened is not None:
            return opened
    return None


def _is_snapshot(state: _ProcessMap) -> bool:
    """Is the map rewritten whole (the JVM's) rather than appended to?"""
    return state.runtime is runtimes.JAVA
