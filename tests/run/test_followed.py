"""The followed set kept in step with process events (kernel and /proc faked
only where the event names a task that no longer exists)."""

from __future__ import annotations

import os
import subprocess
import threading
import time

from profiler.kernel.events import EventType, ProcessEvent
from profiler.kernel.procmaps import MapEntry
from profiler.run.followed import FollowedProcesses

GONE_TID = 4_194_000  # above any pid this machine hands out in a test run


class Recorder:
    """Stands for the BPF program, tracker and JIT sources: notes the calls."""

    def __init__(self, followed: list[int] | None = None) -> None:
        self.calls: list[tuple[str, int]] = []
        self.followed = followed or []

    def followed_pids(self) -> list[int]:
        return list(self.followed)

    def __getattr__(self, name: str):
        def record(*args, **_kwargs):
            if args and isinstance(args[0], int):
                self.calls.append((name, args[0]))
            return self.maps if name == "refresh" else None

        return record

    maps: list[MapEntry] = []  # what refresh read (the tracker's)


def event(kind: EventType, pid: int, tid: int, parent: int = 0) -> ProcessEvent:
    return ProcessEvent(kind, pid, tid, parent, 0, "test")


def test_a_thread_gone_before_its_fork_was_read_is_unfollowed_at_its_exit():
    program, tracker = Recorder(), Recorder()
    followed = FollowedProcesses(program, tracker, Recorder(), None)  # type: ignore[arg-type]
    followed.add(os.getpid())
    # The thread exited before /proc/TID/status could be read: taken for a process.
    followed.handle(event(EventType.FORK, GONE_TID, GONE_TID, parent=os.getpid()))
    assert GONE_TID in followed.live
    followed.handle(event(EventType.EXIT, os.getpid(), GONE_TID))  # the thread's exit: tgid, tid
    assert GONE_TID not in followed.live and os.getpid() in followed.live
    assert ("unfollow", GONE_TID) in program.calls and ("unfollow", os.getpid()) not in program.calls
    assert followed.exited_before(float("inf")) == [GONE_TID]


def test_a_live_thread_is_never_followed_as_a_process():
    program = Recorder()
    followed = FollowedProcesses(program, Recorder(), Recorder(), None)  # type: ignore[arg-type]
    followed.add(os.getpid())
    ready = threading.Event()
    thread = threading.Thread(target=ready.wait)
    thread.start()
    try:
        followed.handle(event(EventType.FORK, thread.native_id, thread.native_id, parent=os.getpid()))
        assert thread.native_id not in followed.live and ("unfollow", thread.native_id) in program.calls
    finally:
        ready.set()
        thread.join()


def test_a_process_found_again_after_its_exit_is_let_go():
    """--all: a sample of a thread still ending after its process's exit was
    read finds the process again; it is not followed (forever) again."""
    program = Recorder()
    followed = FollowedProcesses(program, Recorder(), Recorder(), None)  # type: ignore[arg-type]
    followed.handle(event(EventType.DISCOVERED, GONE_TID, GONE_TID))
    assert GONE_TID not in followed.live and ("unfollow", GONE_TID) in program.calls
    assert followed.exited_before(float("inf")) == [GONE_TID]  # its state goes with the others'
    followed.handle(event(EventType.EXIT, GONE_TID, GONE_TID))  # read after: nothing more to do
    assert followed.exited_before(float("inf")) == []


def test_a_process_found_again_as_it_exits_keeps_what_was_learnt_of_it():
    """--all: a thread still ending after its process's exit was read is
    sampled; the process is not learnt anew (that would drop the names read
    for its samples the symbolizer has not come to yet). A new process with
    the pid is."""
    # A grandchild: a child of the test's own process would be taken for one of jitprof's workers.
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    assert shell.stdout is not None
    pid = int(shell.stdout.readline())
    try:
        program, sources = Recorder(), Recorder()
        followed = FollowedProcesses(program, Recorder(), sources, None)  # type: ignore[arg-type]
        followed.add(pid)
        assert sources.calls.count(("watch", pid)) == 1
        followed.handle(event(EventType.EXIT, pid, pid))  # its main thread's exit
        followed.handle(event(EventType.DISCOVERED, pid, pid))  # another thread's sample
        assert sources.calls.count(("watch", pid)) == 1 and pid not in followed.live
        assert ("unfollow", pid) in program.calls
        followed._start_times[pid] = 1  # as if the pid had been handed to another process since
        followed.handle(event(EventType.DISCOVERED, pid, pid))
        assert sources.calls.count(("watch", pid)) == 2 and pid in followed.live
    finally:
        os.kill(pid, 9)
        shell.wait()


