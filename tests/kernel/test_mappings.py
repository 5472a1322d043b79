"""The mapping tracker's files: a process that exits between its maps being
read and its files being opened must not cost every later process the same
file's symbols and unwind table."""

import os
import subprocess
import time

from profiler.kernel import file_images, mappings
from profiler.kernel.mappings import MappingTracker
from profiler.kernel.procmaps import read_maps
from tests.kernel.test_late_walks import TableStates, libc_text
from tests.symbolize.test_symbolize import RecordingTrie


def test_a_file_of_a_process_that_exited_is_opened_for_the_next(monkeypatch):
    child = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        entries = []
        while not any(entry.path.endswith("/libc.so.6") for entry in entries) and time.monotonic() < deadline:
            time.sleep(0.01)
            entries = read_maps(child.pid)  # read while it runs (once it runs sleep)
    finally:
        child.kill()
        child.wait()
    assert any(entry.path.endswith("/libc.so.6") for entry in entries)
    tables = TableStates()
    tracker = MappingTracker(RecordingTrie(), tables)
    try:
        # Its maps as read, its /proc/PID/map_files and root gone with it.
        monkeypatch.setattr(mappings, "read_maps", lambda pid: entries if pid == child.pid else read_maps(pid))
        tracker.add_process(child.pid)
        assert not any(path.endswith("/libc.so.6") for path in tables.acquired)  # (the vDSO is jitprof's own copy)
        assert tracker.stats.unreadable_files == {}  # passing, not the file's fault
        tracker.add_process(os.getpid())
        assert any(path.endswith("/libc.so.6") for path in tables.acquired), tables.acquired
    finally:
        tracker.close()


def test_a_file_that_is_no_elf_is_given_up_on_once(tmp_path, monkeypatch):
    """Opened and unusable: not opened again for every process that maps it."""
    bogus = tmp_path / "libbogus.so"
    bogus.write_bytes(b"\x7fELF" + b"\0" * 60)
    opened = []
    real_open = file_images.open_elf

    def counting_open(candidates, display_path, root=""):
        opened.append(display_path)
        return real_open([str(bogus)], display_path, root="")

    monkeypatch.setattr(file_images, "open_elf", counting_open)
    own = [entry for entry in read_maps(os.getpid()) if entry.executable and entry.path.endswith("/libc.so.6")]
    assert own
    tracker = MappingTracker(RecordingTrie(), TableStates())
    try:
        monkeypatch.setattr(mappings, "read_maps", lambda pid: own)
        tracker.add_process(1001)
        tracker.add_process(1002)
        assert opened == [own[0].path]
        assert list(tracker.stats.unreadable_files) == [own[0].path]
    finally:
        tracker.close()


def test_maps_read_after_the_exit_install_nothing():
    """An exit read before a refresh already under way (or asked for by an
    event that came after it): no trie entry or table is left that forgetting
    the process would not free."""
    trie = RecordingTrie()
    tables = TableStates()
    tracker = MappingTracker(trie, tables)
    try:
        pid = os.getpid()
        tracker.add_process(pid, read_maps_now=False)
        tracker.process_exit(pid)
        tracker.refresh(pid)
        assert trie.entries == {} and tables.acquired == []
        # What was read serves the late walks of its last samples.
        lookup = tracker.find(pid, time.monotonic_ns(), libc_text(pid))
        assert lookup.mapping is not None and lookup.mapping.entry.path.endswith("/libc.so.6")
    finally:
        tracker.close()
