"""The kernel-side table store, with an anonymous mapping standing in for the
BPF array's memory and a dict for the table map."""

import mmap
import time

from profiler.native import cache, elf, library, unwind_rows
from profiler.native.unwind_tables import UnwindTableStore

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
    store = UnwindTableStore(memory, capacity_rows, 16, lambda table_id, first, count: published.__setitem__(table_id, (first, count)))
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
        assert store.stats.rejected_full == [str(chain_binary)]
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
