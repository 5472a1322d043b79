"""--off-cpu: uprobes on the threadpool of each followed process whose
runtime has one (node's libuv), attached as its runtime is known and let go
with it. The kernel's programs there (bpf/threadpool.bpf.h, threadpool_*) tell
which work each pool thread runs and which stack queued it."""

from __future__ import annotations

import os
import queue
import threading

from profiler.jit import registry
from profiler.kernel.bpf_program import BpfProgram

# What runs at each kind of probe point (at the function's entry: a uretprobe
# would put its trampoline in the stack, where every walk inside would end).
PROGRAMS = {
    "submit": "threadpool_submit",
    "queue_work": "threadpool_queue_work",
    "work": "threadpool_work_begins",
    "done": "threadpool_done_begins",
}


class ThreadpoolProbes:
    """Attached and let go on a thread of their own: each uprobe's
    registration and release waits for RCU grace periods in the kernel,
    about 80 ms, one after another (node's twelve held the sampling loop for
    a second)."""

    def __init__(self, program: BpfProgram) -> None:
        self._program = program
        self._events: dict[int, list[int]] = {}  # pid -> perf event descriptors
        self._lock = threading.Lock()  # attached on their thread, let go from the symbolizer's or the main one
        self._closing = False
        # What the thread does next: a pid to attach, descriptors to close; None: stop.
        self._queue: queue.SimpleQueue[int | list[int] | None] = queue.SimpleQueue()
        self._pending = 0  # pids queued or being attached
        self._thread = threading.Thread(target=self._work, name="jitprof-threadpool-probes", daemon=True)
        self._thread.start()
        self.failures: dict[int, str] = {}  # pid -> why its threadpool is not followed

    def attach(self, pid: int) -> None:
        """pid's maps were read (it started, exec'd or was found): probe its threadpool (soon)."""
        self.detach(pid)
        with self._lock:
            self._pending += 1
        self._queue.put(pid)

    @property
    def attaching(self) -> bool:
        """Are probes of a process known to run node still being attached?"""
        with self._lock:
            return self._pending > 0

    def detach(self, pid: int) -> None:
        with self._lock:
            events = self._events.pop(pid, [])
        if events:
            self._queue.put(events)

    def close(self) -> None:
        """Stop; what is attached is let go with the program (BpfProgram.close,
        in the background), and an attach under way stops at its next probe."""
        with self._lock:
            self._closing = True
            events = [descriptor for descriptors in self._events.values() for descriptor in descriptors]
            self._events.clear()
        self._queue.put(None)
        self._program.release_later(events)
        self._thread.join()  # at most the probe under way: the rest see _closing

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            if isinstance(item, list):
                self._program.close_perf_events(item)
            else:
                try:
                    self._attach_now(item)
                finally:
                    with self._lock:
                        self._pending -= 1
        # Stopped: descriptors still queued go with the program.
        while not self._queue.empty():
            item = self._queue.get()
            if isinstance(item, list):
                self._program.release_later(item)

    def _attach_now(self, pid: int) -> None:
        if self._closing:
            return
        pool = registry.threadpool_of(pid)
        if pool is None:
            return
        found = pool.probe_points(pid)
        if found is None:
            self.failures[pid] = "its threadpool's functions are not in its symbol table"
            return
        handle, points = found
        try:
            # The file as pid maps it, by descriptor: no path is looked up again.
            path = f"/proc/self/fd/{handle.fileno()}"
            for point in points:
                if self._closing:
                    return
                descriptor = self._program.attach_uprobe(PROGRAMS[point.role], path, point.file_offset, pid)
                if descriptor < 0:
                    self.failures[pid] = f"uprobe on {point.function}: {os.strerror(-descriptor)}"
                    continue
                with self._lock:
                    if not self._closing:
                        self._events.setdefault(pid, []).append(descriptor)
                        continue
                self._program.release_later([descriptor])
                return
        finally:
            handle.close()
