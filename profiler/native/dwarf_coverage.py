"""Which addresses of a file its DWARF describes, from .debug_aranges.

A file may carry DWARF for a few of its compilation units only: node's
official builds have libuv's 111 and nothing else. blazesym names every
other address of such a file by its symbol table, as jitprof does without
the helper's round trip; the helper's first answer for node took 0.26 s,
most of a short run's end. The ranges are trusted only when every unit of
.debug_info has its set in .debug_aranges (compilers may leave some out):
else, and for anything this reader does not know, every address is taken to
have DWARF. The file is a target's: every length and offset is checked.
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

from profiler.native import elf_format

MAX_ARANGES_BYTES = 64 << 20
MAX_UNITS = 1 << 16  # units walked in .debug_info; past that, every address is taken to have DWARF
SHF_COMPRESSED = 0x800
_PAIR = struct.Struct("<QQ")


@dataclass(frozen=True)
class DwarfCoverage:
    """The addresses a file's DWARF describes; everywhere: every address may be."""

    starts: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()
    everywhere: bool = True

    def covers(self, vaddr: int) -> bool:
        if self.everywhere:
            return True
        index = bisect.bisect_right(self.starts, vaddr) - 1
        return index >= 0 and vaddr < self.ends[index]


EVERYWHERE = DwarfCoverage()


def dwarf_coverage(handle: BinaryIO) -> DwarfCoverage:
    """Where the file's DWARF (the file holding it: a debug file's) describes code."""
    try:
        header = elf_format.read_header(handle)
        sections = {section.name: section for section in elf_format.section_headers(handle, header)}
    except (ValueError, OSError, struct.error):
        return EVERYWHERE
    aranges, info = sections.get(".debug_aranges"), sections.get(".debug_info")
    if aranges is None or info is None or (aranges.flags | info.flags) & SHF_COMPRESSED or aranges.size > MAX_ARANGES_BYTES:
        return EVERYWHERE
    try:
        data = elf_format.section_data(handle, header, aranges, MAX_ARANGES_BYTES)
        units = _unit_offsets(handle, info.offset, info.size, header.file_size)
    except (ValueError, OSError, struct.error):
        return EVERYWHERE
    ranges = _address_ranges(data)
    if units is None or ranges is None or set(ranges) != units:
        return EVERYWHERE
    return _merged([pair for pairs in ranges.values() for pair in pairs])


def _initial_length(data: bytes, at: int) -> tuple[int, int] | None:
    """A unit's length and the size of the field that gave it (4, or 12 in
    the 64-bit format); None: cut short, or a reserved value."""
    if len(data) - at < 4:
        return None
    length = int.from_bytes(data[at : at + 4], "little")
    if length == 0xFFFFFFFF:
        if len(data) - at < 12:
            return None
        return int.from_bytes(data[at + 4 : at + 12], "little"), 12
    if length >= 0xFFFFFFF0:
        return None
    return length, 4


def _unit_offsets(handle: BinaryIO, start: int, size: int, file_size: int) -> set[int] | None:
    """The offset of each unit in .debug_info (None: too many, or malformed)."""
    if start < 0 or size < 0 or start + size > file_size:
        return None
    offsets: set[int] = set()
    position = 0
    descriptor = handle.fileno()
    while position < size:
        if len(offsets) >= MAX_UNITS:
            return None
        initial = _initial_length(os.pread(descriptor, 12, start + position), 0)
        if initial is None:
            return None
        length, header_size = initial
        if length == 0 or position + header_size + length > size:
            return None
        offsets.add(position)
        position += header_size + length
    return offsets


def _address_ranges(data: bytes) -> dict[int, list[tuple[int, int]]] | None:
    """Each set's [start, end) ranges by its unit's offset in .debug_info
    (None: a form this reader does not know, or malformed)."""
    ranges: dict[int, list[tuple[int, int]]] = {}
    position = 0
    while position < len(data):
        initial = _initial_length(data, position)
        if initial is None:
            return None
        length, header_size = initial
        offset_size = 8 if header_size == 12 else 4
        end = position + header_size + length
        fixed = header_size + 2 + offset_size + 2  # length, version, unit offset, address and segment sizes
        if end > len(data) or header_size + length < fixed:
            return None
        at = position + header_size + 2
        unit = int.from_bytes(data[at : at + offset_size], "little")
        address_size, segment_size = data[at + offset_size], data[at + offset_size + 1]
        if address_size != 8 or segment_size != 0:
            return None
        # The first pair begins at a multiple of a pair's size from the set's start.
        pair_at = position + -(-fixed // _PAIR.size) * _PAIR.size
        pairs = ranges.setdefault(unit, [])
        while pair_at + _PAIR.size <= end:
            address, size = _PAIR.unpack_from(data, pair_at)
            pair_at += _PAIR.size
            if address == 0 and size == 0:
                break
            if size and address + size <= 1 << 64:
                pairs.append((address, address + size))
        position = end
    return ranges


def _merged(pairs: list[tuple[int, int]]) -> DwarfCoverage:
    starts: list[int] = []
    ends: list[int] = []
    for start, end in sorted(pairs):
        if ends and start <= ends[-1]:
            ends[-1] = max(ends[-1], end)
        else:
            starts.append(start)
            ends.append(end)
    return DwarfCoverage(tuple(starts), tuple(ends), everywhere=False)