def test_a_followed_process_gone_without_an_exit_event_is_swept():
    program, tracker = Recorder(), Recorder()
    followed = FollowedProcesses(program, tracker, Recorder(), None)  # type: ignore[arg-type]
    followed.add(os.getpid())
    followed.live.add(GONE_TID)  # its exit event was lost
    followed.sweep()
    assert followed.live == {os.getpid()} and ("process_exit", GONE_TID) in tracker.calls
    assert followed.exited_before(float("inf")) == [GONE_TID]


def test_kernel_entries_whose_fork_event_was_lost_are_dropped():
    """The kernel follows a child at fork; its event may be lost in a storm.
    Threads and gone tasks among such entries go; a process whose event may
    still come stays."""
    ready = threading.Event()
    thread = threading.Thread(target=ready.wait)
    thread.start()
    child = subprocess.Popen(["sleep", "30"])
    try:
        program = Recorder(followed=[os.getpid(), thread.native_id, GONE_TID, child.pid])
        followed = FollowedProcesses(program, Recorder(), Recorder(), None)  # type: ignore[arg-type]
        followed.add(os.getpid())
        followed.sweep()
        unfollowed = {pid for name, pid in program.calls if name == "unfollow"}
        assert unfollowed == {thread.native_id, GONE_TID}
    finally:
        ready.set()
        thread.join()
        child.kill()
        child.wait()


def test_the_loop_waits_no_longer_than_the_next_maps_refresh():
    """New code is walked from stack copies until its maps are read: the
    loop wakes for that read, not only at its poll interval."""
    tracker = Recorder()
    followed = FollowedProcesses(Recorder(), tracker, Recorder(), None)  # type: ignore[arg-type]
    followed.add(os.getpid())
    assert followed.refresh_due_in_ms(250) == 250  # nothing waits
    change = ProcessEvent(EventType.MAPS_CHANGED, os.getpid(), os.getpid(), 0, 0, "test", 0x7F0000000000, 0x40000)
    followed.handle(change)
    assert followed.refresh_due_in_ms(250) == 0  # never read: at once
    followed.refresh_changed_maps()
    assert ("refresh", os.getpid()) in tracker.calls
    followed.handle(change)  # again, within the minimum interval
    assert 0 < followed.refresh_due_in_ms(250) <= 50
    followed.refresh_changed_maps()
    assert tracker.calls.count(("refresh", os.getpid())) == 1  # not before it is due
    time.sleep(0.06)
    assert followed.refresh_due_in_ms(250) == 0
    followed.refresh_changed_maps()
    assert tracker.calls.count(("refresh", os.getpid())) == 2
    assert followed.refresh_due_in_ms(250) == 250


def test_a_process_that_maps_its_jitdump_has_it_opened_at_once():
    """A short process may be gone before its samples are named: its dump is
    opened as soon as its maps show it, not at the symbolizer's next look."""
    tracker, sources = Recorder(), Recorder()
    tracker.maps = [MapEntry(0x1000, 0x2000, True, False, True, 0, "08:01", 7, "/tmp/jit-4242.dump")]
    followed = FollowedProcesses(Recorder(), tracker, sources, None)  # type: ignore[arg-type]
    followed.add(os.getpid())
    followed.handle(ProcessEvent(EventType.MAPS_CHANGED, os.getpid(), os.getpid(), 0, 0, "", 0x1000, 0x1000))
    followed.refresh_changed_maps()
    assert ("maps_changed", os.getpid()) in sources.calls
    tracker.maps = [MapEntry(0x1000, 0x2000, True, False, True, 0, "08:01", 7, "/usr/lib/libc.so.6")]
    sources.calls.clear()
    followed._last_refresh.clear()
    followed.handle(ProcessEvent(EventType.MAPS_CHANGED, os.getpid(), os.getpid(), 0, 0, "", 0x1000, 0x1000))
    followed.refresh_changed_maps()
    assert ("maps_changed", os.getpid()) not in sources.calls  # no dump: nothing to open


