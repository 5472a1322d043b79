"""V8's source-position tables: for each code offset (a bytecode offset, or
a pc offset in optimized code) the source position it runs, delta- and
VLQ-encoded. A position packs a script offset (plus one; zero: none) and an
inlining id (zero: the function itself).

Until V8 13 a code delta's sign says whether the entry is a statement; from
V8 14 the delta is unsigned, shifted up by two: its lowest bits say whether
the entry is a statement and whether it is breakable."""

from __future__ import annotations

import bisect
import threading
from array import array

MAX_ENTRIES = 1 << 20  # a table of a target's: the walk ends
MAX_CACHED_BYTES = 16 << 20  # decoded tables kept: their entries (16 bytes each) and the tables they key by
_cache: dict[tuple[bytes, bool], tuple[array, array]] = {}
_cache_lock = threading.Lock()
_cached_bytes = 0


def _vlq(table: bytes, index: int, signed: bool = True) -> tuple[int, int] | None:
    """A VLQ at index (zig-zag signed, or unsigned) and the index after it."""
    value = shift = 0
    while index < len(table) and shift < 64:
        byte = table[index]
        index += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return ((value >> 1) ^ -(value & 1) if signed else value), index
    return None


def position_at(table: bytes, code_offset: int, statement_bit: bool = False) -> int | None:
    """The source position (V8's packed form) in effect at code_offset;
    statement_bit: the table is V8 14's form."""
    offsets, found = _decoded(table, statement_bit)
    index = bisect.bisect_right(offsets, code_offset) - 1
    return found[index] if index >= 0 else None


def _decoded(table: bytes, statement_bit: bool) -> tuple[array, array]:
    """The table's entries, code offsets ascending: decoded once, since a hot
    function's frames look it up sample after sample (and a big function's
    table is long)."""
    key = (table, statement_bit)
    with _cache_lock:
        known = _cache.get(key)
    if known is not None:
        return known
    offsets, found = array("q"), array("q")
    code, position, index = -1, 0, 0
    for _ in range(MAX_ENTRIES):
        decoded = _vlq(table, index, signed=not statement_bit)
        if decoded is None:
            break
        delta, index = decoded
        code += delta >> 2 if statement_bit else delta if delta >= 0 else -delta - 1  # the sign marks statements
        decoded = _vlq(table, index)
        if decoded is None or (offsets and code < offsets[-1]):
            break  # offsets only go up: a forged table ends here
        source_delta, index = decoded
        position += source_delta
        offsets.append(code)
        found.append(position)
    global _cached_bytes
    cost = 16 * len(offsets) + len(table)
    with _cache_lock:
        if _cached_bytes + cost > MAX_CACHED_BYTES:
            _cache.clear()
            _cached_bytes = 0
        _cache[key] = (offsets, found)
        _cached_bytes += cost
    return offsets, found


def script_offset(position: int) -> int:
    """The script offset of a packed position; -1: none (or an external one)."""
    if position & 1:
        return -1
    return ((position >> 1) & ((1 << 30) - 1)) - 1


def inlining_id(position: int) -> int:
    return (position >> 31) & 0xFFFF
