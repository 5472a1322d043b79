"""Keeps the perf maps of the JVMs being profiled current, for the JVMs
whose own structures cannot be read (jvm/hotspot_source.py names the rest).

HotSpot writes /tmp/perf-PID.map only when asked (`Compiler.perfmap`), as a
snapshot of its code cache. jitprof asks every REFRESH_S while a JVM runs,
once more at the end, and rereads the map each time (and a map the JVM
wrote as it exited, -XX:+DumpPerfMapAtExit). Samples in code compiled since
the last snapshot wait for the next one (the symbolizer parks them).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from profiler.jit.contract import PerfMapReader
from profiler.jit.jvm.attach import EXCHANGE_TIMEOUT_S, AttachError, Budget, run_jcmd
from profiler.jit.perfmap import candidate_paths
from profiler.jit.symbol_source import JitSymbolSource
from profiler.kernel.proc_status import process_alive

REFRESH_S = 1.0
MAX_FAILURES = 5  # consecutive failed requests before a JVM is left alone
FINAL_BUDGET_S = 2.0  # the last snapshots of all JVMs together: the end of a run waits no longer


@dataclass
class _Jvm:
    pid: int
    map_was_there: bool  # written before jitprof asked: the user's, kept
    snapshots: int = 0
    last_snapshot_ns: int = 0  # CLOCK_MONOTONIC when the last snapshot was asked for
    failures: int = 0
    last_error: str = ""
    preserves_frame_pointers: bool | None = None


@dataclass(frozen=True)
class JvmReport:
    pid: int
    snapshots: int
    last_error: str
    preserves_frame_pointers: bool | None


@dataclass
class JvmPerfMaps(JitSymbolSource):
    perf_maps: PerfMapReader
    is_jvm: Callable[[int], bool]  # does this live process run a JVM?
    # Is a JVM to be asked (now)? Not one whose own structures name its frames.
    wanted: Callable[[int], bool] = lambda _pid: True
    _jvms: dict[int, _Jvm] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def watch(self, pid: int) -> None:
        """Note a process; JVMs among them are asked for their maps from now on."""
        if not self.is_jvm(pid):
            return
        with self._lock:
            if pid not in self._jvms:
                self._jvms[pid] = _Jvm(pid, any(os.path.exists(path) for path in candidate_paths(pid)))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="jitprof-jvm-perfmap", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(REFRESH_S):
            self.refresh()

    def refresh(self) -> None:
        """Ask every live JVM for a snapshot, and read it."""
        with self._lock:
            jvms = [jvm for jvm in self._jvms.values() if jvm.failures < MAX_FAILURES]
        for jvm in jvms:
            if not self.wanted(jvm.pid):
                continue
            if process_alive(jvm.pid) and not self._stop.is_set():
                # Stopping the run cuts an exchange short within POLL_S.
                self._ask(jvm, Budget.of(EXCHANGE_TIMEOUT_S, self._stop.is_set))

    def _ask(self, jvm: _Jvm, budget: Budget) -> bool:
        """True when the JVM wrote a snapshot and it was read."""
        try:
            if jvm.preserves_frame_pointers is None:
                flags = run_jcmd(jvm.pid, "VM.flags", budget)
                jvm.preserves_frame_pointers = "-XX:+PreserveFramePointer" in flags.output
            asked_ns = time.monotonic_ns()
            reply = run_jcmd(jvm.pid, "Compiler.perfmap", budget)
        except AttachError as error:
            jvm.failures += 1
            jvm.last_error = str(error)
            return False
        if reply.status != 0:
            jvm.failures += 1
            jvm.last_error = f"Compiler.perfmap failed: {reply.output.strip()[:200]}"
            return False
        jvm.failures = 0
        jvm.last_error = ""
        if not self.perf_maps.reload(jvm.pid):
            return False
        jvm.snapshots += 1
        jvm.last_snapshot_ns = asked_ns
        return True

    def waiting_for(self, pid: int, time_ns: int) -> bool:
        """Will a snapshot taken after `time_ns` still come (the JVM answers
        and runs)? Then a sample of code not in the last one waits for it."""
        jvm = self._jvms.get(pid)
        return (
            jvm is not None
            and jvm.failures < MAX_FAILURES
            and self.wanted(pid)
            and jvm.last_snapshot_ns < time_ns
            and not self._stop.is_set()
            and process_alive(pid)
        )

    def read_all(self) -> None:
        """The run is ending: a last snapshot from each JVM still running, and
        the map each one that exited wrote as it did."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            jvms = list(self._jvms.values())
        budget = Budget.of(FINAL_BUDGET_S)  # shared: a stalled JVM cannot hold the end of the run
        for jvm in jvms:
            if not self.wanted(jvm.pid):
                continue
            if process_alive(jvm.pid) and jvm.failures < MAX_FAILURES and self._ask(jvm, budget):
                continue
            if self.perf_maps.reload(jvm.pid):  # written at exit, or by the user
                jvm.snapshots += 1
                jvm.last_error = ""

    def warnings(self) -> list[str]:
        found = []
        for jvm in self.reports():
            if not self.wanted(jvm.pid):
                continue
            if jvm.last_error and not jvm.snapshots:
                found.append(f"jitprof: warning: the JVM (pid {jvm.pid}) gave no perf map: {jvm.last_error}")
            if jvm.preserves_frame_pointers is False:
                found.append(
                    f"jitprof: warning: the JVM (pid {jvm.pid}) runs without -XX:+PreserveFramePointer, so stacks "
                    "stop at the first compiled Java frame; restart it with that flag (or under jitprof -- java ...)"
                )
        return found

    def reports(self) -> list[JvmReport]:
        with self._lock:
            return [
                JvmReport(jvm.pid, jvm.snapshots, jvm.last_error, jvm.preserves_frame_pointers) for jvm in self._jvms.values()
            ]

    def remove_asked_files(self) -> None:
        """Delete the maps the JVMs wrote because jitprof asked."""
        with self._lock:
            jvms = list(self._jvms.values())
        for jvm in jvms:
            if not jvm.map_was_there:
                self.perf_maps.remove_file(jvm.pid)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
