"""Unwind tables in the kernel: one shared row array, a slice per ELF file.

Rows are written straight into the BPF array through mmap; a table goes live
when its (first row, row count) entry is written, so the walker never sees a
half-written table. Tables are built on a thread: sampling does not wait, and
frames in a file whose table is not live yet take frame-pointer steps.
"""

from __future__ import annotations

import mmap
import os
import queue
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from profiler.native import cache, unwind_compiler, unwind_rows
from profiler.native.elf import ElfImage
from profiler.safety import processes

PROGRESS_FDE_THRESHOLD = 10000  # show a progress bar for files this large
FINISH_GRACE_S = 3.0  # after the run, keep building queued tables this long (for the cache)
LARGE_FILE_BYTES = 16 << 20  # built on a lane of their own, so they never hold up libc


@dataclass
class TableStats:
    tables_live: int = 0
    rows_used: int = 0
    rows_capacity: int = 0
    rejected_full: list[str] = field(default_factory=list)  # files whose rows did not fit
    failed: dict[str, str] = field(default_factory=dict)
    skipped_at_exit: int = 0


@dataclass
class _Table:
    table_id: int
    image: ElfImage
    references: int = 1
    first_row: int = 0
    row_count: int = 0
    live: bool = False


class UnwindTableStore:
    def __init__(
        self,
        rows_memory: mmap.mmap,
        capacity_rows: int,
        max_tables: int,
        publish: Callable[[int, int, int], None],
        show_progress: bool = False,
    ) -> None:
        self._memory = rows_memory
        self._publish = publish  # (table_id, first_row, row_count) into the BPF map
        self._max_tables = max_tables
        self._show_progress = show_progress
        self._lock = threading.Lock()
        self._by_key: dict[str, _Table] = {}
        self._by_id: dict[int, _Table] = {}
        self._free_ids = list(range(max_tables - 1, 0, -1))  # id 0 means "no table"
        self._free_extents: list[tuple[int, int]] = [(0, capacity_rows)]
        # Two lanes, smallest files first in each: libraries go live in
        # milliseconds while a large binary (node: ~25 s cold) builds beside them.
        self._lanes: list[queue.PriorityQueue[tuple[int, int, _Table | None]]] = [queue.PriorityQueue(), queue.PriorityQueue()]
        self._sequence = 0
        self._finish_by: float | None = None
        self._threads = [
            threading.Thread(target=self._run, args=(lane,), name=f"jitprof-unwind-{index}", daemon=True)
            for index, lane in enumerate(self._lanes)
        ]
        self.stats = TableStats(rows_capacity=capacity_rows)

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Finish queued builds for a few seconds (so the next run finds them
        cached), then stop."""
        self._finish_by = time.monotonic() + FINISH_GRACE_S
        for lane in self._lanes:
            lane.put((1 << 62, 0, None))
        for thread in self._threads:
            if thread.is_alive():
                thread.join()

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
        # A table in the cache only has to be copied in: it never waits
        # behind builds (node's, from the cache, before a new libc's build).
        cached = cache.is_cached(image.cache_key)
        lane = self._lanes[1 if image.size >= LARGE_FILE_BYTES and not cached else 0]
        lane.put((-1 if cached else image.size, sequence, table))
        return table.table_id

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
            if table.live:
                self._publish(table_id, 0, 0)
                self._free(table.first_row, table.row_count)
                self.stats.tables_live -= 1
                self.stats.rows_used -= table.row_count
            table.live = False
            self._free_ids.append(table_id)

    # Builder thread -------------------------------------------------------

    def _run(self, lane: queue.PriorityQueue[tuple[int, int, _Table | None]]) -> None:
        while True:
            _size, _sequence, table = lane.get()
            if table is None:
                return
            if self._finish_by is not None and time.monotonic() > self._finish_by:
                self.stats.skipped_at_exit += 1
                continue
            # Built even if every user of the file has gone meanwhile: the
            # cache then serves the next run.
            try:
                packed = self._rows_for(table.image)
            except unwind_compiler.BuildCancelled:
                self.stats.skipped_at_exit += 1
                continue
            except Exception as error:  # noqa: BLE001  (a bad file must not stop the others)
                self.stats.failed[table.image.path] = f"{type(error).__name__}: {error}"
                continue
            self._install(table, packed)

    def _rows_for(self, image: ElfImage) -> bytes:
        packed = cache.load_cached(image.cache_key)
        if packed is None:
            self._build_in_child(image)
            packed = cache.load_cached(image.cache_key)
        if packed is None:
            raise unwind_compiler.BuildCancelled()
        return packed

    def _build_in_child(self, image: ElfImage) -> None:
        """Run profiler.native.unwind_worker on the file; stop it at the deadline."""
        # Our own file description of the mapped file, handed down by number.
        with open(f"/proc/self/fd/{image.handle.fileno()}", "rb") as handle:
            worker = subprocess.Popen(
                processes.python_module_command("profiler.native.unwind_worker", str(handle.fileno()), image.cache_key),
                pass_fds=(handle.fileno(),),
                cwd=processes.TRUSTED_DIRECTORY,
                env=processes.trusted_environment() | _cache_environment(),
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        bar = _ProgressBar(f"unwind table for {image.path}") if self._show_progress else None
        assert worker.stdout is not None
        output = worker.stdout.fileno()
        pending = b""
        while worker.poll() is None:
            if self._past_deadline():
                worker.kill()
                worker.wait()
                worker.stdout.close()
                raise unwind_compiler.BuildCancelled()
            ready, _, _ = select.select([output], [], [], 0.2)
            if ready:
                lines = (pending + os.read(output, 65536)).split(b"\n")
                pending = lines.pop()  # a line is not always written in one piece
                for line in lines:
                    fields = line.split()
                    if bar is not None and len(fields) == 2 and all(field.isdigit() for field in fields):
                        bar.report(int(fields[0]), int(fields[1]))
        worker.stdout.close()
        if bar is not None:
            bar.finish()

    def _past_deadline(self) -> bool:
        return self._finish_by is not None and time.monotonic() > self._finish_by

    def _install(self, table: _Table, packed: bytes) -> None:
        count = len(packed) // unwind_rows.ROW_SIZE
        if count == 0:
            return
        with self._lock:
            if self._by_id.get(table.table_id) is not table:
                return
            first = self._allocate(count)
            if first is None:
                self.stats.rejected_full.append(table.image.path)
                return
            start = first * unwind_rows.ROW_SIZE
            self._memory[start : start + len(packed)] = packed
            table.first_row, table.row_count, table.live = first, count, True
            self._publish(table.table_id, first, count)
            self.stats.tables_live += 1
            self.stats.rows_used += count

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


def _cache_environment() -> dict[str, str]:
    """The one setting the worker needs from ours: where the cache is."""
    return {"JITPROF_CACHE_DIR": str(cache.cache_dir())}


class _ProgressBar:
    """A rich progress bar on stderr, shown only for large files."""

    def __init__(self, description: str) -> None:
        self._description = description
        self._progress: Any = None
        self._task: Any = None

    def report(self, done: int, total: int) -> None:
        if total < PROGRESS_FDE_THRESHOLD:
            return
        if self._progress is None:
            from rich.console import Console  # noqa: PLC0415  (only on a TTY)
            from rich.progress import Progress  # noqa: PLC0415

            self._progress = Progress(console=Console(stderr=True), transient=True)
            self._progress.start()
            self._task = self._progress.add_task(self._description, total=total)
        self._progress.update(self._task, completed=done)

    def finish(self) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=self._progress.tasks[0].total)
            self._progress.stop()
            self._progress = None


def progress_wanted() -> bool:
    return sys.stderr.isatty()
