"""Unwind tables in the kernel: one shared row array, a slice per ELF file.

Rows are written straight into the BPF array (a mapping of their pages); a table goes live
when its (first row, row count) entry is written, so the walker never sees a
half-written table. Tables are built on a thread: sampling does not wait; a
table is published as pending meanwhile, and the kernel defers walks that
reach its file (their stack copies are finished in user space with the same
rows, which the store keeps after the file's last user is gone).
Tables compile in C (native/, through cffi, which lets go of the GIL):
node's in about a tenth of a second, libc's in milliseconds.
"""

from __future__ import annotations

import enum
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from profiler.native import cache, library, unwind_rows
from profiler.native.elf import ElfImage

FINISH_GRACE_S = 3.0  # after the run, queued builds may go on this long (for the cache)
KEPT_ROWS_BYTES = 96 << 20  # built rows kept for late walks: node's are 6 MiB, LLVM's 15; three times the row array
# Rows of a file no table holds any more go once unused this long: the late
# walks of its exited processes are over (they retire after 10 s), and the
# next process to map it copies them from the cache in milliseconds.
KEPT_IDLE_S = 60.0
TABLE_PENDING = 0xFFFFFFFF  # the first row of a table being built (bpf/jitprof_abi.h)


class RowsState(enum.Enum):
    LIVE = "live"  # built: the rows are given
    PENDING = "pending"  # queued or building
    NONE = "none"  # never asked for, failed, or without rows


@dataclass(frozen=True)
class TableRows:
    """A file's rows for a walk in user space, and whether they are ready."""

    state: RowsState
    packed: bytes = b""


@dataclass
class TableStats:
    """How the kernel's row array is used, and what did not fit."""

    tables_live: int = 0
    rows_used: int = 0
    rows_capacity: int = 0
    rejected_full: dict[str, int] = field(default_factory=dict)  # files whose rows did not fit -> times
    failed: dict[str, str] = field(default_factory=dict)
    skipped_at_exit: int = 0


@dataclass
class _Table:
    """A file's table in the kernel: where its rows are and who uses it."""

    table_id: int
    image: ElfImage
    references: int = 1
    first_row: int = 0
    row_count: int = 0
    live: bool = False


