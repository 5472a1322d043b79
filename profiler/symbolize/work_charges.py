"""--off-cpu: a threadpool's work charged to the code that queued it.

The kernel sends the stack that submits each work item (with the item whose
completion submits it, if any), and marks the samples and waits of a pool
thread with the item it runs (bpf/threadpool.bpf.h, threadpool_*). Here a
submit under the program's own code starts a chain, named after what it
called ("[threadpool] fs.readFile"); a submit under the runtime's code alone
continues the chain of the item being completed (readFile's next read). A
pool thread's samples and waits in an item are then shown under the chain's
first stack and its name, from the work's own function down; the time the
item waited for a free thread is "(queued)" there, as time off the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from profiler.jit import registry
from profiler.kernel.events import RawSample, WalkEnd
from profiler.model.profile import Frame, FrameKind, Profile, Sample

QUEUED = Frame("(queued)", "", FrameKind.WAIT)
MAX_ITEMS = 100_000  # items remembered (their chains): the oldest tenth goes beyond


@dataclass(frozen=True)
class _Chain:
    """The first stack of a chain of work, its name frame last."""

    frame_ids: tuple[int, ...]
    comm: str  # the submitting thread's
    tid: int


class WorkCharges:
    """(Symbolizer thread.)"""

    def __init__(self, profile: Profile) -> None:
        self._profile = profile
        self._chains: dict[tuple[int, int], _Chain] = {}  # (pid, item key)
        self._queued_id = profile.intern(QUEUED)

    def submitted(self, raw: RawSample, named: Sample) -> None:
        pools = registry.threadpools()
        if not pools:
            return
        pool = pools[0]
        frames = self._profile.stack(named)
        parent = self._chains.get((raw.pid, raw.parent_work)) if raw.parent_work else None
        if parent is not None and not pool.starts_work(frames):
            chain = parent
        else:
            name = self._profile.intern(Frame(f"[threadpool] {pool.label(frames)}", "", FrameKind.WORK))
            chain = _Chain(self._profile.intern_stack((*named.frame_ids, name)), raw.comm, raw.tid)
        if len(self._chains) >= MAX_ITEMS:
            for key in list(self._chains)[: MAX_ITEMS // 10]:
                del self._chains[key]
        self._chains[(raw.pid, raw.work)] = chain

    def started(self, raw: RawSample) -> None:
        """An item started on a pool thread: the time it was queued."""
        chain = self._chains.get((raw.pid, raw.work))
        if chain is None:  # submitted before the run, or its submit was not seen
            return
        stack = self._profile.intern_stack((*chain.frame_ids, self._queued_id))
        self._profile.add(
            Sample(raw.time_ns, raw.pid, chain.tid, chain.comm, stack, WalkEnd.COMPLETE, raw.off_cpu_ns, raw.labels)
        )

    def charged(self, raw: RawSample, named: Sample) -> Sample:
        """A pool thread's sample or wait in an item, under the item's chain."""
        chain = self._chains.get((raw.pid, raw.work))
        if chain is None:
            return named
        pools = registry.threadpools()
        begins = pools[0].work_begins(self._profile.stack(named)) if pools else None
        if begins is None and named.walk_end.cut_short:
            begins = 0  # a stack cut short inside the item (OpenSSL's assembly has no frame to walk)
        if begins is None:
            return named  # between items: the pool thread's own loop
        stack = self._profile.intern_stack((*chain.frame_ids, *named.frame_ids[begins:]))
        return Sample(named.time_ns, named.pid, named.tid, chain.comm, stack, named.walk_end, named.off_cpu_ns, named.labels)
