"""HotSpot's compressed tables, as a JVM keeps them in its memory: the
line-number table after a method's bytecodes (bytecode index -> line) and a
compiled method's scope descriptors (pc -> the methods inlined there, with
their bytecode indexes). Both are the target's bytes: every decode is bounded
(entries, bytes, steps) and a malformed table decodes to nothing, never to
an exception or a loop.

UNSIGNED5 (Pack200's variable-length integers): up to five bytes, a byte of
192 or more continues the number. From JDK 20 no byte is 0: every byte is one
more than its digit (the excluded byte, X = 1)."""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass

MAX_LINE_ENTRIES = 65_536  # a method's bytecode is at most 64 KiB
MAX_SCOPE_DEPTH = 64  # inlining is 9 deep by default; a chain past this is not a real one
_CONTINUES = 192
_MAX_BYTES = 5
INVOCATION_ENTRY_BCI = -1


class Unsigned5:
    """A read position in a byte string of UNSIGNED5 numbers."""

    def __init__(self, data: bytes, position: int, excluded: int) -> None:
        self.data = data
        self.position = position
        self.excluded = excluded

    def byte(self) -> int | None:
        if not 0 <= self.position < len(self.data):
            return None
        value = self.data[self.position]
        self.position += 1
        return value

    def unsigned(self) -> int | None:
        total = 0
        for index in range(_MAX_BYTES):
            value = self.byte()
            if value is None or value < self.excluded:
                return None
            total += (value - self.excluded) << (6 * index)
            if value < _CONTINUES:
                break
        return total & 0xFFFF_FFFF

    def signed(self) -> int | None:
        value = self.unsigned()
        if value is None:
            return None
        decoded = (value >> 1) ^ -(value & 1)
        return decoded - (1 << 32) if decoded >= 1 << 31 else decoded


def line_table(data: bytes, excluded: int) -> tuple[tuple[int, int], ...]:
    """The (bytecode index, line) pairs of a compressed line-number table
    (they end at a 0 byte); () when it is malformed."""
    stream = Unsigned5(data, 0, excluded)
    bci = line = 0
    pairs: list[tuple[int, int]] = []
    while len(pairs) < MAX_LINE_ENTRIES:
        value = stream.byte()
        if value is None:
            return ()
        if value == 0:
            return tuple(pairs)
        if value == 0xFF:  # a long delta: two signed numbers
            bci_delta, line_delta = stream.signed(), stream.signed()
            if bci_delta is None or line_delta is None:
                return ()
            bci, line = bci + bci_delta, line + line_delta
        else:
            bci, line = bci + (value >> 3), line + (value & 7)
        if not 0 <= bci < 65_536 or line < 0:
            return ()
        pairs.append((bci, line))
    return ()


def table_length(data: bytes, excluded: int) -> int:
    """How many bytes of data the line table takes (to its 0 byte), or -1."""
    stream = Unsigned5(data, 0, excluded)
    for _entry in range(MAX_LINE_ENTRIES):
        value = stream.byte()
        if value is None:
            return -1
        if value == 0:
            return stream.position
        if value == 0xFF and (stream.signed() is None or stream.signed() is None):
            return -1
    return -1


def line_of(pairs: tuple[tuple[int, int], ...], bci: int) -> int:
    """The line of a bytecode index: that of the entry that starts closest
    before it (the table is in code order, but need not be sorted); 0 unknown."""
    best_bci, best_line = -1, 0
    for start, line in pairs:
        if best_bci < start <= bci:
            best_bci, best_line = start, line
    return best_line


@dataclass(frozen=True)
class Scope:
    """One method of a compiled frame: its index in the nmethod's metadata (1-based) and its bytecode index."""

    method_index: int
    bci: int


