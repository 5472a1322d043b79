"""The kernel-side table store, with an anonymous mapping standing in for the
BPF array's memory and a dict for the table map."""

import mmap
import time

from profiler.native import cache, elf, library, unwind_rows
from profiler.native.unwind_tables import KEPT_IDLE_S, TABLE_PENDING, RowsState, UnwindTableStore

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def make_store(capacity_rows):
    memory = mmap.mmap(-1, capacity_rows * unwind_rows.ROW_SIZE)
    published = {}

    def write_rows(first_row, packed):
        start = first_row * unwind_rows.ROW_SIZE
        memory[start : start + len(packed)] = packed

    store = UnwindTableStore(
        write_rows, capacity_rows, 16, lambda table_id, first, count: published.__setitem__(table_id, (first, count))
    )
    return store, memory, published


def test_tables_are_written_shared_and_freed(chain_binary):
    store, memory, published = make_store(100000)
    store.start()
    chain = elf.open_elf([str(chain_binary)], str(chain_binary))
    again = elf.open_elf([str(chain_binary)], str(chain_binary))
    try:
        first_id = store.acquire(chain)
        assert store.acquire(again) == first_id  # one table per file, shared
        assert wait_for(lambda: published.get(first_id, (0, 0))[1] > 0)
        first, count = published[first_id]
        with open(chain_binary, "rb") as handle:
            expected = library.compile_unwind_rows(handle.fileno()).packed
        assert memory[first * unwind_rows.ROW_SIZE : (first + count) * unwind_rows.ROW_SIZE] == expected
        assert store.stats.tables_live == 1 and store.stats.rows_used == count
        store.release(first_id)
        assert published[first_id][1] > 0  # still referenced once
        store.release(first_id)
        assert published[first_id] == (0, 0) and store.stats.rows_used == 0
        # The freed rows are reused.
        second_id = store.acquire(chain)
        assert wait_for(lambda: published.get(second_id, (0, 0))[1] > 0)
        assert published[second_id][0] == first
        assert cache.load_cached(chain.cache_key) == expected  # and cached on disk
    finally:
        store.stop()
        chain.close()
        again.close()


def test_full_store_is_counted_not_fatal(chain_binary):
    store, _memory, published = make_store(8)
    store.start()
    image = elf.open_elf([str(chain_binary)], str(chain_binary))
    try:
        table_id = store.acquire(image)
        assert wait_for(lambda: store.stats.rejected_full)
        assert published.get(table_id, (0, 0))[1] == 0
        assert store.stats.rejected_full == {str(chain_binary): 1}
    finally:
        store.stop()
        image.close()


def test_smaller_files_go_live_first(chain_binary):
    store, _memory, published = make_store(200000)
    libc = elf.open_elf([LIBC], LIBC)
    chain = elf.open_elf([str(chain_binary)], str(chain_binary))
    try:
        libc_id = store.acquire(libc)  # queued first, but larger
        chain_id = store.acquire(chain)
        order = []
        store._publish = lambda table_id, first, count: order.append(table_id)
        store.start()
        assert wait_for(lambda: len(order) == 2)
        assert order == [chain_id, libc_id]
    finally:
        store.stop()
        libc.close()
        chain.close()


def test_tables_are_pending_until_built_and_their_rows_outlive_their_users(chain_binary):
    store, _memory, published = make_store(100000)
    image = elf.open_elf([str(chain_binary)], str(chain_binary))
    try:
        assert store.rows_for_walk(image.cache_key).state is RowsState.NONE
        table_id = store.acquire(image)
        # Published at once as pending: the kernel defers walks through the file.
        assert published[table_id] == (TABLE_PENDING, 0)
        assert store.rows_for_walk(image.cache_key).state is RowsState.PENDING
        assert store.building()  # the end of a run waits a while for it
        store.start()
        assert wait_for(lambda: published[table_id][1] > 0)
        assert wait_for(lambda: not store.building())
        rows = store.rows_for_walk(image.cache_key)
        assert rows.state is RowsState.LIVE and len(rows.packed) == published[table_id][1] * unwind_rows.ROW_SIZE
        store.release(table_id)  # the last process mapping it exited...
        assert published[table_id] == (0, 0)
        assert store.rows_for_walk(image.cache_key).packed == rows.packed  # ...its late walks still have the rows
    finally:
        store.stop()
        image.close()


def test_rows_of_a_file_no_one_maps_go_once_idle(chain_binary):
    """Kept for the late walks of its exited processes, then let go: a long
    run keeps the rows of what is running. A live table's rows stay."""
    store, _memory, published = make_store(100000)
    chain = elf.open_elf([str(chain_binary)], str(chain_binary))
    libc = elf.open_elf([LIBC], LIBC)
    try:
        chain_id, libc_id = store.acquire(chain), store.acquire(libc)
        store.start()
        assert wait_for(lambda: published[chain_id][1] > 0 and published[libc_id][1] > 0)
        store.release(chain_id)
        released = time.monotonic()
        store.sweep(released + KEPT_IDLE_S / 2)
        assert store.rows_for_walk(chain.cache_key).state is RowsState.LIVE  # a late walk still finds them
        used = time.monotonic()
        store.sweep(used + KEPT_IDLE_S - 1)
        assert store.rows_for_walk(chain.cache_key).state is RowsState.LIVE  # (that use counts as one)
        store.sweep(time.monotonic() + KEPT_IDLE_S + 1)
        assert store.rows_for_walk(chain.cache_key).state is RowsState.NONE
        assert store.rows_for_walk(libc.cache_key).state is RowsState.LIVE  # still mapped
        again = store.acquire(chain)  # the next process to map it: from the cache
        assert wait_for(lambda: published[again][1] > 0)
    finally:
        store.stop()
        chain.close()
        libc.close()


def test_a_file_without_rows_stops_being_pending(tmp_path):
    store, _memory, published = make_store(1000)
    plain = tmp_path / "no-cfi"
    plain.write_bytes(open("/bin/true", "rb").read())
    # An x86-64 ELF file with its unwind sections' names scrambled: no rows.
    data = bytearray(plain.read_bytes())
    for name in (b".eh_frame_hdr", b".eh_frame", b".debug_frame"):
        data = data.replace(name, b".x" + name[2:])
    plain.write_bytes(bytes(data))
    image = elf.open_elf([str(plain)], str(plain))
    try:
        table_id = store.acquire(image)
        assert published[table_id] == (TABLE_PENDING, 0)
        store.start()
        assert wait_for(lambda: published[table_id] == (0, 0))  # frame-pointer steps, not deferred
        assert store.rows_for_walk(image.cache_key).state is RowsState.NONE
    finally:
        store.stop()
        image.close()
