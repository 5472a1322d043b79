"""Perf maps (/tmp/perf-PID.map): JIT code names, read as the file grows.

The file is written by the target, so to a root process it is hostile: it
is opened without following a final symlink, must be a regular file owned by
the target's user, is capped in size and in entries (each map, and all maps
of a run together), and every line is validated (a bad line is skipped and
counted, never the file).
"""

from __future__ import annotations

import bisect
import os
import re
import stat
from dataclasses import dataclass, field
from typing import NamedTuple

from sortedcontainers import SortedKeyList

from profiler.kernel.proc_status import namespace_pid
from profiler.safety import files

MAX_FILE_BYTES = 512 << 20  # a perf map beyond this is refused (or no longer read)
# node's own map after hours of a busy server holds about 300 k entries
# (40 MB of text). An entry held costs about 165 bytes, and reading one costs
# 3 µs in address order, 12 µs out of order (a writer's choice). A map stops
# being read at MAX_ENTRIES_PER_MAP (80 MB, at most 6 s of the symbolizer's
# time), all maps of a run together at MAX_ENTRIES_PER_RUN (330 MB): every
# process can write a map, so the run needs a bound of its own. Lines are
# capped too, so a map of bad lines cannot cost unbounded time either.
MAX_ENTRIES_PER_MAP = 500_000
MAX_ENTRIES_PER_RUN = 2_000_000
MAX_LINES_PER_MAP = 2 * MAX_ENTRIES_PER_MAP
MAX_LINE_BYTES = 16 << 10
MAX_ENTRY_SIZE = 256 << 20  # no JIT function is 256 MiB
READ_CHUNK = 256 << 10
# One tail reads at most this many lines (about 0.1 s): a lookup never waits
# on a whole huge map, and the sampling thread keeps its share of the GIL.
# What is not read yet is read at the next tail (samples wait, parked).
MAX_LINES_PER_TAIL = 40_000
# Replaced entries kept for samples named late (node's tsc replaces about 100
# of 12,000): past this a late sample at a reused address is named by no
# entry rather than by the later code's.
MAX_REPLACED_KEPT = 16_384
_LINE = re.compile(rb"^(?:0x)?([0-9a-fA-F]{1,16}) (?:0x)?([0-9a-fA-F]{1,16}) (.+)$")


class PerfMapRefused(Exception):
    """The file exists but is not one we may read; the message says why."""


class PerfMapEntry(NamedTuple):  # a tuple: hundreds of thousands are made per map
    start: int
    size: int
    name: str
    sequence: int  # order of appearance: a later entry replaces what it overlaps
    written_by: int = 0  # the file's size once its line was whole (where the line ends)

    @property
    def end(self) -> int:
        return self.start + self.size


def _entry_start(entry: PerfMapEntry) -> int:
    return entry.start


