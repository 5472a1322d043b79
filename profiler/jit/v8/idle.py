"""--off-cpu: the waits of a node process that are its threads waiting for
work, shown as "(idle)" and left out unless asked for (--idle).

libuv's event loop waits in uv__io_poll for I/O and timers; a thread of
libuv's threadpool waits in uv_cond_wait, called from its worker loop, for
the next job; node's platform workers (V8's background tasks: compiling,
marking) wait in uv_cond_wait called from PlatformWorkerThread (where
TaskQueue::BlockingPop is inlined), its delayed-task thread in a loop of its
own, and the inspector's I/O thread in uv_sem_wait until a debugger asks for
it. A wait in uv__io_poll under JavaScript is no event loop with nothing to
do: execSync and friends run a loop of their own under the JS that called
them, and that JS is blocked.
"""

from __future__ import annotations

from collections.abc import Sequence

from profiler.model.profile import Frame, FrameKind

EVENT_LOOP_POLL = "uv__io_poll"
# (a thread's loop, what it calls to wait for work): the wait is idle when the
# loop calls it directly, not from the work it runs.
LOOPS_WAITING = (
    ("worker", "uv_cond_wait"),  # libuv's threadpool (src/threadpool.c)
    ("node::(anonymous namespace)::PlatformWorkerThread(", "uv_cond_wait"),
    ("node::TaskQueue<", "uv_cond_wait"),  # BlockingPop, when not inlined
    ("node::inspector::(anonymous namespace)::StartIoThreadMain(", "uv_sem_wait"),
)


def waits_for_work(frames: Sequence[Frame]) -> bool:
    """Is this wait (root first, named) a node thread waiting for work?"""
    names = [frame.name for frame in frames]
    if EVENT_LOOP_POLL in names:
        return not any(frame.kind is FrameKind.JIT for frame in frames)
    for caller, callee in zip(names, names[1:]):
        for loop, wait in LOOPS_WAITING:
            if callee == wait and (caller == loop or caller.startswith(loop)):
                return True
    return False
