"""--off-cpu: what a wait the kernel reported becomes in the profile.

A wait long enough to be recorded one by one keeps its stack, named as a CPU
sample's is, with a last frame saying what the time was: "(off-CPU)", or
"(idle)" for a runtime's thread waiting for work (registry.waits_for_work),
which is left out unless --idle keeps it. Shorter waits are summed per
thread, and come as one frame, "(waits under 1 ms)", under the thread's
root: their time is in the profile, their stacks are not. A wait the kernel
could not tie to a stack (the thread ran user code before it returned from
the kernel: a page fault's read) is "(waited outside a system call)".
"""

from __future__ import annotations

from collections.abc import Callable

from profiler.kernel.events import RawSample, WalkEnd
from profiler.model.profile import Frame, FrameKind, Profile, Sample

OFF_CPU = Frame("(off-CPU)", "", FrameKind.WAIT)
IDLE = Frame("(idle)", "", FrameKind.WAIT)
MOVED = Frame("(waited outside a system call)", "", FrameKind.WAIT)
STILL_WAITING = Frame("(waiting when the run ended)", "", FrameKind.WAIT)
RUNNABLE = Frame("(runnable, waiting for a CPU)", "", FrameKind.WAIT)
MAX_CLASSIFIED = 100_000  # stacks whose idle verdict is remembered


def short_waits_frame(shortest_ns: int) -> Frame:
    return Frame(f"(waits under {duration_text(shortest_ns)})", "", FrameKind.WAIT)


def duration_text(nanoseconds: int) -> str:
    """1 ms, 250 µs, 2.5 s: the way a threshold is said."""
    for unit, scale in (("s", 1_000_000_000), ("ms", 1_000_000), ("µs", 1_000)):
        if nanoseconds >= scale:
            return f"{nanoseconds / scale:g} {unit}"
    return f"{nanoseconds} ns"


def is_wait_record(raw: RawSample) -> bool:
    """Does the record carry time off the CPU (a wait, short waits, time runnable)?"""
    return raw.off_cpu_ns != 0 or raw.short_wait_ns != 0 or raw.runnable_ns != 0 or raw.time_only or raw.preempted


def within_run(raw: RawSample, started_ns: int) -> bool:
    """Cut a wait record's time to what fell after started_ns, latest first
    (its time runnable after the wake-up, the wait, then its short waits):
    attached, a process's waits are timed from a little before sampling
    begins. False if none of it did. Items a pool thread starts keep their
    time queued (charged to the JavaScript that queued them, not the thread)."""
    if raw.work_started or raw.submits_work:
        return True
    budget = max(raw.time_ns - started_ns, 0)
    raw.runnable_ns = min(raw.runnable_ns, budget)
    budget -= raw.runnable_ns
    if raw.off_cpu_ns > budget:
        raw.off_cpu_ns = budget
        if budget == 0:
            raw.time_only = True  # no wait of its own left: its stack is not a CPU sample's
    budget -= raw.off_cpu_ns
    if raw.short_wait_ns > budget:
        raw.short_waits = raw.short_waits * budget // raw.short_wait_ns
        raw.short_wait_ns = budget
    return raw.off_cpu_ns != 0 or raw.runnable_ns != 0 or raw.short_wait_ns != 0


def needs_stack(raw: RawSample) -> bool:
    """Is there a stack to name (a CPU sample, or a wait whose stack is its own)?"""
    return not raw.time_only and not raw.stack_moved


class WaitRecorder:
    """(Symbolizer thread.) Adds the samples of wait records to the profile."""

    def __init__(self, profile: Profile, waits_for_work: Callable[[list[Frame]], bool]) -> None:
        self._profile = profile
        self._waits_for_work = waits_for_work
        self._idle_stacks: dict[tuple[int, ...], bool] = {}
        info = profile.info
        self._keep_idle = info.idle_kept
        self._off_cpu_id = profile.intern(OFF_CPU)
        self._idle_id = profile.intern(IDLE)
        self._moved_id = profile.intern(MOVED)
        self._short_id = profile.intern(short_waits_frame(info.shortest_wait_ns))
        self._runnable_id = profile.intern(RUNNABLE)

    def add(self, raw: RawSample, named: Sample | None) -> None:
        """The record's samples: its time runnable, its short waits, and its
        wait or CPU sample, with the stack named (None when needs_stack says
        there is none)."""
        totals = self._profile.waits
        if raw.runnable_ns:
            # Under the stack it was preempted in (walked as it came back, or
            # for a short stretch the next CPU sample's), or the wait's it
            # was woken from, if any.
            totals.runnable_ns += raw.runnable_ns
            if named is None:
                self._add(raw, (self._runnable_id,), raw.runnable_ns)
            else:
                self._add(raw, (*named.frame_ids, self._runnable_id), raw.runnable_ns, named.walk_end, named.comm)
        if raw.short_wait_ns:
            totals.short_ns += raw.short_wait_ns
            totals.short_waits += raw.short_waits
            self._add(raw, (self._short_id,), raw.short_wait_ns)
        if not raw.off_cpu_ns:
            if named is not None and not raw.preempted:
                self._profile.add(named)  # a CPU sample
            return
        if named is None:
            self._add(raw, (self._moved_id,), raw.off_cpu_ns)
            return
        if self._idle(named.frame_ids):
            totals.idle_ns += raw.off_cpu_ns
            totals.idle_waits += 1
            if not self._keep_idle:
                return
            self._add(raw, (*named.frame_ids, self._idle_id), raw.off_cpu_ns, named.walk_end, named.comm)
            return
        self._add(raw, (*named.frame_ids, self._off_cpu_id), raw.off_cpu_ns, named.walk_end, named.comm)

    def add_still_waiting(self, pid: int, tid: int, comm: str, time_ns: int, waited_ns: int) -> None:
        """A wait that had not ended when the run did: its time, without a stack."""
        self._profile.add(Sample(time_ns, pid, tid, comm, (self._profile.intern(STILL_WAITING),), WalkEnd.COMPLETE, waited_ns))

    def _idle(self, frame_ids: tuple[int, ...]) -> bool:
        verdict = self._idle_stacks.get(frame_ids)
        if verdict is None:
            if len(self._idle_stacks) >= MAX_CLASSIFIED:
                self._idle_stacks.clear()
            frames = self._profile.frames
            verdict = self._idle_stacks[frame_ids] = self._waits_for_work([frames[frame_id] for frame_id in frame_ids])
        return verdict

    def _add(
        self, raw: RawSample, frame_ids: tuple[int, ...], nanoseconds: int, walk_end: WalkEnd = WalkEnd.COMPLETE, comm: str = ""
    ) -> None:
        """comm: whose the stack is shown as (a pool thread's wait is its submitter's)."""
        stack = self._profile.intern_stack(frame_ids)
        self._profile.add(Sample(raw.time_ns, raw.pid, raw.tid, comm or raw.comm, stack, walk_end, nanoseconds, raw.labels))
