"""Perf maps are hostile input: every refusal and every skipped line proven."""

import os

import pytest

from profiler.jit.perfmap import (
    MAX_FILE_BYTES,
    PerfMapEntry,
    PerfMapIndex,
    PerfMapRefused,
    open_perf_map,
    remove_perf_map,
)

ME = os.getuid()


def write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_reads_entries_and_tails_growth(tmp_path):
    path = write(tmp_path / "perf-1.map", b"1000 10 JS:*first /a.js:1:1\n")
    perf_map = open_perf_map(str(path), ME)
    assert perf_map.tail() == 1
    assert perf_map.index.lookup(0x1008).name == "JS:*first /a.js:1:1"
    with open(path, "ab") as handle:
        handle.write(b"2000 20 JS:*second /a.js:2:1\n3000 8 partial")
    assert perf_map.tail() == 1  # the partial line waits for its newline
    with open(path, "ab") as handle:
        handle.write(b" line\n")
    assert perf_map.tail() == 1
    assert perf_map.index.lookup(0x3004).name == "partial line"
    assert perf_map.index.lookup(0x2020) is None and perf_map.index.lookup(0xFFF) is None
    perf_map.close()


def test_reused_addresses_take_the_newest_code(tmp_path):
    path = write(tmp_path / "perf-1.map", b"1000 100 JS:*old /a.js:1:1\n1040 10 JS:*new /a.js:2:1\n")
    perf_map = open_perf_map(str(path), ME)
    perf_map.tail()
    assert perf_map.index.lookup(0x1044).name == "JS:*new /a.js:2:1"
    assert perf_map.index.lookup(0x1000) is None  # the old object is gone entirely
    perf_map.close()


def test_a_sample_named_late_is_named_by_the_lines_written_before_it(tmp_path):
    """Freed code space is reused (node's tsc writes about 100 of its 12,000
    entries over earlier ones): a sample named after its process exits, with
    the file as it stood when it was taken (a size), gets the code there
    then, not the code written over it since, in either order of entries."""
    first = b"1000 100 JS:*old /a.js:1:1\n2000 10 JS:*other /a.js:5:1\n"
    later = b"1040 10 JS:*new /a.js:2:1\n0f00 180 JS:*wide /a.js:3:1\n"
    path = write(tmp_path / "perf-1.map", first + later)
    perf_map = open_perf_map(str(path), ME)
    perf_map.tail()
    index = perf_map.index
    assert [entry.written_by for entry in (index.lookup(0x2004), index.lookup(0x1000))] == [len(first), len(first + later)]
    # Now: the newest code at each address; none where the old one was alone.
    assert (
        index.lookup(0x1044).name == "JS:*wide /a.js:3:1"
        and index.lookup(0x1044, len(first + later)).name == "JS:*wide /a.js:3:1"
    )
    # Before the later lines: the old code, at every address it had.
    assert index.lookup(0x1044, len(first)).name == "JS:*old /a.js:1:1"
    assert index.lookup(0x1004, len(first)).name == "JS:*old /a.js:1:1"
    assert index.lookup(0x2004, len(first)).name == "JS:*other /a.js:5:1"
    # Between the two later lines: the first of them where it lies, the old code around it.
    middle = len(first) + later.index(b"\n") + 1
    assert index.lookup(0x1044, middle).name == "JS:*new /a.js:2:1"
    assert index.lookup(0x1004, middle) is None  # replaced by "new" by then, and "new" does not reach it
    # Before any line: nothing, though code is there now.
    assert index.lookup(0x1044, 0) is None and index.lookup(0xF00, len(first)) is None
    perf_map.close()


def test_replaced_entries_kept_are_bounded(monkeypatch):
    from profiler.jit import perfmap

    monkeypatch.setattr(perfmap, "MAX_REPLACED_KEPT", 3)
    index = PerfMapIndex()
    for number in range(10):
        index.add(PerfMapEntry(0x100, 0x10, f"f{number}", number + 1, number + 1))
    assert len(index) == 1 and [entry.name for entry, _replaced_by in index.replaced] == ["f0", "f1", "f2"]
    assert index.lookup(0x100, 2).name == "f1" and index.lookup(0x100, 5) is None  # past what is kept: no name, not a later one


def test_index_replaces_overlaps():
    index = PerfMapIndex()
    index.add(PerfMapEntry(0x100, 0x10, "a", 1))
    index.add(PerfMapEntry(0x200, 0x10, "b", 2))
    index.add(PerfMapEntry(0x108, 0x100, "c", 3))  # overlaps a and b
    assert len(index) == 1 and index.lookup(0x200).name == "c" and index.lookup(0x100) is None


