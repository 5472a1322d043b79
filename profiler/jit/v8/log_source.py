"""JS frames from V8's code log: inlined functions restored, lines and columns.

Each Node process's code logs (one per isolate) are found through the
process's open descriptors (a path can be swapped for a symlink, an open
file cannot), or, once the process has gone, in the working directory
noted while it lived. They are tailed as the symbolizer asks, so memory
follows the live code, not the size of the log.

The log's times count from its isolate's start, with no absolute anchor:
each line is flushed as V8 writes it, so a line read at time R happened at
or before R, and the smallest (R - logged time) over the lines read bounds
the anchor from above, tightly once one line is read promptly.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from profiler.jit.rescan import Rescan
from profiler.jit.symbol_source import JitSymbolSource
from profiler.jit.v8.code_map import CodeMap, CodeObject, IsolateLog, Script, SourceFrame, inline_stack, position_in
from profiler.jit.v8.log_parser import CodeCreation, V8LogReader
from profiler.jit.v8.names import JS_TAGS, Tier, V8Name, parse_v8_name
from profiler.jit.v8.script_file_lines import ScriptFileReader
from profiler.kernel.address_spaces import JIT_MODULE, KnownMapping
from profiler.kernel.proc_status import process_uid, start_time
from profiler.model.profile import Frame, FrameKind

LOG_MAGIC = b"v8-version,"
TAIL_INTERVAL_S = 0.01
READ_CHUNK = 1 << 20
MAX_READ_PER_TAIL = 32 << 20  # keeps one lookup's latency bounded while a huge log is caught up
MAX_LOGS_PER_PROCESS = 256
MAX_MEMO_ENTRIES = 1 << 20
UNKNOWN_INLINED = "(inlined function, not in the log)"
_EMBEDDED_TIERS = {Tier.BUILTIN.value, Tier.BYTECODE_HANDLER.value}


@dataclass
class _LogFile:
    """One V8 log file of a process, read as it grows."""

    descriptor: int
    identity: tuple[int, int]  # (st_dev, st_ino)
    isolate: IsolateLog = field(default_factory=IsolateLog)
    reader: V8LogReader = field(default_factory=V8LogReader)
    offset: int = 0
    anchor_ns: int | None = None  # CLOCK_MONOTONIC of the logger's time zero (upper bound)
    last_event_ns: int = 0


@dataclass
class _ProcessLogs:
    """The V8 logs of one process and the code they describe."""

    pid: int
    owner_uid: int | None
    logs: list[_LogFile] = field(default_factory=list)
    code: CodeMap = field(default_factory=CodeMap)
    last_tail: float = 0.0
    rescan: Rescan = field(default_factory=Rescan)
    revision: int = 0  # changes with every batch of code events applied
    latest_event_ns: int = 0
    # Its scripts' files, for a log without sources: where they are (its
    # root) and who may read them (its user), taken while it lives: when it
    # is watched if it may be named after it exits, else when a script without
    # source is first named, if the process that held its logs still runs.
    script_files: ScriptFileReader | None = None
    started: int | None = None  # when the process whose descriptors held its logs started
    script_files_looked: bool = False


@dataclass(frozen=True)
class V8LogReport:
    """What one process's V8 logs gave, for the end of a run."""

    pid: int
    logs: int
    code_objects: int
    bad_lines: int
    bytes_read: int

    def warnings(self) -> list[str]:
        if not self.bad_lines:
            return []
        return [f"jitprof: warning: skipped {self.bad_lines:,} malformed lines in the V8 code log of pid {self.pid}"]


