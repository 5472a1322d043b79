"""--off-cpu: uprobes on the threadpool of each followed process whose
runtime has one (node's libuv), attached as its runtime is known and let go
with it. The kernel's programs there (bpf/threadpool.bpf.h, threadpool_*) tell
which work each pool thread runs and which stack queued it."""

from __future__ import annotations

import os
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
    def __init__(self, program: BpfProgram) -> None:
        self._program = program
        self._events: dict[int, list[int]] = {}  # pid -> perf event descriptors
        self._lock = threading.Lock()  # attached on the main thread, let go on the symbolizer's
        self.failures: dict[int, str] = {}  # pid -> why its threadpool is not followed

    def attach(self, pid: int) -> None:
        """pid's maps were read (it started, exec'd or was found): probe its threadpool."""
        self.detach(pid)
        pool = registry.threadpool_of(pid)
        if pool is None:
            return
        found = pool.probe_points(pid)
        if found is None:
            self.failures[pid] = "its threadpool's functions are not in its symbol table"
            return
        handle, points = found
        events: list[int] = []
        try:
            # The file as pid maps it, by descriptor: no path is looked up again.
            path = f"/proc/self/fd/{handle.fileno()}"
            for point in points:
                descriptor = self._program.attach_uprobe(PROGRAMS[point.role], path, point.file_offset, pid)
                if descriptor < 0:
                    self.failures[pid] = f"uprobe on {point.function}: {os.strerror(-descriptor)}"
                    continue
                events.append(descriptor)
        finally:
            handle.close()
        with self._lock:
            self._events[pid] = events

    def detach(self, pid: int) -> None:
        with self._lock:
            events = self._events.pop(pid, [])
        for descriptor in events:
            try:
                os.close(descriptor)
            except OSError:
                pass

    def close(self) -> None:
        with self._lock:
            pids = list(self._events)
        for pid in pids:
            self.detach(pid)
