"""Every source of JIT code names for one run, and what to tell the user
about them: each runtime's own (its record's symbol_sources: V8's objects and
code log, the JVM's maps asked for), then the generic ones: jitdump files
(exact by time), perf maps (any runtime), in that order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from profiler.jit import runtimes
from profiler.jit.contract import SourceSettings
from profiler.jit.files import JitFileJanitor
from profiler.jit.jitdump_files import remove_jitdumps
from profiler.jit.jitdump_source import JitdumpSymbols
from profiler.jit.perfmap import candidate_paths, remove_perf_map
from profiler.jit.perfmap_source import PerfMapSymbols
from profiler.jit.symbol_source import JitSymbolSource
from profiler.kernel.address_spaces import JIT_MODULE
from profiler.kernel.events import StackCopy, V8FrameSlots
from profiler.kernel.late_walks import WalkedFrame
from profiler.kernel.procmaps import MapEntry
from profiler.model.profile import FrameKind, Profile
from profiler.safety.terminal import say

MAX_UNNAMED_HINTS = 5  # the processes with the most such samples
# A process with a symbol source that left this share of its samples' JIT
# code unnamed is told of: its runtime made code it never recorded (bun's
# first trampolines), or recorded too late (JavaScriptCore writes its dump
# from a queue: what is queued when the process exits is lost).
UNDESCRIBED_SHARE = 0.05
UNDESCRIBED_MIN_SAMPLES = 10
MAX_HAD_SOURCE = 1 << 16  # processes gone whose JIT source is remembered for the hints


class JitSources:
    def __init__(
        self,
        owner_uid: int | None,
        expand_inlining: bool,
        janitor: JitFileJanitor,
        ask_processes: bool = True,
        injected: bool = False,
        kernel: Any = None,
        jvm_debug_non_safepoints: bool = False,
        async_callers: bool = True,
    ) -> None:
        # owner_uid: the user a spawned command runs as, for files of
        # processes gone before they could be asked who they were;
        # ask_processes: --all does not make every JVM on the machine write
        # files; kernel: the BPF program's maps (None: V8's objects are not read).
        self.perf_maps = PerfMapSymbols(default_owner_uid=owner_uid)
        self.jitdumps = JitdumpSymbols(default_owner_uid=owner_uid, runtime_of=runtimes.runtime_of)
        settings = SourceSettings(
            owner_uid,
            expand_inlining,
            janitor,
            ask_processes,
            kernel,
            self.perf_maps,
            runtimes.runtime_of,
            jvm_debug_non_safepoints,
            async_callers,
        )
        self._settings = settings
        own = [
            source
            for runtime in runtimes.RUNTIMES
            if runtime.symbol_sources is not None and not runtime.sources_when_found
            for source in runtime.symbol_sources(settings)
        ]
        # The runtimes whose sources are made when their first process is found.
        self._later = [
            runtime for runtime in runtimes.RUNTIMES if runtime.symbol_sources is not None and runtime.sources_when_found
        ]
        # The runtimes' own, then the generic ones. Replaced whole, never
        # changed in place: other threads go on over the list they took.
        self._sources: list[JitSymbolSource] = [*own, self.jitdumps, self.perf_maps]
        self.on_sources_changed: Callable[[list[JitSymbolSource]], None] | None = None
        self._injected = injected  # jitprof gave the command's runtimes their JIT-symbol flags
        self._janitor = janitor
        # What is kept of processes forgotten during the run (see forget).
        # Oldest first, bounded: a service sees processes without end, and only
        # the hints at the end of a run (about samples still held) ask.
        self._had_source: dict[int, None] = {}
        self._warnings: list[str] = []
        self.said_on_attach: list[str] = []  # said already, kept with the profile

    def record_walked_frames(self, pid: int, frames: list[WalkedFrame], stack: StackCopy) -> tuple[V8FrameSlots, ...]:
        """(For late walks.) The runtimes' records of frames walked in user space."""
        return tuple(record for source in self._sources for record in source.record_walked_frames(pid, frames, stack))

    def symbol_sources(self) -> list[JitSymbolSource]:
        """Every source of names, in the order they are asked."""
        return list(self._sources)

    def maps_changed(self, pid: int, entries: Sequence[MapEntry]) -> None:
        for source in self._sources:
            source.maps_changed(pid, entries)

    def watch(self, pid: int) -> None:
        """A process is followed (or has just exec'd): note what it runs."""
        self._make_sources_for(pid)
        for source in self._sources:
            source.watch(pid)

    def _make_sources_for(self, pid: int) -> None:
        """The first process of a runtime whose sources wait for one: they are
        made now, after the runtimes' own sources so far, before the generic ones."""
        if not self._later:
            return
        runtime = runtimes.runtime_of(pid)
        if runtime is None or runtime not in self._later:  # records compare by identity
            return
        self._later.remove(runtime)
        assert runtime.symbol_sources is not None
        self._sources = [*self._sources[:-2], *runtime.symbol_sources(self._settings), self.jitdumps, self.perf_maps]
        if self.on_sources_changed is not None:
            self.on_sources_changed(list(self._sources))

    def has_source(self, pid: int) -> bool:
        return pid in self._had_source or any(source.has_source(pid) for source in self._sources)

    def forget(self, pid: int, remove_as: int | None) -> None:
        """A process gone long enough that none of its samples wait: close its
        files and let its code go, so a long run with processes coming and
        going stays flat; remove_as: remove the files jitprof asked it to
        write (as their owner). What the end-of-run warnings need is kept."""
        if self.has_source(pid):  # before its sources let it go
            self._had_source[pid] = None
            if len(self._had_source) > MAX_HAD_SOURCE:
                del self._had_source[next(iter(self._had_source))]
        for source in self._sources:
            self._warnings += source.forget(pid, remove_as)
        self._janitor.forget(pid, remove_as)
        if remove_as is not None:
            remove_perf_map(f"/tmp/perf-{pid}.map", remove_as)  # written, never read

    def warn_if_unnamed(self, pid: int, inline: bool) -> None:
        """Attaching to a runtime that cannot name its JIT code: say so, with the fix."""
        runtime = runtimes.runtime_of(pid)
        if runtime is None:
            return
        self._make_sources_for(pid)
        if runtime.attach_notes is not None:
            notes = list(runtime.attach_notes(pid, self._sources, inline))
        elif not any(os.path.exists(path) for path in candidate_paths(pid)):
            notes = [f"jitprof: warning: {runtime.name} (pid {pid}) writes no perf map; {runtime.fix}"]
        else:
            notes = []
        for note in notes:
            say(note)
        self.said_on_attach += notes

    def end_messages(self, profile: Profile) -> list[str]:
        """The lines said at the end: files refused or damaged, runtimes that
        would not answer, and JIT code no source named, with the fix per runtime."""
        lines = list(self._warnings)
        for source in self._sources:
            lines += source.warnings()
        every_unnamed, totals = _unnamed_jit_samples(profile)
        lines += _undescribed_notes({pid: count for pid, count in every_unnamed.items() if self.has_source(pid)}, totals)
        unnamed = {pid: count for pid, count in every_unnamed.items() if not self.has_source(pid)}
        if self._injected:
            # Processes given the flags that were gone before their perf map
            # was read: nothing for the user to fix, so no per-process hint.
            gone = {pid: count for pid, count in unnamed.items() if runtimes.runtime_of(pid) is None}
            if gone:
                lines.append(
                    f"jitprof: note: {sum(gone.values()):,} samples in {len(gone)} short-lived "
                    f"process{'es' if len(gone) != 1 else ''} ran anonymous executable code that no perf map "
                    "named before they exited"
                )
            unnamed = {pid: count for pid, count in unnamed.items() if pid not in gone}
        for shown, (pid, count) in enumerate(sorted(unnamed.items(), key=lambda item: -item[1])):
            if shown == MAX_UNNAMED_HINTS:
                lines.append(f"jitprof: hint: and {len(unnamed) - shown} more processes ran JIT code with no symbol source")
                break
            runtime = runtimes.runtime_seen(pid) or runtimes.UNKNOWN  # the JVM that exited is still the JVM
            lines.append(
                f"jitprof: hint: {count:,} samples of pid {pid} ran JIT code with no symbol source; "
                f"for {runtime.name}: {runtime.fix}"
            )
        return lines

    def remove_asked_files(self) -> None:
        """The files jitprof asked processes to write (attached ones too)."""
        for source in self._sources:
            source.remove_asked_files()

    def remove_files(self, owner_uid: int, pids: Iterable[int]) -> None:
        """Perf maps, jitdumps and V8 logs exist because jitprof asked for them."""
        for source in self._sources:
            source.remove_files(owner_uid)
        self._janitor.remove_files(owner_uid)  # V8's logs, the code log among them
        for pid in sorted(pids):  # processes whose map was never read
            remove_perf_map(f"/tmp/perf-{pid}.map", owner_uid)
        remove_jitdumps(pids, owner_uid)

    def close(self) -> None:
        for source in self._sources:
            source.close()


