"""The mapping tracker's files: a process that exits between its maps being
read and its files being opened must not cost every later process the same
file's symbols and unwind table."""

import dataclasses
import os
import random
import subprocess
import time

from profiler.kernel import file_images, mappings
from profiler.kernel.address_spaces import AddressSpace, KnownMapping
from profiler.kernel.mappings import MappingTracker
from profiler.kernel.procmaps import MapEntry, read_maps
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
        monkeypatch.setattr(
            mappings, "read_maps", lambda pid, executable_only=False: entries if pid == child.pid else read_maps(pid)
        )
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
        monkeypatch.setattr(mappings, "read_maps", lambda pid, executable_only=False: own)
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


def _process_gone_after_exec(monkeypatch, pid):
    """pid's maps read once (the image after an exec), then nothing: it exited."""
    entries = read_maps(pid)
    reads = iter([entries])
    monkeypatch.setattr(
        mappings, "read_maps", lambda asked, executable_only=False: next(reads, []) if asked == pid else read_maps(asked)
    )


def test_maps_read_after_an_exec_whose_event_is_late_are_that_exec_s(monkeypatch):
    """A fork event read after the child exec'd (and the runtime's sources
    slow to learn of it): the maps read then are the new image's. The exec's
    event, read after the process is gone, must not leave that image with
    nothing: its samples resolve to what was read."""
    trie = RecordingTrie()
    tracker = MappingTracker(trie, TableStates())
    try:
        pid = os.getpid()
        _process_gone_after_exec(monkeypatch, pid)
        trie.exec_counts[pid] = 1  # exec'd once since followed (at its fork)
        tracker.add_process(pid, hold_walks=True)
        assert trie.maps_read == {}  # held: its samples still carry their stacks
        tracker.release_walks(pid)
        assert trie.maps_read == {pid: 1}
        exec_ns = time.monotonic_ns() - 50_000_000  # the exec was before the read
        assert tracker.process_exec(pid, exec_ns, 1)  # known already: no second look at its runtime
        lookup = tracker.find(pid, exec_ns + 1, libc_text(pid))
        assert lookup.mapping is not None and lookup.mapping.entry.path.endswith("/libc.so.6")
        # Before the exec, the image forked from (here: nothing known).
        assert tracker.find(pid, exec_ns - 1, libc_text(pid)).mapping is None
    finally:
        tracker.close()


def test_an_exec_read_in_order_starts_a_new_space(monkeypatch):
    trie = RecordingTrie()
    tracker = MappingTracker(trie, TableStates())
    try:
        pid = os.getpid()
        tracker.add_process(pid)
        assert trie.maps_read == {pid: 0} and trie.entries
        trie.exec_counts[pid] = 1
        _process_gone_after_exec(monkeypatch, pid)
        exec_ns = time.monotonic_ns()
        assert not tracker.process_exec(pid, exec_ns, 1, hold_walks=True)
        assert trie.maps_read == {pid: 0} and trie.entries  # the new image's entries, walks held
        tracker.release_walks(pid)
        assert trie.maps_read == {pid: 1}
        assert tracker.find(pid, exec_ns + 1, libc_text(pid)).mapping is not None
        # The old image's mappings serve its own samples.
        assert tracker.find(pid, exec_ns - 1, libc_text(pid)).mapping is not None
        assert (
            tracker.find(pid, exec_ns - 1, libc_text(pid)).generation != tracker.find(pid, exec_ns + 1, libc_text(pid)).generation
        )
    finally:
        tracker.close()


def test_an_exec_between_two_read_late_is_its_own_space(monkeypatch):
    """Two execs before either event is read, the maps read after both: the
    first exec's samples are not given the second image's mappings."""
    trie = RecordingTrie()
    tracker = MappingTracker(trie, TableStates())
    try:
        pid = os.getpid()
        _process_gone_after_exec(monkeypatch, pid)
        trie.exec_counts[pid] = 2
        tracker.add_process(pid)
        first_ns = time.monotonic_ns() - 80_000_000
        second_ns = first_ns + 10_000_000
        assert not tracker.process_exec(pid, first_ns, 1)
        assert tracker.process_exec(pid, second_ns, 2)
        assert tracker.find(pid, first_ns + 1, libc_text(pid)).mapping is None
        assert tracker.find(pid, second_ns + 1, libc_text(pid)).mapping is not None
    finally:
        tracker.close()


