"""Go programs' function names from `.gopclntab`, which Go's linker writes
even into stripped binaries (the runtime needs it for its own tracebacks).

The table of Go 1.18 and later: a header (magic, pointer size, counts, the
text start and the offsets of its parts), then a function table of
(entry offset, function data offset) pairs sorted by entry, each function's
data giving its name's offset in the name table. A target's file: every
offset and count is checked against the section's size.
"""

from __future__ import annotations

import array
import bisect
import struct
from dataclasses import dataclass
from typing import BinaryIO

from profiler.native import elf_format

MAGICS = (0xFFFFFFF0, 0xFFFFFFF1)  # Go 1.18-1.19, Go 1.20 and later
MAX_TABLE_BYTES = 256 << 20
MAX_FUNCTIONS = 4_000_000
MAX_NAME_BYTES = 4096
_HEADER = struct.Struct("<IBBBBqqQQQQQQ")  # magic, pad, pad, quantum, pointer size, nfunc, nfiles, text start, 6 offsets


class GoTableError(ValueError):
    pass


@dataclass
class GoFunctions:
    """Function starts (file addresses) and names, sorted by start."""

    starts: array.array
    name_offsets: array.array
    names: bytes  # the name table
    text_end: int

    def lookup(self, vaddr: int) -> tuple[int, str] | None:
        """(start, name) of the function holding vaddr."""
        index = bisect.bisect_right(self.starts, vaddr) - 1
        if index < 0 or index >= len(self.name_offsets) or vaddr >= self.text_end:
            return None
        offset = self.name_offsets[index]
        end = self.names.find(b"\0", offset, offset + MAX_NAME_BYTES)
        if offset >= len(self.names) or end < 0:
            return None
        return self.starts[index], self.names[offset:end].decode("utf-8", "replace")

    def __len__(self) -> int:
        return len(self.name_offsets)


def read_go_functions(handle: BinaryIO) -> GoFunctions | None:
    """The table of a Go binary; None for a file without one. GoTableError
    (or another ValueError, OSError) when it is damaged."""
    header = elf_format.read_header(handle)
    if header.elf_class != elf_format.ELFCLASS64:
        return None
    sections = elf_format.section_headers(handle, header)
    section = next((entry for entry in sections if entry.name == ".gopclntab"), None)
    if section is None or section.size < _HEADER.size:
        return None
    if section.size > MAX_TABLE_BYTES:
        raise GoTableError(f".gopclntab of {section.size} bytes (at most {MAX_TABLE_BYTES} are read)")
    data = elf_format.section_data(handle, header, section, MAX_TABLE_BYTES)
    text = next((entry for entry in sections if entry.name == ".text"), None)
    return parse_go_functions(data, text.address if text is not None else 0)


def parse_go_functions(data: bytes, text_address: int = 0) -> GoFunctions | None:
    """text_address: where .text is, for a position-independent build, whose
    table's text start is 0 in the file (the loader relocates it)."""
    if len(data) < _HEADER.size:
        return None
    magic, _pad1, _pad2, _quantum, pointer_size, functions, _files, text_start, name_at, *_offsets, table_at = (
        _HEADER.unpack_from(data)
    )
    if magic not in MAGICS:
        return None  # an older Go (before 1.18): not read
    if pointer_size != 8 or not 0 < functions <= MAX_FUNCTIONS:
        raise GoTableError(f"a table of {functions} functions with {pointer_size}-byte pointers")
    text_start = text_start or text_address
    if not 0 < name_at < len(data) or not 0 < table_at < len(data):
        raise GoTableError("offsets outside the table")
    pairs_end = table_at + (functions + 1) * 8
    if pairs_end > len(data):
        raise GoTableError("the function table runs past the section")
    pairs = array.array("I", data[table_at:pairs_end])
    entries = pairs[0::2]
    function_data = pairs[1::2]
    starts = array.array("Q")
    name_offsets = array.array("I")
    names_end = table_at if name_at < table_at else len(data)
    names = data[name_at:names_end]
    previous = -1
    for index in range(functions):
        at = table_at + function_data[index]
        if at + 8 > len(data):
            raise GoTableError(f"function {index}'s data is outside the table")
        _entry, name_offset = struct.unpack_from("<Ii", data, at)
        if entries[index] < previous or name_offset < 0:
            raise GoTableError(f"function {index} is out of order or unnamed")
        previous = entries[index]
        starts.append(text_start + entries[index])
        name_offsets.append(name_offset)
    return GoFunctions(starts, name_offsets, names, text_start + entries[functions])