def scope_chain(scopes_data: bytes, decode_offset: int, excluded: int) -> tuple[Scope, ...]:
    """The scopes from a pc's scope descriptor outwards: the innermost
    (inlined deepest) first, the nmethod's own method last; () when malformed.
    Each descriptor begins with its sender's offset, the method's metadata
    index and the bytecode index + 1; a sender is always earlier in the data."""
    scopes: list[Scope] = []
    offset = decode_offset
    limit = len(scopes_data)
    while offset != 0:
        if not 0 < offset < limit or len(scopes) >= MAX_SCOPE_DEPTH:
            return ()
        stream = Unsigned5(scopes_data, offset, excluded)
        sender, method_index, stored_bci = stream.unsigned(), stream.unsigned(), stream.unsigned()
        if sender is None or method_index is None or stored_bci is None:
            return ()
        scopes.append(Scope(method_index, stored_bci + INVOCATION_ENTRY_BCI))
        limit = offset  # senders come first: the chain ends
        offset = sender
    return tuple(scopes)


@dataclass(frozen=True)
class PcIndex:
    """A PcDesc table's pcs (relative to the code's start) and scope
    descriptor offsets, in pc order: a pc's descriptor found by bisection
    (an nmethod recorded at every pc has thousands; a busy JVM's samples
    look one up for each new pc)."""

    pcs: tuple[int, ...]
    scopes: tuple[int, ...]

    def scope_at(self, relative_pc: int, exact: bool = False) -> int | None:
        """The scope descriptor offset of a pc: the first descriptor at or
        after it (a leaf's code belongs to the scope of the next safepoint or
        call: HotSpot's own approximation, exact with -XX:+DebugNonSafepoints),
        or with exact the one at it (a call's, at its return address; a call
        HotSpot records none for, a leaf call into the runtime, has none).
        None: no descriptor; 0: one without scope."""
        at = bisect.bisect_left(self.pcs, relative_pc)
        if at == len(self.pcs) or (exact and self.pcs[at] != relative_pc):
            return None
        return self.scopes[at]


def pc_index(scopes_pcs: bytes, pc_desc_size: int, pc_offset_at: int, decode_at: int) -> PcIndex | None:
    """The table's descriptors by pc, or None if a field lies past a
    descriptor's size. HotSpot writes them in pc order; sorted here all the
    same (stably: of descriptors at one pc, the first in the table answers)."""
    if pc_desc_size <= 0 or max(pc_offset_at, decode_at) + 4 > pc_desc_size:
        return None
    descriptors = sorted(
        (
            (_S32.unpack_from(scopes_pcs, start + pc_offset_at)[0], _S32.unpack_from(scopes_pcs, start + decode_at)[0])
            for start in range(0, len(scopes_pcs) - pc_desc_size + 1, pc_desc_size)
        ),
        key=lambda descriptor: descriptor[0],
    )
    return PcIndex(tuple(pc for pc, _ in descriptors), tuple(scope for _, scope in descriptors))


def pc_offsets(scopes_pcs: bytes, pc_desc_size: int, pc_offset_at: int) -> list[int]:
    """The pcs (relative to the code's start) of a PcDesc table's descriptors, in order."""
    if pc_desc_size <= 0 or pc_offset_at + 4 > pc_desc_size:
        return []
    return [
        _S32.unpack_from(scopes_pcs, start + pc_offset_at)[0]
        for start in range(0, len(scopes_pcs) - pc_desc_size + 1, pc_desc_size)
    ]


def has_inlined_scopes(scopes_pcs: bytes, scopes_data: bytes, pc_desc_size: int, decode_at: int, excluded: int) -> bool:
    """Does any PcDesc of the table name a chain of more than one method (a
    method inlined into the compiled one)? Malformed chains count as none."""
    if pc_desc_size <= 0 or decode_at + 4 > pc_desc_size:
        return False
    for start in range(0, len(scopes_pcs) - pc_desc_size + 1, pc_desc_size):
        (decode,) = _S32.unpack_from(scopes_pcs, start + decode_at)
        if decode > 0 and len(scope_chain(scopes_data, decode, excluded)) > 1:
            return True
    return False


_S32 = struct.Struct("<i")
