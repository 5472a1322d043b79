"""Walks finished in user space: when a deferred sample is ready, what it
waits for, and what it becomes when the run cannot wait. The address space
is this test process's own (its real maps), with JIT memory noted as the
kernel reports it and a table store whose state the test sets."""

import os
import struct
import time

import pytest

from profiler.kernel.address_spaces import MAPPING_ELF_PENDING
from profiler.kernel.events import RawSample, StackCopy, WalkEnd
from profiler.kernel.late_walks import LateWalks
from profiler.kernel.mappings import MappingTracker
from profiler.native.unwind_tables import RowsState, TableRows
from tests.symbolize.test_symbolize import RecordingTrie

JIT = 0x10000000  # far from anything this process maps
STACK = 0x7FFE0000


class TableStates:
    """The store's answers, as the test sets them."""

    def __init__(self):
        self.state = RowsState.PENDING
        self.acquired = []

    def acquire(self, image):
        self.acquired.append(image.path)
        return len(self.acquired)

    def release(self, table_id):
        pass

    def rows_for_walk(self, cache_key):
        return TableRows(self.state)

    def building(self, cache_keys=None):
        self.asked_for = cache_keys
        return self.state is RowsState.PENDING and cache_keys != set()


def libc_text(pid):
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and "x" in fields[1] and fields[5].endswith("/libc.so.6"):
                return int(fields[0].split("-")[0], 16)
    pytest.skip("libc is not mapped")


@pytest.fixture
def space():
    tables = TableStates()
    trie = RecordingTrie()
    tracker = MappingTracker(trie, tables)
    pid = os.getpid()
    tracker.add_process(pid, read_maps_now=False)
    yield tracker, tables, trie, pid
    tracker.close()


def deferred(pid, words, start_pc=JIT + 0x100, time_ns=None):
    """A sample the kernel deferred at its leaf: JIT code with a frame-pointer chain."""
    data = bytearray(0x100)
    for offset, value in words.items():
        struct.pack_into("<Q", data, offset, value)
    return RawSample(
        pid=pid,
        tid=pid,
        cpu=0,
        time_ns=time_ns if time_ns is not None else time.monotonic_ns(),
        comm="test",
        addresses=(),
        walk_end=WalkEnd.DEFERRED,
        kernel_stack_id=-1,
        user_mode=True,
        stack_copy=StackCopy(start_pc, STACK, STACK + 0x20, True, False, bytes(data)),
    )


def test_a_walk_waits_for_the_maps_then_finishes(space):
    tracker, _tables, trie, pid = space
    late = LateWalks(tracker, None)
    sample = deferred(pid, {0x20: STACK + 0x40, 0x28: JIT + 0x200, 0x40: 0, 0x48: 0})
    assert late.finish(sample, final=False) is None  # nothing read of the process yet
    tracker.note_exec_range(pid, JIT, 0x10000)  # the kernel saw it made executable
    tracker.refresh(pid)
    assert trie.maps_read == {pid: 0}  # the kernel's walks trust the trie from now on
    finished = late.finish(sample, final=False)
    assert finished is not None and finished.stack_copy is None
    assert finished.addresses == (JIT + 0x100, JIT + 0x200) and finished.walk_end is WalkEnd.COMPLETE
    assert late.stats.finished == 1 and late.stats.ends[WalkEnd.COMPLETE] == 1


def test_a_table_being_built_is_waited_for_unless_the_run_ends(space):
    tracker, tables, trie, pid = space
    late = LateWalks(tracker, tables)
    tracker.note_exec_range(pid, JIT, 0x10000)
    tracker.refresh(pid)
    # Files wait for their tables in the kernel (pending), JIT memory does not.
    assert MAPPING_ELF_PENDING not in {kind for kind, _bias in trie.entries.values()}  # attached at once here
    assert any(path.endswith("libc.so.6") for path in tables.acquired)
    libc = libc_text(pid)
    sample = deferred(pid, {0x20: STACK + 0x40, 0x28: libc + 0x101, 0x40: 0, 0x48: 0})
    # The end of a run waits only for the tables walks waited for: none yet.
    assert not late.tables_building()
    assert late.finish(sample, final=False) is None  # libc's table is pending
    assert late.tables_building() and len(tables.asked_for) == 1  # libc's
    final = late.finish(sample, final=True)
    assert final is not None and final.addresses == (JIT + 0x100, libc + 0x101)  # frame pointers after all
    tables.state = RowsState.NONE  # built without rows: frame-pointer steps, no wait
    assert late.finish(sample, final=False).walk_end is WalkEnd.COMPLETE


def test_a_copy_with_a_page_not_in_memory_is_walked_above_it(space):
    """The leaf's frame is 8 KiB of a buffer it never touched: its page and
    the next are holes in a copy read page by page, its saved frame pointer
    and return address are above them. A walk that must read in a hole ends
    there as a read fault (the bytes were not in memory), not a short copy."""
    tracker, _tables, _trie, pid = space
    tracker.note_exec_range(pid, JIT, 0x10000)
    tracker.refresh(pid)
    late = LateWalks(tracker, None)
    page = 0x7FF0_0000
    data = bytearray(4 * 4096)
    leaf_fp = page + 2 * 4096 + 0x10  # above the two holes
    struct.pack_into("<QQ", data, leaf_fp - page, leaf_fp + 0x40, JIT + 0x200)
    struct.pack_into("<QQ", data, leaf_fp + 0x40 - page, 0, 0)

    def sample(fp, holes):
        copy = StackCopy(JIT + 0x100, page + 0x80, fp, True, True, bytes(data), paged=True, holes=holes)
        return RawSample(pid, pid, 0, time.monotonic_ns(), "test", (), WalkEnd.DEFERRED, -1, True, stack_copy=copy)

    finished = late.finish(sample(leaf_fp, 0b11), final=False)
    assert finished.addresses == (JIT + 0x100, JIT + 0x200) and finished.walk_end is WalkEnd.COMPLETE
    in_hole = late.finish(sample(page + 4096 + 0x10, 0b11), final=False)
    assert in_hole.addresses == (JIT + 0x100,) and in_hole.walk_end is WalkEnd.READ_FAULT
    # The same bytes without the holes: the zeros read as the stack's end.
    assert late.finish(sample(page + 4096 + 0x10, 0), final=False).walk_end is WalkEnd.COMPLETE


def test_an_address_unknown_to_maps_read_before_the_sample_waits_for_newer_ones(space):
    tracker, _tables, _trie, pid = space
    late = LateWalks(tracker, None)
    tracker.refresh(pid)
    sample = deferred(pid, {}, start_pc=JIT + 0x100, time_ns=time.monotonic_ns() + 10**9)
    assert late.finish(sample, final=False) is None  # mapped after the maps were read, perhaps
    assert late.finish(sample, final=True).walk_end is WalkEnd.NO_MAPPING
    tracker.process_exit(pid)  # nothing more will be learnt
    assert late.finish(sample, final=False).walk_end is WalkEnd.NO_MAPPING