def test_held_walks_of_a_process_that_exits_are_never_released():
    trie = RecordingTrie()
    tracker = MappingTracker(trie, TableStates())
    try:
        pid = os.getpid()
        tracker.add_process(pid, hold_walks=True)
        tracker.process_exit(pid)
        tracker.release_walks(pid)
        assert trie.maps_read == {}
    finally:
        tracker.close()


def test_a_rescan_reads_only_the_processes_asked_for(monkeypatch):
    """Processes not sampled since the last rescan did not run: their maps
    are not read again until the full rescan."""
    own = read_maps(os.getpid())
    read = []
    monkeypatch.setattr(mappings, "read_maps", lambda pid, executable_only=False: read.append(pid) or own)
    tracker = MappingTracker(RecordingTrie(), TableStates())
    try:
        for pid in (1001, 1002, 1003):
            tracker.add_process(pid)
        read.clear()
        tracker.refresh_all({1002, 4242})
        assert read == [1002]
        tracker.refresh_all()
        assert sorted(read[1:]) == [1001, 1002, 1003]
    finally:
        tracker.close()


def test_a_file_opened_where_another_was_starts_a_new_era_of_names(monkeypatch):
    """A library closed and another opened at its address (dlclose, then
    dlopen): the symbolizer's names for that address, kept by era, must not
    outlive the first. The same maps read again, or JIT memory coming and
    going, keep the era (and the names)."""
    own = [entry for entry in read_maps(os.getpid()) if entry.executable]
    libc = next(entry for entry in own if entry.path.endswith("/libc.so.6"))
    other = next(entry for entry in own if entry.is_file_backed and entry.inode != libc.inode)
    in_its_place = dataclasses.replace(libc, path=other.path, inode=other.inode, device=other.device)
    jit = dataclasses.replace(libc, start=1 << 40, end=(1 << 40) + 4096, offset=0, device="00:00", inode=0, path="")
    shown = {"maps": own}
    monkeypatch.setattr(mappings, "read_maps", lambda pid, executable_only=False: shown["maps"])
    tracker = MappingTracker(RecordingTrie(), TableStates())
    try:
        pid = 1001
        tracker.add_process(pid)
        first, _revision = tracker.space_state(pid, time.monotonic_ns())
        shown["maps"] = [*own, jit]
        tracker.refresh(pid)
        shown["maps"] = own
        tracker.refresh(pid)
        assert tracker.space_state(pid, time.monotonic_ns())[0] == first
        shown["maps"] = [in_its_place if entry is libc else entry for entry in own]
        tracker.refresh(pid)
        era, _revision = tracker.space_state(pid, time.monotonic_ns())
        assert era != first and era[0] == first[0]  # the same exec
        assert tracker.find(pid, time.monotonic_ns(), libc.start).mapping.entry.path == other.path
    finally:
        tracker.close()


def test_an_address_is_found_in_the_current_mappings_as_a_scan_finds_it():
    """find() looks the current mappings up by bisection, made again when they
    change: it answers as a scan of them does, before and after mappings come
    and go, and a retired mapping answers only where no current one does."""

    def mapping(start: int, end: int) -> KnownMapping:
        return KnownMapping(MapEntry(start, end, True, False, True, 0, "00:00", 0, ""), [], None)

    def scanned(space: AddressSpace, address: int) -> KnownMapping | None:
        current = [known for known in space.current.values() if known.entry.contains(address)]
        retired = [known for known in reversed(space.retired) if known.entry.contains(address)]
        return (current or retired or [None])[0]

    chooser = random.Random(3)
    space = AddressSpace(1, 0, 0)
    space.retired.append(mapping(0x1000, 0x900000))
    for page in chooser.sample(range(16, 2000), 300):
        known = mapping(page << 12, (page << 12) + chooser.choice([1, 2]) * 0x800)
        space.current[(known.entry.start, known.entry.end)] = known
    space.revision += 1
    for _round in range(3):
        for address in [chooser.randrange(0, 0x900000) for _ in range(2000)]:
            assert space.find(address) is scanned(space, address), hex(address)
        for key in chooser.sample(list(space.current), 40):
            del space.current[key]
        for page in chooser.sample(range(2000, 2200), 20):
            known = mapping(page << 12, (page << 12) + 0x1000)
            space.current[(known.entry.start, known.entry.end)] = known
        space.revision += 1