class UnwindTableStore:
    def __init__(
        self,
        write_rows: Callable[[int, bytes], None],
        capacity_rows: int,
        max_tables: int,
        publish: Callable[[int, int, int], None],
    ) -> None:
        self._write_rows = write_rows  # (first_row, packed) into the BPF array
        self._publish = publish  # (table_id, first_row, row_count) into the BPF map
        self._max_tables = max_tables
        self._lock = threading.Lock()
        self._by_key: dict[str, _Table] = {}
        self._by_id: dict[int, _Table] = {}
        self._free_ids = list(range(max_tables - 1, 0, -1))  # id 0 means "no table"
        self._free_extents: list[tuple[int, int]] = [(0, capacity_rows)]
        # Cached tables first (a copy), then the smallest files: libc is live
        # before node's larger build starts.
        self._queue: queue.PriorityQueue[tuple[int, int, _Table | None]] = queue.PriorityQueue()
        self._pending_keys: dict[str, int] = {}  # cache key -> builds queued
        self._kept: OrderedDict[str, bytes] = OrderedDict()  # cache key -> rows, least recent first
        self._kept_used: dict[str, float] = {}  # cache key -> time.monotonic() of its last use
        self._kept_bytes = 0
        self._sequence = 0
        self._finish_by: float | None = None
        self._thread = threading.Thread(target=self._run, name="jitprof-unwind", daemon=True)
        self.stats = TableStats(rows_capacity=capacity_rows)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Finish queued builds (so the next run finds them cached; each takes
        milliseconds), for at most FINISH_GRACE_S, then stop."""
        self._finish_by = time.monotonic() + FINISH_GRACE_S
        self._queue.put((1 << 62, 0, None))
        if self._thread.is_alive():
            self._thread.join(FINISH_GRACE_S + 1.0)

    # Main thread -----------------------------------------------------------

    def acquire(self, image: ElfImage) -> int:
        """The table id for a mapped file (0: none), building it if new."""
        with self._lock:
            table = self._by_key.get(image.cache_key)
            if table is not None:
                table.references += 1
                return table.table_id
            if not self._free_ids:
                return 0
            table = _Table(self._free_ids.pop(), image)
            self._by_key[image.cache_key] = table
            self._by_id[table.table_id] = table
            self._sequence += 1
            sequence = self._sequence
            kept = image.cache_key in self._kept
            self._pending_keys[image.cache_key] = self._pending_keys.get(image.cache_key, 0) + 1
            self._publish(table.table_id, TABLE_PENDING, 0)
        # A table in memory or in the cache only has to be copied in: it never
        # waits behind builds (node's, from the cache, before a new libc's build).
        cached = kept or cache.is_cached(image.cache_key)
        self._queue.put((-1 if cached else image.size, sequence, table))
        return table.table_id

    def holds(self, cache_key: str) -> bool:
        """Is the file's table in the row array (live or being built), or a
        build of it (for late walks) still queued?"""
        with self._lock:
            return cache_key in self._by_key or cache_key in self._pending_keys

    def building(self, cache_keys: set[str] | None = None) -> bool:
        """Are builds queued or under way (of these files; None: of any), for
        late walks that may wait for them?"""
        with self._lock:
            return bool(self._pending_keys) if cache_keys is None else any(key in self._pending_keys for key in cache_keys)

    def rows_for_walk(self, cache_key: str) -> TableRows:
        """The rows of a file for a walk finished in user space (any thread)."""
        with self._lock:
            packed = self._kept.get(cache_key)
            if packed is not None:
                self._kept.move_to_end(cache_key)
                self._kept_used[cache_key] = time.monotonic()
                return TableRows(RowsState.LIVE, packed)
            if cache_key in self._pending_keys:
                return TableRows(RowsState.PENDING)
            return TableRows(RowsState.NONE)

    def sweep(self, now: float | None = None) -> None:
        """(Main thread, now and then.) Let go of the rows of files no table
        holds that no walk used for KEPT_IDLE_S: a run of days keeps the
        rows of what is running, not of all it ever saw."""
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [
                key
                for key in self._kept
                if key not in self._by_key
                and key not in self._pending_keys
                and now - self._kept_used.get(key, now) >= KEPT_IDLE_S
            ]
            for key in idle:
                self._drop_kept(key)

    def release(self, table_id: int) -> None:
        if table_id == 0:
            return
        with self._lock:
            table = self._by_id.get(table_id)
            if table is None:
                return
            table.references -= 1
            if table.references > 0:
                return
            del self._by_id[table_id]
            del self._by_key[table.image.cache_key]
            if table.image.cache_key in self._kept:  # idle from now: its process's late walks may follow
                self._kept_used[table.image.cache_key] = time.monotonic()
            self._publish(table_id, 0, 0)
            if table.live:
                self._free(table.first_row, table.row_count)
                self.stats.tables_live -= 1
                self.stats.rows_used -= table.row_count
            table.live = False
            self._free_ids.append(table_id)

    # Builder thread -------------------------------------------------------

    def _run(self) -> None:
        while True:
            _size, _sequence, table = self._queue.get()
            if table is None:
                return
            key = table.image.cache_key
            packed = b""
            try:
                if self._finish_by is not None and time.monotonic() > self._finish_by:
                    self.stats.skipped_at_exit += 1
                    continue
                # Built even if every user of the file has gone meanwhile: late
                # walks and the next run (through the cache) use it.
                try:
                    packed = self._rows_for(table.image)
                except Exception as error:  # noqa: BLE001  (a bad file must not stop the others)
                    self.stats.failed[table.image.path] = f"{type(error).__name__}: {error}"
                    continue
                self._install(table, packed)
            finally:
                self._settle(key, packed, table)

    def _rows_for(self, image: ElfImage) -> bytes:
        with self._lock:
            packed = self._kept.get(image.cache_key)
        if packed is not None:
            return packed
        packed = cache.load_cached(image.cache_key)
        if packed is None:
            packed = library.compile_unwind_rows(image.handle.fileno()).packed
            cache.store_cached(image.cache_key, packed)
        return packed

    def _settle(self, key: str, packed: bytes, table: _Table) -> None:
        """A build is over: keep its rows for late walks; a table that did not
        go live stops being pending in the kernel (frame-pointer steps)."""
        with self._lock:
            left = self._pending_keys.get(key, 1) - 1
            if left > 0:
                self._pending_keys[key] = left
            else:
                self._pending_keys.pop(key, None)
            if packed and key not in self._kept:
                self._kept[key] = packed
                self._kept_bytes += len(packed)
                while self._kept_bytes > KEPT_ROWS_BYTES and len(self._kept) > 1:
                    self._drop_kept(next(iter(self._kept)))
            if packed:
                self._kept_used[key] = time.monotonic()
            if not table.live and self._by_id.get(table.table_id) is table:
                self._publish(table.table_id, 0, 0)

    def _install(self, table: _Table, packed: bytes) -> None:
        count = len(packed) // unwind_rows.ROW_SIZE
        if count == 0:
            return
        with self._lock:
            if self._by_id.get(table.table_id) is not table:
                return
            first = self._allocate(count)
            if first is None:
                self.stats.rejected_full[table.image.path] = self.stats.rejected_full.get(table.image.path, 0) + 1
                return
            self._write_rows(first, packed)
            table.first_row, table.row_count, table.live = first, count, True
            self._publish(table.table_id, first, count)
            self.stats.tables_live += 1
            self.stats.rows_used += count

    def _drop_kept(self, key: str) -> None:
        """(Under the lock.)"""
        self._kept_bytes -= len(self._kept.pop(key))
        self._kept_used.pop(key, None)

    # Extents (under the lock) -------------------------------------------

    def _allocate(self, count: int) -> int | None:
        for index, (start, length) in enumerate(self._free_extents):
            if length >= count:
                if length == count:
                    del self._free_extents[index]
                else:
                    self._free_extents[index] = (start + count, length - count)
                return start
        return None

    def _free(self, start: int, count: int) -> None:
        extents = sorted(self._free_extents + [(start, count)])
        merged: list[tuple[int, int]] = []
        for extent_start, length in extents:
            if merged and merged[-1][0] + merged[-1][1] == extent_start:
                merged[-1] = (merged[-1][0], merged[-1][1] + length)
            else:
                merged.append((extent_start, length))
        self._free_extents = merged