def _undescribed_notes(unnamed: dict[int, int], totals: dict[int, int]) -> list[str]:
    """Processes whose symbol sources left many of their samples' JIT code unnamed (totals: each one's samples)."""
    notes = []
    for pid, count in sorted(unnamed.items(), key=lambda item: -item[1])[:MAX_UNNAMED_HINTS]:
        if count < UNDESCRIBED_MIN_SAMPLES or count < UNDESCRIBED_SHARE * totals.get(pid, 0):
            continue
        runtime = runtimes.runtime_seen(pid) or runtimes.UNKNOWN
        notes.append(
            f"jitprof: note: {count:,} of the {totals[pid]:,} samples of pid {pid} ({runtime.name}) ran JIT code "
            "that its symbol files never described (made without a record, or recorded only after it exited)"
        )
    return notes


def _unnamed_jit_samples(profile: Profile) -> tuple[dict[int, int], dict[int, int]]:
    """Per process: its samples with JIT code no source named, and all its samples."""
    unnamed: dict[int, int] = {}
    totals: dict[int, int] = {}
    for sample in profile.samples:
        totals[sample.pid] = totals.get(sample.pid, 0) + 1
        for frame_id in sample.frame_ids:
            frame = profile.frames[frame_id]
            if frame.kind is FrameKind.UNKNOWN and frame.module == JIT_MODULE:
                unnamed[sample.pid] = unnamed.get(sample.pid, 0) + 1
                break
    return unnamed, totals