def test_symlink_is_refused(tmp_path):
    link = tmp_path / "perf-1.map"
    link.symlink_to("/etc/shadow")
    with pytest.raises(PerfMapRefused, match="symbolic link"):
        open_perf_map(str(link), ME)


def test_other_owner_is_refused(tmp_path):
    path = write(tmp_path / "perf-1.map", b"1000 10 x\n")
    with pytest.raises(PerfMapRefused, match="belongs to uid"):
        open_perf_map(str(path), ME + 1)


def test_huge_sparse_file_is_refused(tmp_path):
    path = tmp_path / "perf-1.map"
    with open(path, "wb") as handle:
        handle.truncate(10 << 30)  # 10 GiB, sparse
    with pytest.raises(PerfMapRefused, match="limit"):
        open_perf_map(str(path), ME)
    assert MAX_FILE_BYTES < 10 << 30


def test_not_a_regular_file_is_refused(tmp_path):
    fifo = tmp_path / "perf-1.map"
    os.mkfifo(fifo)
    with pytest.raises(PerfMapRefused, match="regular"):
        open_perf_map(str(fifo), ME)


def test_garbage_and_absurd_lines_are_skipped_one_by_one(tmp_path):
    data = (
        b"1000 10 good one\n"
        + os.urandom(3000).replace(b"\n", b"")[:2000]
        + b"\n"  # binary garbage
        + b"2000 7fffffff huge\n"  # 2 GiB function
        + b"ffffffffffffff00 1000 wraps around\n"
        + b"3000 0 empty\n"
        + b"zz 10 not hex\n"
        + b"4000 10 "
        + b"x" * 100000
        + b"\n"  # an over-long line
        + b"5000 10 good two\n"
    )
    path = write(tmp_path / "perf-1.map", data)
    perf_map = open_perf_map(str(path), ME)
    assert perf_map.tail() == 2
    assert perf_map.index.lookup(0x1000).name == "good one" and perf_map.index.lookup(0x5000).name == "good two"
    assert perf_map.skipped_lines == 6
    perf_map.close()


def test_missing_file_is_not_an_error(tmp_path):
    assert open_perf_map(str(tmp_path / "perf-1.map"), ME) is None


def test_remove_only_our_regular_files(tmp_path):
    ours = write(tmp_path / "perf-1.map", b"")
    assert remove_perf_map(str(ours), ME) and not ours.exists()
    target = write(tmp_path / "keep", b"x")
    link = tmp_path / "perf-2.map"
    link.symlink_to(target)
    assert not remove_perf_map(str(link), ME) and target.exists()
    other = write(tmp_path / "perf-3.map", b"")
    assert not remove_perf_map(str(other), ME + 1) and other.exists()


def test_remove_through_the_directory_after_reading(tmp_path):
    path = write(tmp_path / "perf-1.map", b"1000 10 x\n")
    perf_map = open_perf_map(str(path), ME)
    assert not perf_map.remove(ME + 1) and path.exists()  # not the owner we expect
    assert perf_map.remove(ME) and not path.exists()
    perf_map.close()


def test_index_in_descending_order_keeps_the_overlap_rules():
    """Entries written at descending addresses (a hostile map's way to make a
    sorted list quadratic): same answers as in ascending order."""
    from profiler.jit.perfmap import PerfMapEntry, PerfMapIndex

    index = PerfMapIndex()
    for number in range(20000):
        index.add(PerfMapEntry(0x100000 - number * 16, 16, f"f{number}", number))
    assert len(index) == 20000
    assert index.lookup(0x100000 - 5 * 16 + 3).name == "f5"
    index.add(PerfMapEntry(0x100000 - 10 * 16 + 8, 32, "over", 20001))  # overlaps f10, f9 (and reaches into f8)
    assert index.lookup(0x100000 - 10 * 16) is None  # f10 was dropped whole, and "over" starts 8 bytes in
    assert index.lookup(0x100000 - 9 * 16).name == "over" and index.lookup(0x100000 - 8 * 16 + 4).name == "over"
    assert index.lookup(0x100000 - 7 * 16).name == "f7"


