"""Every source of JIT code names for one run, and what to tell the user
about them: V8's code log (inlined frames, lines), jitdump files (exact by
time), perf maps (any runtime; the JVM's asked for), in that order.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from profiler.jit import runtimes
from profiler.jit.files import JitFileJanitor
from profiler.jit.jitdump_source import JitdumpReport, JitdumpSymbols
from profiler.jit.jvm.perfmap_source import REFRESH_S, JvmPerfMaps
from profiler.jit.perfmap import candidate_paths, remove_perf_map
from profiler.jit.perfmap_source import PerfMapReport, PerfMapSymbols
from profiler.jit.symbol_source import JitSymbolSource
from profiler.jit.v8.heap_source import V8HeapSymbols, V8Kernel
from profiler.jit.v8.log_source import V8LogReport, V8LogSymbols
from profiler.jit.v8.runtime import NODE_CODE_LOG_FIX, node_code_log_active, node_flags_active
from profiler.kernel.mappings import JIT_MODULE
from profiler.model.profile import FrameKind, Profile
from profiler.safety.terminal import say

MAX_UNNAMED_HINTS = 5  # the processes with the most such samples
MAX_HAD_SOURCE = 1 << 16  # processes gone whose JIT source is remembered for the hints


class JitSources:
    def __init__(
        self,
        owner_uid: int | None,
        expand_inlining: bool,
        janitor: JitFileJanitor,
        ask_jvms: bool = True,
        injected: bool = False,
        v8_kernel: V8Kernel | None = None,
    ) -> None:
        # owner_uid: the user a spawned command runs as, for files of
        # processes gone before they could be asked who they were.
        self.perf_maps = PerfMapSymbols(default_owner_uid=owner_uid)
        self.v8_logs = V8LogSymbols(
            expand_inlining=expand_inlining, default_owner_uid=owner_uid, working_directory_logs=janitor.open_v8_logs
        )
        self.jitdumps = JitdumpSymbols(default_owner_uid=owner_uid)
        self.jvms = JvmPerfMaps(self.perf_maps)
        self.v8_heap = V8HeapSymbols(v8_kernel, expand_inlining)  # v8_kernel: the kernel half, to send JS frames
        self._ask_jvms = ask_jvms  # --all does not make every JVM on the machine write files
        self._injected = injected  # jitprof gave the command's runtimes their JIT-symbol flags
        self._janitor = janitor
        # What is kept of processes forgotten during the run (see forget).
        # Oldest first, bounded: a service sees processes without end, and only
        # the hints at the end of a run (about samples still held) ask.
        self._had_source: dict[int, None] = {}
        self._perf_map_reports: list[PerfMapReport] = []
        self._v8_reports: list[V8LogReport] = []
        self._jitdump_reports: list[JitdumpReport] = []

    def symbol_sources(self) -> list[JitSymbolSource]:
        """Every source of names, in the order they are asked: the code log and
        jitdumps (exact by time, with inlined frames), then perf maps."""
        return [self.v8_heap, self.v8_logs, self.jitdumps, self.perf_maps, self.jvms]

    def watch(self, pid: int) -> None:
        """A process is followed (or has just exec'd): note what it runs."""
        self.perf_maps.watch(pid)
        self.v8_heap.watch(pid)
        self.v8_logs.watch(pid)
        self.jitdumps.watch(pid)
        if self._ask_jvms:
            self.jvms.watch(pid)

    def has_source(self, pid: int) -> bool:
        return (
            pid in self._had_source
            or self.v8_heap.reads(pid)
            or self.perf_maps.has_map(pid)
            or self.v8_logs.has_log(pid)
            or self.jitdumps.has_dump(pid)
        )

    def forget(self, pid: int, remove_as: int | None) -> None:
        """A process gone long enough that none of its samples wait: close its
        files and let its code go, so a long run with processes coming and
        going stays flat; remove_as: remove the files jitprof asked it to
        write (as their owner). What the end-of-run warnings need is kept."""
        if self.has_source(pid):  # before its sources let it go
            self._had_source[pid] = None
            if len(self._had_source) > MAX_HAD_SOURCE:
                del self._had_source[next(iter(self._had_source))]
        perf_map = self.perf_maps.forget(pid, remove_as)
        if perf_map is not None and (perf_map.refused or perf_map.skipped_lines or perf_map.truncated):
            self._perf_map_reports.append(perf_map)
        self.v8_heap.forget(pid)
        v8_log = self.v8_logs.forget(pid)
        if v8_log is not None and v8_log.bad_lines:
            self._v8_reports.append(v8_log)
        self._jitdump_reports += [report for report in self.jitdumps.forget(pid) if report.error]
        self._janitor.forget(pid, remove_as)
        if remove_as is not None:
            remove_perf_map(f"/tmp/perf-{pid}.map", remove_as)  # written, never read

    def warn_if_unnamed(self, pid: int, inline: bool) -> None:
        """Attaching to a runtime that cannot name its JIT code: say so, with the fix."""
        runtime = runtimes.runtime_of(pid)
        has_map = any(os.path.exists(path) for path in candidate_paths(pid))
        if runtime is runtimes.NODE and self.v8_heap.reads(pid):
            return  # named from V8's own objects: nothing to restart
        if runtime is runtimes.NODE and self.v8_heap.refused(pid) and not has_map:
            say(
                f"jitprof: warning: cannot read V8's objects in node (pid {pid}): {self.v8_heap.refused(pid)}; so its "
                f"JavaScript frames will show as addresses; {runtime.fix}"
            )
        elif runtime is runtimes.NODE:
            if not has_map and not node_flags_active(pid):
                say(
                    f"jitprof: warning: node (pid {pid}) has no perf map, so its JavaScript frames will show as "
                    f"addresses; {runtime.fix}"
                )
            elif inline and not node_code_log_active(pid):
                say(
                    f"jitprof: note: node (pid {pid}) does not write V8's code log, so functions inlined by the JIT are "
                    f"counted in their callers and lines are per function; {NODE_CODE_LOG_FIX}"
                )
        elif runtime is runtimes.JAVA:
            say(f"jitprof: note: asking the JVM (pid {pid}) for its perf map every {REFRESH_S:g} s")
        elif runtime is not None and not has_map:
            say(f"jitprof: warning: {runtime.name} (pid {pid}) writes no perf map; {runtime.fix}")

    def report(self, profile: Profile) -> None:
        """Warnings at the end: files refused or damaged, JVMs that would not
        answer, and JIT code no source named, with the fix per runtime."""
        for report in self._perf_map_reports + self.perf_maps.reports():
            if report.refused:
                say(f"jitprof: warning: not reading the perf map of pid {report.pid}: {report.refused}")
            if report.skipped_lines:
                say(f"jitprof: warning: skipped {report.skipped_lines:,} malformed lines in {report.path}")
            if report.truncated:
                say(
                    f"jitprof: warning: stopped reading the perf map of pid {report.pid} ({report.path}) at "
                    f"{report.truncated}; its later JIT code is unnamed"
                )
        for v8_report in self._v8_reports + self.v8_logs.reports():
            if v8_report.bad_lines:
                say(
                    f"jitprof: warning: skipped {v8_report.bad_lines:,} malformed lines in the V8 code log of pid {v8_report.pid}"
                )
        for dump in self._jitdump_reports + self.jitdumps.reports():
            if dump.error:
                say(f"jitprof: warning: jitdump of pid {dump.pid} ({dump.path or 'not read'}): {dump.error}")
        for jvm in self.jvms.reports():
            if jvm.last_error and not jvm.snapshots:
                say(f"jitprof: warning: the JVM (pid {jvm.pid}) gave no perf map: {jvm.last_error}")
            if jvm.preserves_frame_pointers is False:
                say(
                    f"jitprof: warning: the JVM (pid {jvm.pid}) runs without -XX:+PreserveFramePointer, so stacks "
                    "stop at the first compiled Java frame; restart it with that flag (or under jitprof -- java ...)"
                )
        unnamed = {pid: count for pid, count in _unnamed_jit_samples(profile).items() if not self.has_source(pid)}
        if self._injected:
            # Processes given the flags that were gone before their perf map
            # was read: nothing for the user to fix, so no per-process hint.
            gone = {pid: count for pid, count in unnamed.items() if runtimes.runtime_of(pid) is None}
            if gone:
                say(
                    f"jitprof: note: {sum(gone.values()):,} samples in {len(gone)} short-lived "
                    f"process{'es' if len(gone) != 1 else ''} ran anonymous executable code that no perf map "
                    "named before they exited"
                )
            unnamed = {pid: count for pid, count in unnamed.items() if pid not in gone}
        for shown, (pid, count) in enumerate(sorted(unnamed.items(), key=lambda item: -item[1])):
            if shown == MAX_UNNAMED_HINTS:
                say(f"jitprof: hint: and {len(unnamed) - shown} more processes ran JIT code with no symbol source")
                break
            runtime = runtimes.runtime_of(pid) or runtimes.UNKNOWN
            say(
                f"jitprof: hint: {count:,} samples of pid {pid} ran JIT code with no symbol source; "
                f"for {runtime.name}: {runtime.fix}"
            )

    def remove_files(self, owner_uid: int, pids: Iterable[int]) -> None:
        """Perf maps and V8 logs exist because jitprof asked for them."""
        self.perf_maps.remove_files(owner_uid)
        self._janitor.remove_files(owner_uid)  # V8's logs, the code log among them
        for pid in sorted(pids):  # processes whose map was never read
            remove_perf_map(f"/tmp/perf-{pid}.map", owner_uid)

    def close(self) -> None:
        self.v8_heap.close()
        self.jvms.close()
        self.perf_maps.close()
        self.v8_logs.close()
        self.jitdumps.close()


def _unnamed_jit_samples(profile: Profile) -> dict[int, int]:
    unnamed: dict[int, int] = {}
    for sample in profile.samples:
        for frame_id in sample.frame_ids:
            frame = profile.frames[frame_id]
            if frame.kind is FrameKind.UNKNOWN and frame.module == JIT_MODULE:
                unnamed[sample.pid] = unnamed.get(sample.pid, 0) + 1
                break
    return unnamed