class V8LogSymbols(JitSymbolSource):
    """Expands a JIT address into its source frames (see symbolizer.JitExpander)."""

    def __init__(
        self,
        expand_inlining: bool = True,
        default_owner_uid: int | None = None,
        working_directory_logs: Callable[[int], list[int]] | None = None,
        named_after_exit: Callable[[int], bool] | None = None,
    ) -> None:
        self.expand_inlining = expand_inlining
        self._named_after_exit = named_after_exit  # may this process's samples be named after it exits?
        self._default_owner_uid = default_owner_uid
        # Opened logs in a (gone) process's working directory, for late discovery.
        self._working_directory_logs = working_directory_logs
        self._lock = threading.Lock()
        self._processes: dict[int, _ProcessLogs] = {}
        self._memo: dict[tuple[int, int, int], tuple[Frame, ...]] = {}

    def watch(self, pid: int) -> None:
        """Note the process's owner while it is alive (its logs are looked
        for on the symbolizer thread, when its JIT code is first sampled),
        and, for one whose samples may be named after it exits (a spawned
        deno's), where its scripts' files are: its root and its user."""
        state = self._state(pid)
        if self._named_after_exit is not None and self._named_after_exit(pid):
            self._note_script_files(state)

    def _state(self, pid: int) -> _ProcessLogs:
        with self._lock:
            state = self._processes.get(pid)
            if state is None:
                state = self._processes[pid] = _ProcessLogs(pid, process_uid(pid, self._default_owner_uid))
            return state

    def expand(self, pid: int, time_ns: int, address: int, caller: bool = False) -> tuple[Frame, ...] | None:
        """The frames at a JIT address, outermost first; None when the log
        does not know it (the perf map may)."""
        with self._lock:
            state = self._processes.get(pid)
        if state is None:
            state = self._state(pid)
        if not state.logs and not state.rescan.due(time.monotonic()):
            return None  # no log (a JVM's, a bun's code): asked for each of its JIT frames
        now = self._tail_if_due(state)
        code = state.code.lookup(address, time_ns)
        if code is None and state.rescan.due(now):
            added = self._scan(state)
            state.rescan.looked(now, added)
            if added:
                self._tail(state)
                code = state.code.lookup(address, time_ns)
        if code is None:
            return None
        offset = address - code.start
        key = (pid, code.sequence, offset)
        frames = self._memo.get(key)
        if frames is None:
            frames = self._frames(state, code, offset)
            if len(self._memo) >= MAX_MEMO_ENTRIES:
                self._memo.clear()
            self._memo[key] = frames
        return frames

    def resolve_file_code(self, pid: int, mapping: KnownMapping, address: int, time_ns: int = 0) -> Frame | None:
        """V8's embedded builtins, mapped again from a stripped binary (short
        builtin calls): the log's records of them name them there, as a perf
        map would; nothing else the log holds lives in a file's mapping."""
        frames = self.expand(pid, time.monotonic_ns(), address)
        if frames is None or len(frames) != 1 or frames[0].tier not in _EMBEDDED_TIERS:
            return None
        return frames[0]

    def epoch(self, pid: int) -> tuple[int, int]:
        """(revision, time of the latest code event) of what is known of pid's
        code, after reading what is due: while it stays the same, and for
        samples taken after that event, an address names the same frames."""
        with self._lock:
            state = self._processes.get(pid)
        if state is None:
            return (0, 0)
        self._tail_if_due(state)
        return (state.revision, state.latest_event_ns)

    def _tail_if_due(self, state: _ProcessLogs) -> float:
        now = time.monotonic()
        if now - state.last_tail >= TAIL_INTERVAL_S:
            self._tail(state)
            state.last_tail = now
        return now

    # Finding and reading logs ------------------------------------------

    def _scan(self, state: _ProcessLogs) -> bool:
        """Open logs not seen yet; True when one was added."""
        if state.owner_uid is None or len(state.logs) >= MAX_LOGS_PER_PROCESS:
            return False
        added = False
        started = start_time(state.pid)  # before its descriptors are listed: the process that held them
        descriptors, live = self._candidates(state.pid)
        for descriptor in descriptors:
            if self._adopt(state, descriptor):
                added = True
            else:
                os.close(descriptor)
        if added and live and state.started is None:
            state.started = started
        return added

    def _note_script_files(self, state: _ProcessLogs, started: int | None = None) -> ScriptFileReader | None:
        """Where the process's scripts' files are (its root, its user), looked for once."""
        with self._lock:
            if not state.script_files_looked:
                state.script_files_looked = True
                state.script_files = ScriptFileReader.of_process(state.pid, started)
            return state.script_files

    def _candidates(self, pid: int) -> tuple[list[int], bool]:
        """Opened logs, and whether they were found among the live process's descriptors."""
        opened = []
        fd_directory = f"/proc/{pid}/fd"
        try:
            names = os.listdir(fd_directory)
        except OSError:
            names = []
        for name in names:
            try:
                target = os.readlink(f"{fd_directory}/{name}")
            except OSError:
                continue
            if not target.startswith("/") or not target.endswith(".log"):
                continue  # sockets, pipes, deleted files ("... (deleted)")
            try:
                if not stat.S_ISREG(os.stat(f"{fd_directory}/{name}").st_mode):
                    continue  # never open a device or FIFO as root (fstat checks again after open)
                # O_NONBLOCK: whatever the link leads to, opening must not wait.
                opened.append(os.open(f"{fd_directory}/{name}", os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY))
            except OSError:
                continue
        if not names and self._working_directory_logs is not None:
            return [*opened, *self._working_directory_logs(pid)], False
        return opened, bool(names)

    def _adopt(self, state: _ProcessLogs, descriptor: int) -> bool:
        try:
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != state.owner_uid:
                return False
            identity = (info.st_dev, info.st_ino)
            if any(log.identity == identity for log in state.logs):
                return False
            if os.pread(descriptor, len(LOG_MAGIC), 0) != LOG_MAGIC:
                return False
        except OSError:
            return False
        state.logs.append(_LogFile(descriptor, identity))
        return True

    def _tail(self, state: _ProcessLogs) -> None:
        for log in state.logs:
            budget = MAX_READ_PER_TAIL
            while budget > 0:
                try:
                    data = os.pread(log.descriptor, READ_CHUNK, log.offset)
                except OSError:
                    break
                if not data:
                    break
                read_ns = time.monotonic_ns()
                log.offset += len(data)
                budget -= len(data)
                self._apply(state, log, log.reader.feed(data), read_ns)
                if len(data) < READ_CHUNK:
                    break

    def _apply(self, state: _ProcessLogs, log: _LogFile, events: list, read_ns: int) -> None:
        for event in events:  # tighten the anchor with the whole batch first
            if isinstance(event, CodeCreation):
                bound = read_ns - event.time_us * 1000
                if log.anchor_ns is None or bound < log.anchor_ns:
                    log.anchor_ns = bound
        for event in events:
            if isinstance(event, CodeCreation) and log.anchor_ns is not None:
                log.last_event_ns = log.anchor_ns + event.time_us * 1000
            state.code.apply(log.isolate, event, log.last_event_ns)
        if events:  # all of them happened before they were read
            state.revision += 1
            state.latest_event_ns = max(state.latest_event_ns, read_ns)

    # Frames ------------------------------------------------------------

    def _frames(self, state: _ProcessLogs, code: CodeObject, offset: int) -> tuple[Frame, ...]:
        if code.tag not in JS_TAGS:
            parsed = parse_v8_name(f"{code.tag}:{code.name}")
            if parsed is None:
                return (Frame(code.name or f"[{code.tag}]", JIT_MODULE, FrameKind.JIT),)
            return (Frame(parsed.display, JIT_MODULE, FrameKind.JIT, tier=parsed.tier.value),)
        stack = inline_stack(code, offset)
        if not self.expand_inlining:
            stack = [SourceFrame(stack[0].function, stack[0].script, stack[0].script_offset, False)]
        tier = _code_tier(code)
        return tuple(_js_frame(code, source_frame, tier, lambda: self._script_files_of(state)) for source_frame in stack)

    def _script_files_of(self, state: _ProcessLogs) -> ScriptFileReader | None:
        if state.script_files_looked or state.started is None:
            return state.script_files
        return self._note_script_files(state, state.started)

    def reports(self) -> list[V8LogReport]:
        with self._lock:
            states = list(self._processes.values())
        return [_report_of(state) for state in states]

    def forget(self, pid: int, remove_as: int | None = None) -> list[str]:
        """A process long gone: close its logs and let its code go."""
        with self._lock:
            state = self._processes.pop(pid, None)
            if state is not None:
                self._memo = {key: frames for key, frames in self._memo.items() if key[0] != pid}
        if state is None:
            return []
        report = _report_of(state)
        for log in state.logs:
            try:
                os.close(log.descriptor)
            except OSError:
                pass
        if state.script_files is not None:
            state.script_files.close()
        return report.warnings()

    def warnings(self) -> list[str]:
        return [warning for report in self.reports() for warning in report.warnings()]

    def has_source(self, pid: int) -> bool:
        with self._lock:
            state = self._processes.get(pid)
        return state is not None and bool(state.logs)

    def close(self) -> None:
        with self._lock:
            for state in self._processes.values():
                for log in state.logs:
                    try:
                        os.close(log.descriptor)
                    except OSError:
                        pass
                state.logs.clear()
                if state.script_files is not None:
                    state.script_files.close()
                    state.script_files = None


