"""On-disk cache of symbol tables and unwind rows.

Entries are keyed by build-id only for system files (root's, writable by no
one else), whose build-id an unprivileged user cannot choose; any other file
is keyed by its identity (device, inode, size, mtime, ctime), so a user can
only ever fill entries for their own files. As root the cache directory must
be root's all the way up (a JITPROF_CACHE_DIR that is not is ignored), entries
are opened without following links and must be ours, everything read is
checked before use (sizes against the file, rows sorted and of known kinds),
and the least recently used entries are evicted past a bound.

A symbol entry: magic, count, names length, then count u64 starts, count
u64 sizes, and the names joined by NUL. Loading is a few bulk copies.
"""

from __future__ import annotations

import array
import itertools
import json
import operator
import os
import re
import stat
import struct
import tempfile
from pathlib import Path

from profiler.native import library
from profiler.native.symbol_table import SymbolTable
from profiler.native.unwind_rows import ROW_SIZE
from profiler.safety.files import root_only
from profiler.safety.terminal import say

MAGIC = b"JPSYMS01"
HEADER = struct.Struct("<8sQQ")
UNWIND_MAGIC = b"JPUNW003"
# b-: by build id, f-: by file identity, k-: by kernel (its BTF's offsets)
_KEY_PATTERN = re.compile(r"^[bfk]-[0-9a-f]{1,80}(-d)?$")
MAX_ENTRY_BYTES = 256 << 20
JSON_SUFFIX = ".json"  # read_json's and write_json's entries
MAX_ENTRIES_PER_KIND = 512  # then the least recently used go
MAX_KIND_BYTES = 1 << 30


def cache_dir() -> Path | None:
    """Where the cache is; None when there is no safe place for it."""
    if os.geteuid() != 0:
        override = os.environ.get("JITPROF_CACHE_DIR")
        if override:
            return Path(override)
        return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "jitprof"
    override = os.environ.get("JITPROF_CACHE_DIR")
    if override:
        chosen = Path(override)
        if not chosen.exists() and root_only(chosen.parent):
            try:
                chosen.mkdir(mode=0o700)
            except OSError:
                pass
        if root_only(chosen):
            return chosen
        _warn_once(
            f"JITPROF_CACHE_DIR={override} is not root's alone (it or a directory above it can be changed "
            "by another user); using /var/cache/jitprof"
        )
    default = Path("/var/cache/jitprof")
    try:
        default.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    return default if root_only(default) else None


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        say(f"jitprof: warning: {message}")


def valid_key(key: str) -> bool:
    """A key of ours: no path separators, nothing but what keys are made of."""
    return bool(_KEY_PATTERN.match(key))


def entry_path(kind: str, key: str, suffix: str) -> Path | None:
    """Where a cache entry lives; None for a key that is not ours (no paths)."""
    if not valid_key(key):
        return None
    directory = cache_dir()
    return directory / kind / f"{key}{suffix}" if directory is not None else None


def write_entry(path: Path, parts: list[bytes]) -> None:
    """Write atomically, then keep the directory within bounds; a cache that
    cannot be written is only slower."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(descriptor, "wb") as handle:
            for part in parts:
                handle.write(part)
        os.replace(temporary, path)
    except OSError:
        return
    evict(path.parent)


def evict(directory: Path, max_entries: int = MAX_ENTRIES_PER_KIND, max_bytes: int = MAX_KIND_BYTES) -> int:
    """Remove the least recently used entries beyond the bounds; how many."""
    try:
        entries = []
        for entry in os.scandir(directory):
            if entry.is_file(follow_symlinks=False):
                info = entry.stat(follow_symlinks=False)
                entries.append((info.st_mtime_ns, info.st_size, entry.name))
    except OSError:
        return 0
    entries.sort(reverse=True)  # most recently used first
    kept_bytes, removed = 0, 0
    for index, (_used, size, name) in enumerate(entries):
        kept_bytes += size
        if index >= max_entries or kept_bytes > max_bytes:
            try:
                os.unlink(directory / name)
                removed += 1
            except OSError:
                pass
    return removed


def usable_entry(path: Path) -> bool:
    """Is there an entry of ours at path (a regular file, not a link, owned
    by this user)? Marks it used, for eviction."""
    try:
        info = os.stat(path, follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            return False
        os.utime(path, follow_symlinks=False)
    except OSError:
        return False
    return True


def read_entry(path: Path) -> bytes | None:
    """An entry's bytes: a regular file of ours, not a link, within the cap.
    Reading it marks it used (its mtime), for eviction."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_size > MAX_ENTRY_BYTES:
            return None
        with os.fdopen(os.dup(descriptor), "rb") as handle:
            data = handle.read(info.st_size + 1)
        if len(data) != info.st_size:
            return None  # changed while read
        os.utime(descriptor)
        return data
    except OSError:
        return None
    finally:
        os.close(descriptor)


