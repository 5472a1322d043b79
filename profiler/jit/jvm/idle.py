"""--off-cpu: the waits of a JVM that are its threads waiting for work,
shown as "(idle)" and left out unless asked for (--idle): a pool's worker
waiting for a task, and HotSpot's own threads (compiler, GC, VM thread,
watcher, service) waiting for theirs. A thread parked anywhere else (a
monitor, a lock, a queue the application reads) is waiting on the program,
and shown as such."""

from __future__ import annotations

from collections.abc import Sequence

from profiler.model.profile import Frame

# Java methods (as jitprof names them, package.Class.method(arguments)) that wait for the next task.
POOL_WAITS = (
    "java.util.concurrent.ThreadPoolExecutor.getTask(",
    "java.util.concurrent.ForkJoinPool.awaitWork(",
    "java.util.concurrent.ScheduledThreadPoolExecutor$DelayedWorkQueue.take(",
    "java.lang.ref.Reference.waitForReferencePendingList(",
    "java.lang.ref.Finalizer$FinalizerThread.run(",
    "jdk.internal.misc.InnocuousThread.run(",
    "jdk.internal.ref.CleanerImpl.run(",
)
# HotSpot's functions where its own threads wait for work.
VM_WAITS = (
    "CompileQueue::get",
    "WatcherThread::sleep",
    "VMThread::wait_for_operation",
    "G1ServiceThread::wait_for_task",
    "G1ConcurrentRefineThread::wait_for_completed_buffers",
    "G1PrimaryConcurrentRefineThread::wait_for_completed_buffers",
    "G1ConcurrentMarkThread::wait_for_next_cycle",
    "WorkerTaskDispatcher::worker_run_task",
    "ServiceThread::service_thread_entry",
    "MonitorDeflationThread::monitor_deflation_thread_entry",
    "AttachListener::dequeue",
    "os::signal_wait",
    "ConcurrentGCThread::run",
)


def waits_for_work(frames: Sequence[Frame]) -> bool:
    """Is this wait (root first, named) a JVM thread waiting for work?"""
    for frame in frames:
        name = frame.name
        if name.startswith(POOL_WAITS) or any(wait in name for wait in VM_WAITS):
            return True
    return False
