"""On-disk cache of symbol tables and unwind rows, keyed by build-id (or file identity).

A symbol entry: magic, count, names length, then count u64 starts,
count u64 sizes, and the names joined by NUL. Loading is a few bulk copies.
"""

from __future__ import annotations

import array
import os
import re
import struct
import tempfile
from pathlib import Path

from profiler.native.symbol_table import SymbolTable
from profiler.native.unwind_rows import ROW_SIZE

MAGIC = b"JPSYMS01"
HEADER = struct.Struct("<8sQQ")
_KEY_PATTERN = re.compile(r"^[bf]-[0-9a-f]{1,80}(-d)?$")


def cache_dir() -> Path:
    override = os.environ.get("JITPROF_CACHE_DIR")
    if override:
        return Path(override)
    if os.geteuid() == 0:
        return Path("/var/cache/jitprof")
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "jitprof"


def entry_path(kind: str, key: str, suffix: str) -> Path | None:
    """Where a cache entry lives; None for a key that is not ours (no paths)."""
    if not _KEY_PATTERN.match(key):
        return None
    return cache_dir() / kind / f"{key}{suffix}"


def write_entry(path: Path, parts: list[bytes]) -> None:
    """Write atomically; a cache that cannot be written is only slower."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(descriptor, "wb") as handle:
            for part in parts:
                handle.write(part)
        os.replace(temporary, path)
    except OSError:
        return


def load(key: str) -> SymbolTable | None:

    path = entry_path("symbols", key, ".syms")
    if path is None:
        return None
    try:
        with open(path, "rb") as handle:
            magic, count, names_length = HEADER.unpack(handle.read(HEADER.size))
            if magic != MAGIC:
                return None
            starts = array.array("Q")
            sizes = array.array("Q")
            starts.frombytes(handle.read(count * 8))
            sizes.frombytes(handle.read(count * 8))
            names_blob = handle.read(names_length)
    except (OSError, struct.error, ValueError):
        return None
    names = names_blob.decode("utf-8", "replace").split("\0") if count else []
    if len(starts) != count or len(sizes) != count or len(names) != count:
        return None
    return SymbolTable(starts.tolist(), sizes.tolist(), names)


def store(key: str, table: SymbolTable) -> None:
    path = entry_path("symbols", key, ".syms")
    if path is None:
        return
    names_blob = "\0".join(name.replace("\0", "") for name in table.names).encode("utf-8", "replace")
    write_entry(
        path,
        [
            HEADER.pack(MAGIC, len(table.starts), len(names_blob)),
            array.array("Q", table.starts).tobytes(),
            array.array("Q", table.sizes).tobytes(),
            names_blob,
        ],
    )


# Unwind rows ---------------------------------------------------------------

UNWIND_MAGIC = b"JPUNW001"



def is_cached(key: str) -> bool:
    """Is there a cache entry for the file (without reading it)?"""
    path = entry_path("unwind", key, ".rows")
    return path is not None and path.is_file()


def load_cached(key: str) -> bytes | None:
    """Packed rows of a file seen before, or None."""
    path = entry_path("unwind", key, ".rows")
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data.startswith(UNWIND_MAGIC) or (len(data) - len(UNWIND_MAGIC)) % ROW_SIZE:
        return None
    return data[len(UNWIND_MAGIC) :]


def store_cached(key: str, packed: bytes) -> None:
    path = entry_path("unwind", key, ".rows")
    if path is not None:
        write_entry(path, [UNWIND_MAGIC, packed])