def read_json(kind: str, key: str, max_bytes: int) -> object | None:
    """A JSON entry's value, or None: no entry, one over max_bytes, or one
    that does not parse (nested past the parser's depth included). Its
    caller checks the value's shape: the file is only ours, not trusted."""
    path = entry_path(kind, key, JSON_SUFFIX)
    data = read_entry(path) if path is not None else None
    if data is None or len(data) > max_bytes:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def write_json(kind: str, key: str, value: object) -> None:
    path = entry_path(kind, key, JSON_SUFFIX)
    if path is not None:
        write_entry(path, [json.dumps(value, separators=(",", ":")).encode()])


# Symbol tables -----------------------------------------------------------


def load(key: str) -> SymbolTable | None:
    path = entry_path("symbols", key, ".syms")
    data = read_entry(path) if path is not None else None
    if data is None or len(data) < HEADER.size:
        return None
    magic, count, names_length = HEADER.unpack_from(data)
    if magic != MAGIC or HEADER.size + 16 * count + names_length != len(data):
        return None
    view = memoryview(data)
    starts = array.array("Q")
    sizes = array.array("Q")
    starts.frombytes(view[HEADER.size : HEADER.size + 8 * count])
    sizes.frombytes(view[HEADER.size + 8 * count : HEADER.size + 16 * count])
    names_blob = b"".join([view[HEADER.size + 16 * count :], b"\0"]) if count else b""
    del view, data
    if not all(map(operator.lt, starts, itertools.islice(starts, 1, None))):
        return None  # lookups bisect: starts must be strictly increasing
    try:
        return SymbolTable(starts, sizes, names_blob)
    except ValueError:
        return None  # as many names as symbols, or it is not our entry


def _has_entry(kind: str, key: str, suffix: str) -> bool:
    path = entry_path(kind, key, suffix)
    return path is not None and path.is_file()


def has_symbols(key: str) -> bool:
    """Is there a symbol table entry for the file (without reading it)?"""
    return _has_entry("symbols", key, ".syms")


def store(key: str, table: SymbolTable) -> None:
    path = entry_path("symbols", key, ".syms")
    if path is None:
        return
    write_entry(
        path,
        [
            HEADER.pack(MAGIC, len(table), max(len(table.names_blob) - 1, 0)),
            table.starts.tobytes(),
            table.sizes.tobytes(),
            table.names_blob[:-1],  # NUL between names, none after the last
        ],
    )


# Unwind rows ---------------------------------------------------------------


def is_cached(key: str) -> bool:
    """Is there an unwind rows entry for the file (without reading it)?"""
    return _has_entry("unwind", key, ".rows")


def load_cached(key: str) -> bytes | None:
    """Packed rows of a file seen before, or None. They go into the kernel's
    row array as they are, so they are checked as the compiler would write
    them: sorted, of known kinds."""
    path = entry_path("unwind", key, ".rows")
    data = read_entry(path) if path is not None else None
    if data is None or not data.startswith(UNWIND_MAGIC) or (len(data) - len(UNWIND_MAGIC)) % ROW_SIZE:
        return None
    packed = data[len(UNWIND_MAGIC) :]
    return packed if library.rows_valid(packed) else None


def store_cached(key: str, packed: bytes) -> None:
    path = entry_path("unwind", key, ".rows")
    if path is not None:
        write_entry(path, [UNWIND_MAGIC, packed])
