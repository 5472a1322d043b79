"""V8's source-position tables: for each code offset (a bytecode offset, or
a pc offset in optimized code) the source position it runs, delta- and
VLQ-encoded. A position packs a script offset (plus one; zero: none) and an
inlining id (zero: the function itself).

Until V8 13 a code delta's sign says whether the entry is a statement; from
V8 14 its lowest bit does (the delta is shifted up by one)."""

from __future__ import annotations

MAX_ENTRIES = 1 << 20  # a table of a target's: the walk ends


def _vlq(table: bytes, index: int) -> tuple[int, int] | None:
    value = shift = 0
    while index < len(table) and shift < 64:
        byte = table[index]
        index += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), index
    return None


def position_at(table: bytes, code_offset: int, statement_bit: bool = False) -> int | None:
    """The source position (V8's packed form) in effect at code_offset;
    statement_bit: the table is V8 14's form."""
    code, position, index = -1, 0, 0
    found: int | None = None
    for _ in range(MAX_ENTRIES):
        decoded = _vlq(table, index)
        if decoded is None:
            return found
        delta, index = decoded
        if statement_bit:
            code += delta >> 1
        else:
            code += delta if delta >= 0 else -delta - 1  # the sign marks statement positions
        if code > code_offset:
            return found
        decoded = _vlq(table, index)
        if decoded is None:
            return found
        source_delta, index = decoded
        position += source_delta
        found = position
    return found


def script_offset(position: int) -> int:
    """The script offset of a packed position; -1: none (or an external one)."""
    if position & 1:
        return -1
    return ((position >> 1) & ((1 << 30) - 1)) - 1


def inlining_id(position: int) -> int:
    return (position >> 31) & 0xFFFF
