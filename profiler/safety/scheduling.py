"""jitprof's own threads yield to the programs it profiles; the spawned
command keeps the scheduling the user started jitprof with.

A woken thread of the ordinary policy preempts the thread running on its
CPU: jitprof's threads wake at every batch of samples, every perf-map line
read, every reply of a process's memory, and each wake-up took the CPU from
a thread of the program (tsc under node: 600 involuntary switches alone,
900 profiled). SCHED_BATCH is the same fair share without that preemption:
jitprof runs when a CPU is free or the running thread's slice ends, a few
milliseconds later. Its share is not lowered (SCHED_IDLE or a high nice
would starve the naming of a busy program's samples, which must read the
program's memory while it lives, and behind Python's lock the thread
reading the kernel's buffers would starve with them).
"""

from __future__ import annotations

import os

# The policy and priority jitprof started with, restored in the spawned command.
_original: tuple[int, int] | None = None


def yield_to_programs() -> None:
    """Run this process's threads, and the threads and helpers started after
    it, as SCHED_BATCH, when they run under the ordinary policy (a user's
    real-time or idle choice is kept)."""
    global _original
    try:
        policy = os.sched_getscheduler(0)
        priority = os.sched_getparam(0).sched_priority
    except OSError:
        return
    if _original is None:
        _original = (policy, priority)
    if policy != os.SCHED_OTHER:
        return
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except OSError:  # a seccomp filter or a container's policy: run as started
        pass


def restore_for_command() -> None:
    """(In the forked child, before exec.) The policy the user started jitprof with."""
    if _original is None:
        return
    policy, priority = _original
    try:
        if os.sched_getscheduler(0) != policy:
            os.sched_setscheduler(0, policy, os.sched_param(priority))
    except OSError:
        pass