@dataclass
class PerfMapIndex:
    """Entries by address; code written later over the same addresses wins.
    A plain list while entries come in ascending order (as runtimes write
    them), a sorted container from the first that does not: entries in any
    order (descending addresses from a hostile writer) cost O(log n) each,
    not a list insert's O(n)."""

    _entries: list[PerfMapEntry] | SortedKeyList = field(default_factory=list)
    # Entries replaced by later code at their addresses, oldest first, each
    # with where the line that replaced it ends: a sample named after its
    # process exits is named as the map stood when it was taken (lookup's
    # written_by). Kept up to MAX_REPLACED_KEPT.
    replaced: list[tuple[PerfMapEntry, int]] = field(default_factory=list)

    def add(self, entry: PerfMapEntry) -> None:
        entries = self._entries
        if not entries or entry.start >= entries[-1].end:
            if isinstance(entries, list):
                entries.append(entry)
            else:
                entries.add(entry)
            return
        if isinstance(entries, list):
            entries = self._entries = SortedKeyList(entries, key=_entry_start)
        position = entries.bisect_key_left(entry.start)
        # Drop the entries the new one overlaps: the address was reused.
        low = position
        while low > 0 and entries[low - 1].end > entry.start:
            low -= 1
        high = position
        while high < len(entries) and entries[high].start < entry.end:
            high += 1
        if high > low:
            if len(self.replaced) < MAX_REPLACED_KEPT:
                gone = entries[low:high][: MAX_REPLACED_KEPT - len(self.replaced)]
                self.replaced.extend((earlier, entry.written_by) for earlier in gone)
            del entries[low:high]
        entries.add(entry)

    def lookup(self, address: int, written_by: int | None = None) -> PerfMapEntry | None:
        """The code at address: the latest entry, or with written_by (a size
        the file had) the latest of those whose lines it held then."""
        entries = self._entries
        if isinstance(entries, list):
            index = bisect.bisect_right(entries, address, key=_entry_start) - 1
        else:
            index = entries.bisect_key_right(address) - 1
        found = entries[index] if index >= 0 and address < entries[index].end else None
        if written_by is None or found is not None and found.written_by <= written_by:
            return found
        for earlier, replaced_by in reversed(self.replaced):  # rare: code freed, and its addresses reused since
            if earlier.start <= address < earlier.end and earlier.written_by <= written_by < replaced_by:
                return earlier
        return None

    def __len__(self) -> int:
        return len(self._entries)


@dataclass
class EntryBudget:
    """The entries every perf map of a run may still take, together."""

    remaining: int = MAX_ENTRIES_PER_RUN


@dataclass
class PerfMapFile:
    """One open perf map, tailed incrementally."""

    path: str
    descriptor: int
    device: int
    inode: int
    directory: int  # O_PATH descriptor of its directory: reachable after the process is gone
    budget: EntryBudget = field(default_factory=EntryBudget)
    index: PerfMapIndex = field(default_factory=PerfMapIndex)
    offset: int = 0
    skipped_lines: int = 0
    truncated: str = ""  # why reading stopped short of the end ("" while it goes on)
    _pending: bytes = b""
    _discarding: bool = False  # inside an over-long line
    _sequence: int = 0  # entries read, each taken from the budget
    _lines: int = 0

    def tail(self) -> int:
        """Read what was appended since the last call (up to
        MAX_LINES_PER_TAIL lines of it); returns new entries."""
        added = 0
        lines_before = self._lines
        while not self.truncated and self._lines - lines_before < MAX_LINES_PER_TAIL:
            if self.offset >= MAX_FILE_BYTES:
                self.truncated = f"its size limit of {MAX_FILE_BYTES >> 20} MiB"
                break
            try:
                chunk = os.pread(self.descriptor, min(READ_CHUNK, MAX_FILE_BYTES - self.offset), self.offset)
            except OSError:
                break
            if not chunk:
                break
            self.offset += len(chunk)
            added += self._feed(chunk)
            if len(chunk) < READ_CHUNK:
                break
        return added

    def read_all(self) -> int:
        """Tail until the end (or a limit): for a snapshot read at once."""
        added = 0
        while True:
            offset_before = self.offset
            added += self.tail()
            if self.offset == offset_before or self.truncated:
                return added

    def _feed(self, chunk: bytes) -> int:
        data = self._pending + chunk
        lines = data.split(b"\n")
        self._pending = lines.pop()
        line_end = self.offset - len(data)  # (tail moved offset past the chunk)
        added = 0
        for line in lines:
            line_end += len(line) + 1
            if self._discarding:
                self._discarding = False  # the rest of an over-long line
                continue
            if self._at_limit():
                self._pending = b""
                break
            self._lines += 1
            if self._add_line(line, line_end):
                added += 1
        if len(self._pending) > MAX_LINE_BYTES:
            self._pending = b""
            self._discarding = True
            self.skipped_lines += 1
        return added

    def _at_limit(self) -> bool:
        if self._sequence >= MAX_ENTRIES_PER_MAP:
            self.truncated = f"its limit of {MAX_ENTRIES_PER_MAP:,} entries"
        elif self._lines >= MAX_LINES_PER_MAP:
            self.truncated = f"its limit of {MAX_LINES_PER_MAP:,} lines"
        elif self.budget.remaining <= 0:
            self.truncated = f"the limit of {MAX_ENTRIES_PER_RUN:,} entries for all perf maps of the run"
        return bool(self.truncated)

    def _add_line(self, line: bytes, line_end: int) -> bool:
        if not line:
            return False
        match = _LINE.match(line.rstrip(b"\r"))
        if match is None or len(line) > MAX_LINE_BYTES:
            self.skipped_lines += 1
            return False
        start, size = int(match.group(1), 16), int(match.group(2), 16)
        if size == 0 or size > MAX_ENTRY_SIZE or start + size > 1 << 64:
            self.skipped_lines += 1
            return False
        name = match.group(3).decode("utf-8", "replace")
        self._sequence += 1
        self.budget.remaining -= 1
        self.index.add(PerfMapEntry(start, size, name, self._sequence, line_end))
        return True

    def remove(self, owner_uid: int) -> bool:
        """Delete the file if it is still the one we read (not a swapped-in link)."""
        return files.remove_owned(self.directory, os.path.basename(self.path), owner_uid, self.inode)

    def close(self) -> None:
        """Close the file; its entries go back to the run's budget."""
        self.budget.remaining += self._sequence
        self._sequence = 0
        for descriptor in (self.descriptor, self.directory):
            try:
                os.close(descriptor)
            except OSError:
                pass


