"""The processes a run follows, kept in step with the kernel's events:
forks join, exec'd images are mapped anew, exits free their state."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

from profiler.jit.files import JitFileJanitor
from profiler.jit.sources import JitSources
from profiler.kernel.events import EventType, ProcessEvent
from profiler.kernel.kernel_maps import KernelMaps
from profiler.kernel.mappings import MappingTracker
from profiler.kernel.proc_status import descendants, parent_of, process_alive, start_time, thread_group_id
from profiler.kernel.trie import TriePrefix, covering_prefix
from profiler.labels.label_sources import LabelSources

MIN_REFRESH_INTERVAL_S = 0.05
# New ranges noted per process while its maps are not read again (then one a
# millisecond at most), as the kernel's side does: a process mapping in a
# loop costs a trickle of work, not a flood (its maps tell the rest).
MAX_RANGES_NOTED = 64
RANGE_GAP_NS = 1_000_000
MAX_POSTPONED = 20  # refreshes put off (one each MIN_REFRESH_INTERVAL_S) for an exec's event: then read anyway
SWEEP_KERNEL_S = 10.0


class FollowedProcesses:
    def __init__(
        self,
        maps: KernelMaps,
        tracker: MappingTracker,
        jit_sources: JitSources,
        jit_files: JitFileJanitor | None,
        on_new_process: Callable[[int, str], None] | None = None,
        on_runtime_known: Callable[[int], None] | None = None,
        labels: LabelSources | None = None,
    ) -> None:
        self._maps = maps
        self._tracker = tracker
        self._jit_sources = jit_sources
        self._jit_files = jit_files  # set when jitprof injected flags: their files are noted at exec
        self._on_new_process = on_new_process  # a process is followed, or has exec'd
        self._on_runtime_known = on_runtime_known  # its maps are read (--off-cpu: its threadpool is probed)
        self._labels = labels  # what processes publish for their samples' labels
        self.live: set[int] = set()
        self.seen: set[int] = set()  # when jitprof made them write JIT files: to remove them at the end
        self.ignored: set[int] = set()  # --all: jitprof's own processes
        self.followed_total = 0  # processes followed in the whole run
        self.awaiting_exec: set[int] = set()  # spawned, still jitprof's own code
        self._start_times: dict[int, int | None] = {}
        # pid -> provisional trie prefixes to drop once its maps are read
        self._pending_refresh: dict[int, list[TriePrefix]] = {}
        self._ranges_noted: dict[int, tuple[int, int]] = {}  # pid -> ranges noted since its maps were read, the last's time
        self._postponed: dict[int, int] = {}  # pid -> refreshes put off for an exec whose event is on its way
        self._exited_at: dict[int, float] = {}  # pid -> time.monotonic() of its exit
        self._last_refresh: dict[int, float] = {}
        self._next_kernel_sweep = 0.0

    def add(self, pid: int, parent: int | None = None, read_maps_now: bool = True, comm: str = "") -> None:
        self._start_times[pid] = start_time(pid)
        self._exited_at.pop(pid, None)  # a reused pid: the new process is not retired
        self._maps.follow(pid)
        if pid not in self.live:
            self.followed_total += 1
        self.live.add(pid)
        if self._jit_files is not None:
            self.seen.add(pid)
        if self._labels is not None and pid not in self.awaiting_exec:
            self._labels.discovered(pid)  # it only queues: its requests are labelled as soon as can be
        self._tracker.add_process(pid, parent, read_maps_now, hold_walks=True)
        if read_maps_now:
            self._know_runtime(pid)
            if self._on_new_process is not None:
                self._on_new_process(pid, comm)

    def _know_runtime(self, pid: int) -> None:
        """pid's maps are read, and its samples still carry their stacks: its
        runtime's sources are told of it (reading V8's layout from a binary
        the first time takes 0.1 s, a short process's whole life), then the
        kernel walks its stacks, recording what the runtime needs."""
        self._jit_sources.watch(pid)
        if self._labels is not None:
            self._labels.watch(pid)
        if self._on_runtime_known is not None:
            self._on_runtime_known(pid)
        self._tracker.release_walks(pid)

    def add_spawned(self, pid: int) -> None:
        """Until exec the child is a copy of jitprof: nothing of it to map."""
        self.awaiting_exec.add(pid)
        self.add(pid, read_maps_now=False)

    def still_running(self, root: int) -> list[int]:
        """The processes below root now, and followed ones that are still
        the processes followed (not a later one with a reused pid) though
        they left root's tree: for stopping them at the end. The process
        tree counts too, for a fork whose event was lost in a storm."""
        followed = {
            pid
            for pid in self.live
            if pid != root and self._start_times.get(pid) is not None and start_time(pid) == self._start_times[pid]
        }
        return sorted(followed | set(descendants(root)))

    def wants_samples_of(self, pid: int) -> bool:
        return pid not in self.awaiting_exec and pid not in self.ignored

    def forget(self, pid: int) -> None:
        """An exited process is retired: nothing of it is kept."""
        self._start_times.pop(pid, None)
        self._ranges_noted.pop(pid, None)
        self._postponed.pop(pid, None)
        self.ignored.discard(pid)
        if self._labels is not None:
            self._labels.forget(pid)

    def handle(self, event: ProcessEvent) -> None:
        if event.event_type is EventType.MAPS_CHANGED:
            provisional = self._pending_refresh.setdefault(event.pid, [])
            self._tracker.note_exec_range(event.pid, event.address, event.length)
            prefix = covering_prefix(event.pid, event.address, event.length)
            if prefix is not None:
                provisional.append(prefix)  # the kernel covered the range with it
        elif event.event_type is EventType.EXEC_MAPPED:
            if event.pid not in self.live:
                return
            self._pending_refresh.setdefault(event.pid, [])
            noted, last_ns = self._ranges_noted.get(event.pid, (0, 0))
            if noted < MAX_RANGES_NOTED or event.time_ns - last_ns >= RANGE_GAP_NS:
                self._ranges_noted[event.pid] = (noted + 1, event.time_ns)
                self._tracker.note_exec_range(event.pid, event.address, event.length)
        elif event.event_type is EventType.MAPPINGS_LOST:
            for pid in self.live:
                self._pending_refresh.setdefault(pid, [])
        elif event.event_type is EventType.FORK:
            tgid = thread_group_id(event.pid)
            if tgid is not None and tgid != event.pid:
                if event.pid not in self.live:
                    self._maps.unfollow(event.pid)  # a thread: its tgid is followed already
                return
            self.add(event.pid, parent=event.parent_pid, comm=event.comm)
        elif event.event_type is EventType.DISCOVERED:
            if event.pid in self.live:
                return
            if event.pid in self._exited_at and self._same_as_exited(event.pid):
                # --all: a thread of a process whose exit was read, sampled as
                # it ends. Learning the process anew would drop what was learnt
                # of it (its JIT code's names, read ahead of the symbolizer),
                # which its samples, maybe seconds behind, still need.
                self._maps.unfollow(event.pid)
                return
            if event.pid == os.getpid() or parent_of(event.pid) == os.getpid():
                self.ignored.add(event.pid)  # jitprof's own workers
                self._maps.ignore(event.pid)
                return
            self.add(event.pid, comm=event.comm)
            if not process_alive(event.pid):
                # Gone already (its exit read before, or coming next): what was
                # learnt of it serves its samples, but it is not followed on.
                self._gone(event.pid)
        elif event.event_type is EventType.EXEC:
            self.awaiting_exec.discard(event.pid)
            if self._jit_files is not None:  # first: whatever happens next, its files are removed at the end
                self._jit_files.note_process(event.pid)
            if self._tracker.process_exec(event.pid, event.time_ns, event.exec_count, hold_walks=True):
                self._tracker.release_walks(event.pid)  # its runtime was noted with its maps (at its fork)
            else:
                self._know_runtime(event.pid)
            if self._on_new_process is not None:
                self._on_new_process(event.pid, event.comm)
        elif event.event_type is EventType.EXIT and event.tid in self.live:
            # A process's main thread: the kernel tells no other thread's exit
            # (a thread taken for a process, as one whose creation the kernel
            # could not tell from a process's and that exited before its fork
            # event was read, is let go by the sweep).
            self._gone(event.tid)

    def _same_as_exited(self, pid: int) -> bool:
        """Is pid still the process whose exit was read (or nothing), not a new one?"""
        now = start_time(pid)
        return now is None or now == self._start_times.get(pid)

    def _gone(self, pid: int) -> None:
        self.live.discard(pid)
        self._maps.unfollow(pid)
        self._tracker.process_exit(pid)
        self._exited_at[pid] = time.monotonic()
        self._last_refresh.pop(pid, None)
        # Its maps will not be read again: the provisional blocks go now.
        self._maps.remove_prefixes(self._pending_refresh.pop(pid, []))

    def sweep(self) -> None:
        """Followed processes that are gone though no exit was read (an event
        lost in a storm, or, with --all, a process found again by a sample of
        one of its threads after its exit was read) are let go like an exit;
        and every SWEEP_KERNEL_S, entries the kernel added whose fork event
        never came (lost) are dropped: threads, and tasks that are gone."""
        for pid in [pid for pid in self.live if not process_alive(pid) and pid not in self.awaiting_exec]:
            self._gone(pid)
        now = time.monotonic()
        if now < self._next_kernel_sweep:
            return
        self._next_kernel_sweep = now + SWEEP_KERNEL_S
        for pid in self._maps.followed_pids():
            if pid in self.live or pid in self.ignored:
                continue
            tgid = thread_group_id(pid)
            if tgid is None or tgid != pid:  # gone, or a thread (a process's fork event may be on its way)
                self._maps.unfollow(pid)

    def exited_before(self, moment: float) -> list[int]:
        """Processes that exited before moment (time.monotonic()), each once."""
        due = [pid for pid, exited in self._exited_at.items() if exited < moment]
        for pid in due:
            del self._exited_at[pid]
        return due

    def refresh_due_in_ms(self, longest_ms: int) -> int:
        """How long the loop may wait before refresh_changed_maps has a
        process's maps to read (longest_ms when none waits)."""
        if not self._pending_refresh:
            return longest_ms
        due = min(self._refresh_due_at(pid) for pid in self._pending_refresh)
        return max(0, min(longest_ms, math.ceil((due - time.monotonic()) * 1000)))

    def _refresh_due_at(self, pid: int) -> float:
        return self._last_refresh.get(pid, 0.0) + MIN_REFRESH_INTERVAL_S

    def refresh_changed_maps(self) -> None:
        """Read the maps of processes whose mappings changed since the last
        call, each at most every MIN_REFRESH_INTERVAL_S: meanwhile its new
        executable memory stays covered, and the kernel sends no more events
        for it (a process mapping in a loop would otherwise keep the daemon
        reading its maps, and its events crowd samples out)."""
        now = time.monotonic()
        for pid in list(self._pending_refresh):
            if now < self._refresh_due_at(pid):
                continue
            if self._tracker.exec_unread(pid) and self._postponed.get(pid, 0) < MAX_POSTPONED:
                # A new image's own mappings, told before its exec's event: that
                # event reads its maps and tells its runtime (a read now would
                # take the exec for known, and its runtime would not be told).
                self._postponed[pid] = self._postponed.get(pid, 0) + 1
                self._last_refresh[pid] = now
                continue
            self._postponed.pop(pid, None)
            entries = self._tracker.refresh(pid, self._pending_refresh.pop(pid))
            self._ranges_noted.pop(pid, None)
            self._last_refresh[pid] = now
            if self._labels is not None:
                self._labels.watch(pid)  # a module loaded may publish a context
            if any(entry.is_jitdump_marker for entry in entries):
                self._jit_sources.maps_changed(pid, entries)