def _file_position(
    script: Script, script_files: Callable[[], ScriptFileReader | None], function_start: int, parsed: V8Name, offset: int
) -> tuple[int, int] | None:
    """For a script the log gave no source for: a position from its file
    (looked for once), if the function's declared line and column (V8's, in
    the log) agree with it; one that disagrees shows the file is not what V8
    ran, and it is not used again."""
    if not script.file_looked and parsed.script:
        script.file_looked = True
        reader = script_files()
        script.file_line_starts = reader.line_starts(parsed.script) if reader is not None else None
    if script.file_line_starts is None or function_start < 0 or not parsed.line:
        return None
    if position_in(script.file_line_starts, function_start) != (parsed.line, parsed.column):
        script.file_line_starts = None
        return None
    return position_in(script.file_line_starts, offset)


def _report_of(state: _ProcessLogs) -> V8LogReport:
    return V8LogReport(
        state.pid,
        len(state.logs),
        len(state.code),
        sum(log.reader.bad_lines + log.reader.skipped_long_lines for log in state.logs),
        sum(log.offset for log in state.logs),
    )


def _code_tier(code: CodeObject) -> str:
    parsed = parse_v8_name(f"{code.tag}:{code.marker}{code.name}")
    return parsed.tier.value if parsed is not None else Tier.UNOPTIMIZED.value


def _js_frame(
    code: CodeObject, source_frame: SourceFrame, tier: str, script_files: Callable[[], ScriptFileReader | None]
) -> Frame:
    function = source_frame.function
    if function is None or not function.name and function.script_id < 0:
        return Frame(UNKNOWN_INLINED, JIT_MODULE, FrameKind.JIT, tier=tier, inlined=source_frame.inlined)
    parsed = parse_v8_name(f"{function.tag}:{function.name}")
    if parsed is None:
        return Frame(function.name, JIT_MODULE, FrameKind.JIT, tier=tier, inlined=source_frame.inlined)
    line, column, exact = parsed.line, parsed.column, False
    script = source_frame.script
    if script is not None and source_frame.script_offset >= 0:
        position = script.line_and_column(source_frame.script_offset)
        if position is None and script.line_starts is None:
            position = _file_position(script, script_files, function.start_offset, parsed, source_frame.script_offset)
        if position is not None:
            (line, column), exact = position, True
    file = parsed.script or (script.url if script is not None else "")
    return Frame(
        parsed.display,
        JIT_MODULE,
        FrameKind.JIT,
        file,
        line,
        column,
        tier,
        source_frame.inlined,
        exact,
        parsed.line,
        parsed.column,
    )
