"""Whether V8's context reader is loaded with the rest of the BPF program,
decided before it loads from what an earlier run found."""

import os
import sys

import pytest

from profiler.labels import context_reader_memo
from profiler.run.options import RecordingOptions
from profiler.run.program_loading import context_reader_wanted_at_start, remember_reader_needed


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("JITPROF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(context_reader_memo, "_told", {})
    return tmp_path / "cache"


def options(command: list[str], pids: list[int] | None = None, **given: object) -> RecordingOptions:
    return RecordingOptions(command=command, pids=pids or [], frequency_hz=99, duration_s=None, outputs=[], **given)


def test_a_command_not_seen_before_has_the_reader_at_start(cache_dir):
    assert context_reader_wanted_at_start(options([sys.executable, "-c", "0"]))


def test_a_command_found_without_context_frames_starts_without_it(cache_dir, tmp_path, monkeypatch):
    context_reader_memo.remember(os.stat(sys.executable), False)
    assert not context_reader_wanted_at_start(options([sys.executable, "-c", "0"]))
    # Found through PATH, as the spawn finds it.
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    assert not context_reader_wanted_at_start(options([os.path.basename(sys.executable), "-c", "0"]))


def test_an_attached_process_is_judged_by_its_executable(cache_dir):
    context_reader_memo.remember(os.stat(f"/proc/{os.getpid()}/exe"), False)
    assert not context_reader_wanted_at_start(options([], [os.getpid()]))
    context_reader_memo.remember(os.stat(f"/proc/{os.getpid()}/exe"), True)
    assert context_reader_wanted_at_start(options([], [os.getpid()]))


def test_any_process_that_may_need_it_loads_it(cache_dir):
    context_reader_memo.remember(os.stat(sys.executable), False)
    assert context_reader_wanted_at_start(options([], [os.getpid(), 1 << 30]))  # a process gone: not known


def test_the_whole_machine_loads_it_and_a_run_without_labels_never_does(cache_dir):
    context_reader_memo.remember(os.stat(sys.executable), False)
    assert context_reader_wanted_at_start(options([], all_processes=True))
    assert not context_reader_wanted_at_start(options([sys.executable], labels=False))
    assert not context_reader_wanted_at_start(options([], all_processes=True, labels=False))


def test_a_command_that_is_not_found_loads_it(cache_dir):
    assert context_reader_wanted_at_start(options(["no-such-command-anywhere"]))


def test_a_program_that_is_not_node_is_remembered_by_what_its_run_needed(cache_dir, monkeypatch):
    """A bun, a JVM or a native program is never judged by a watch of
    V8's: its run's end remembers that nothing in it needed the reader, so
    its next run starts without it; a wrapper whose node needed it keeps it."""
    monkeypatch.setattr(context_reader_memo, "_needed_in_run", False)
    run = options([sys.executable, "-c", "0"])
    remember_reader_needed(run)
    assert not context_reader_wanted_at_start(run)
    monkeypatch.setattr(context_reader_memo, "_told", {})
    context_reader_memo.remember(os.stat(f"/proc/{os.getpid()}/cwd"), True)  # a node of the run needed it
    remember_reader_needed(run)
    assert context_reader_wanted_at_start(run)


def test_a_node_is_remembered_by_its_own_v8_not_by_what_it_started(cache_dir, monkeypatch):
    monkeypatch.setattr(context_reader_memo, "_needed_in_run", False)
    run = options([sys.executable, "-c", "0"])
    context_reader_memo.remember(os.stat(sys.executable), False)  # its own V8 has no async context frames
    context_reader_memo.remember(os.stat(f"/proc/{os.getpid()}/cwd"), True)  # the node it started has
    remember_reader_needed(run)
    assert not context_reader_wanted_at_start(run)


def test_a_run_without_labels_or_of_the_whole_machine_remembers_nothing(cache_dir, monkeypatch):
    monkeypatch.setattr(context_reader_memo, "_needed_in_run", False)
    remember_reader_needed(options([sys.executable, "-c", "0"], labels=False))
    remember_reader_needed(options([], all_processes=True))
    assert context_reader_memo.recalled(os.stat(sys.executable)) is None