def candidate_paths(pid: int) -> list[str]:
    """Through the process's root (containers), then the host's /tmp."""
    return [f"/proc/{pid}/root/tmp/perf-{namespace_pid(pid)}.map", f"/tmp/perf-{pid}.map"]


# How much earlier than the process a file may seem written and still be its
# own: the process's start is known to a second, a file's time to a tick.
STALE_MARGIN_S = 2.0


def open_perf_map(
    path: str, owner_uid: int | None, budget: EntryBudget | None = None, not_before: float | None = None
) -> PerfMapFile | None:
    """None if there is no such file, or if it was last written before
    `not_before` (the process's start: the map of an earlier process that
    had the same pid, whose names are not this one's); PerfMapRefused if it
    is not safe to read."""
    try:
        directory = os.open(os.path.dirname(path) or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        descriptor = os.open(os.path.basename(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory)
    except FileNotFoundError:
        os.close(directory)
        return None
    except OSError as error:
        os.close(directory)
        if error.errno == 40:  # ELOOP: the path is a symlink
            raise PerfMapRefused(f"{path} is a symbolic link") from error
        raise PerfMapRefused(f"{path}: {error.strerror}") from error
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise PerfMapRefused(f"{path} is not a regular file")
        if not_before is not None and info.st_mtime < not_before - STALE_MARGIN_S:
            os.close(descriptor)
            os.close(directory)
            return None
        if owner_uid is not None and info.st_uid != owner_uid:
            raise PerfMapRefused(f"{path} belongs to uid {info.st_uid}, not the process's uid {owner_uid}")
        if info.st_size > MAX_FILE_BYTES:
            raise PerfMapRefused(f"{path} is {info.st_size:,} bytes, over the {MAX_FILE_BYTES:,} byte limit")
    except PerfMapRefused:
        os.close(descriptor)
        os.close(directory)
        raise
    return PerfMapFile(path, descriptor, info.st_dev, info.st_ino, directory, budget or EntryBudget())


def remove_perf_map(path: str, owner_uid: int) -> bool:
    """Delete a perf map jitprof caused to be written, if it is still that:
    its directory opened once and checked, the file checked and removed
    relative to it."""
    directory_path, name = os.path.split(path)
    try:
        directory = files.open_directory_for(directory_path or ".", owner_uid)
    except files.UnsafeDirectory:
        return False
    try:
        return files.remove_owned(directory, name, owner_uid)
    finally:
        os.close(directory)
