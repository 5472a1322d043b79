"""A new process's slow reads, made on a thread of their own: the loop is
told which processes are ready, the latest request per process only."""

from __future__ import annotations

import threading

from profiler.run.read_ahead import ReadAhead


def test_a_process_is_ready_once_its_reads_are_done_on_another_thread():
    read_ahead = ReadAhead()
    threads: list[str] = []
    release = threading.Event()

    def read() -> None:
        release.wait(10)
        threads.append(threading.current_thread().name)

    read_ahead.start(41, [read])
    assert read_ahead.waiting() and read_ahead.ready() == []  # the loop does not wait
    release.set()
    assert read_ahead.ready(10) == [41]
    assert threads == ["jitprof-read-ahead"] and not read_ahead.waiting()
    read_ahead.close()


def test_an_exec_supersedes_the_reads_for_the_image_before():
    read_ahead = ReadAhead()
    release = threading.Event()
    read_ahead.start(41, [lambda: release.wait(10)])
    read_ahead.start(41, [lambda: None])  # the process exec'd again meanwhile
    release.set()
    assert read_ahead.ready(10) == [41]
    assert read_ahead.ready(0.2) == []  # the first request's end counts for nothing
    read_ahead.close()


def test_a_gone_process_and_a_failing_read_stop_nothing():
    read_ahead = ReadAhead()
    release = threading.Event()

    def broken() -> None:
        raise OSError("gone")

    read_ahead.start(41, [lambda: release.wait(10)])
    read_ahead.cancel(41)
    read_ahead.start(42, [broken])
    release.set()
    assert read_ahead.ready(10) == [42]  # 41's reads end unseen
    assert not read_ahead.waiting()
    read_ahead.close()