def test_a_mapping_record_of_a_followed_process_has_its_maps_read_and_others_are_left():
    """The kernel's mapping records tell every process's new code: a followed
    process's range is noted and its maps read; another's is not, nor is a
    range of the kernel's covering to remove (the records cover nothing)."""
    tracker = Recorder()
    followed = FollowedProcesses(Recorder(), tracker, Recorder(), None)  # type: ignore[arg-type]
    followed.add(os.getpid())
    tracker.calls.clear()
    other = os.getppid()
    followed.handle(ProcessEvent(EventType.EXEC_MAPPED, other, other, 0, 0, "", 0x7F0000000000, 0x4000))
    assert followed.refresh_due_in_ms(250) == 250 and tracker.calls == []
    followed.handle(ProcessEvent(EventType.EXEC_MAPPED, os.getpid(), os.getpid(), 0, 0, "", 0x7F0000000000, 0x4000))
    assert ("note_exec_range", os.getpid()) in tracker.calls
    assert followed.refresh_due_in_ms(250) == 0
    followed.refresh_changed_maps()
    assert ("refresh", os.getpid()) in tracker.calls
    assert followed._pending_refresh == {}


def test_lost_mapping_records_have_every_followed_process_read_again():
    tracker = Recorder()
    followed = FollowedProcesses(Recorder(), tracker, Recorder(), None)  # type: ignore[arg-type]
    followed.add(os.getpid())
    followed.add(os.getppid())
    followed.refresh_changed_maps()
    tracker.calls.clear()
    followed._last_refresh.clear()
    followed.handle(ProcessEvent(EventType.MAPPINGS_LOST, 0, 0, 0, 0, ""))
    followed.refresh_changed_maps()
    assert {pid for name, pid in tracker.calls if name == "refresh"} == {os.getpid(), os.getppid()}


def test_a_process_mapping_in_a_loop_has_a_trickle_of_its_ranges_noted():
    tracker = Recorder()
    followed = FollowedProcesses(Recorder(), tracker, Recorder(), None)  # type: ignore[arg-type]
    followed.add(os.getpid())
    tracker.calls.clear()
    for index in range(200):  # within one millisecond
        followed.handle(
            ProcessEvent(EventType.EXEC_MAPPED, os.getpid(), os.getpid(), 0, 1_000_000 + index, "", 0x1000 * index, 0x1000)
        )
    assert tracker.calls.count(("note_exec_range", os.getpid())) == 64
    followed.handle(ProcessEvent(EventType.EXEC_MAPPED, os.getpid(), os.getpid(), 0, 3_000_000, "", 0x900000, 0x1000))
    assert tracker.calls.count(("note_exec_range", os.getpid())) == 65  # a millisecond later: one more
    followed.refresh_changed_maps()  # the maps tell the rest; then the count starts again
    followed.handle(ProcessEvent(EventType.EXEC_MAPPED, os.getpid(), os.getpid(), 0, 3_000_001, "", 0x1000, 0x1000))
    assert tracker.calls.count(("note_exec_range", os.getpid())) == 66


def test_a_new_images_own_mappings_wait_for_its_exec_to_be_read():
    """Mapping records of an exec (the new image's segments) can come before
    the exec's event: the maps are read by that event's handling, which tells
    the process's runtime, not by a refresh that would take the exec for known."""
    tracker = Recorder()
    unread = [True]
    tracker.exec_unread = lambda pid: unread[0]  # type: ignore[method-assign]
    followed = FollowedProcesses(Recorder(), tracker, Recorder(), None)  # type: ignore[arg-type]
    followed.add(os.getpid())
    tracker.calls.clear()
    followed.handle(ProcessEvent(EventType.EXEC_MAPPED, os.getpid(), os.getpid(), 0, 0, "", 0x400000, 0x1000))
    followed.refresh_changed_maps()
    assert ("refresh", os.getpid()) not in tracker.calls
    assert 0 < followed.refresh_due_in_ms(250) <= 50  # tried again soon
    unread[0] = False  # the exec's event was read
    followed._last_refresh.clear()
    followed.refresh_changed_maps()
    assert ("refresh", os.getpid()) in tracker.calls


def test_an_exec_whose_event_never_comes_does_not_hold_the_maps_back_for_ever():
    tracker = Recorder()
    tracker.exec_unread = lambda pid: True  # type: ignore[method-assign]
    followed = FollowedProcesses(Recorder(), tracker, Recorder(), None)  # type: ignore[arg-type]
    followed.add(os.getpid())
    tracker.calls.clear()
    followed.handle(ProcessEvent(EventType.EXEC_MAPPED, os.getpid(), os.getpid(), 0, 0, "", 0x400000, 0x1000))
    for _ in range(30):
        followed._last_refresh.clear()
        followed.refresh_changed_maps()
    assert tracker.calls.count(("refresh", os.getpid())) == 1