def test_damaged_real_maps_are_read_line_by_line(tmp_path):
    """Node's real perf maps, truncated and with bytes flipped, fed as they
    grow in uneven pieces: no exception, every entry kept is well formed."""
    import random

    from tests.helpers import DATA

    generator = random.Random(5)
    original = (DATA / "perfmap-node20.txt").read_bytes()[:200_000]
    for round_number in range(40):
        data = bytearray(original[: generator.randrange(len(original))])
        for _ in range(generator.randint(1, 200)):
            data[generator.randrange(len(data))] = generator.randrange(256)
        path = tmp_path / f"perf-{round_number}.map"
        path.write_bytes(b"")
        perf_map = open_perf_map(str(path), os.geteuid())
        assert perf_map is not None
        try:
            position = 0
            while position < len(data):
                piece = bytes(data[position : position + generator.randint(1, 5000)])
                with open(path, "ab") as handle:
                    handle.write(piece)
                position += len(piece)
                perf_map.tail()
            for entry in perf_map.index._entries:
                assert 0 < entry.size <= 256 << 20 and entry.name
        finally:
            perf_map.close()


def test_a_map_stops_at_its_entry_limit_and_says_so(tmp_path, monkeypatch):
    from profiler.jit import perfmap

    monkeypatch.setattr(perfmap, "MAX_ENTRIES_PER_MAP", 1000)
    lines = b"".join(b"%x 10 f%d\n" % (0x1000 + 0x10 * number, number) for number in range(5000))
    perf_map = open_perf_map(str(write(tmp_path / "perf-1.map", lines)), ME)
    assert perf_map.tail() == 1000
    assert "1,000 entries" in perf_map.truncated
    assert perf_map.index.lookup(0x1000 + 0x10 * 999).name == "f999"
    assert perf_map.index.lookup(0x1000 + 0x10 * 1000) is None
    with open(tmp_path / "perf-1.map", "ab") as handle:
        handle.write(b"ffff0 10 later\n")
    assert perf_map.tail() == 0  # nothing more is read once it stopped
    perf_map.close()


def test_bad_lines_are_capped_too(tmp_path, monkeypatch):
    from profiler.jit import perfmap

    monkeypatch.setattr(perfmap, "MAX_LINES_PER_MAP", 100)
    perf_map = open_perf_map(str(write(tmp_path / "perf-1.map", b"not a line\n" * 1000 + b"1000 10 f\n")), ME)
    assert perf_map.tail() == 0
    assert perf_map.skipped_lines == 100 and "100 lines" in perf_map.truncated
    perf_map.close()


def test_every_map_of_a_run_shares_one_budget(tmp_path, monkeypatch):
    from profiler.jit import perfmap

    budget = perfmap.EntryBudget(1500)
    lines = b"".join(b"%x 10 f%d\n" % (0x1000 + 0x10 * number, number) for number in range(1000))
    first = open_perf_map(str(write(tmp_path / "perf-1.map", lines)), ME, budget)
    second = open_perf_map(str(write(tmp_path / "perf-2.map", lines)), ME, budget)
    assert first.tail() == 1000 and not first.truncated
    assert second.tail() == 500 and "all perf maps" in second.truncated
    first.close()  # its entries are given back
    assert budget.remaining == 1000
    third = open_perf_map(str(write(tmp_path / "perf-3.map", lines)), ME, budget)
    assert third.tail() == 1000
    second.close()
    third.close()
    assert budget.remaining == 1500


def test_one_tail_reads_a_bounded_slice_and_the_next_goes_on(tmp_path, monkeypatch):
    from profiler.jit import perfmap

    monkeypatch.setattr(perfmap, "MAX_LINES_PER_TAIL", 100)
    monkeypatch.setattr(perfmap, "READ_CHUNK", 64)
    lines = b"".join(b"%x 10 f%d\n" % (0x1000 + 0x10 * number, number) for number in range(1000))
    perf_map = open_perf_map(str(write(tmp_path / "perf-1.map", lines)), ME)
    first = perf_map.tail()
    assert 100 <= first < 120  # a chunk's lines past the slice are still taken
    assert perf_map.index.lookup(0x1000 + 0x10 * 999) is None
    assert perf_map.read_all() == 1000 - first
    assert perf_map.index.lookup(0x1000 + 0x10 * 999).name == "f999"
    perf_map.close()


def test_a_map_written_before_the_process_started_is_not_read(tmp_path):
    """The map of an earlier process with the same pid: absent, whoever owns it."""
    path = write(tmp_path / "perf-1.map", b"1000 10 earlier\n")
    os.utime(path, (1000.0, 1000.0))
    assert open_perf_map(str(path), ME + 1, not_before=2000.0) is None
    assert open_perf_map(str(path), ME, not_before=2000.0) is None
    perf_map = open_perf_map(str(path), ME, not_before=1001.0)  # within the start's second of error
    assert perf_map is not None and perf_map.tail() == 1
    perf_map.close()
