"""Go programs' functions, source lines and inlined calls from `.gopclntab`,
which Go's linker writes even into stripped binaries (the runtime needs it
for its own tracebacks).

The table of Go 1.18 and later: a header (magic, pointer size, counts, the
text start and the offsets of its parts), then a function table of
(entry offset, function data offset) pairs sorted by entry. A function's
data (`_func`) gives its name's offset in the name table and where its
pc-value tables are: which file (an index into its compile unit's file
list) and which line each pc is at, and (Go 1.20 on) which inlined call a pc
belongs to, whose tree is in the read-only data the module data points to.
A target's file: every offset, count and index is checked against what it
points into, and every table walk is capped.
"""

from __future__ import annotations

import array
import bisect
import struct
from dataclasses import dataclass
from typing import BinaryIO

from profiler.native import elf_format
from profiler.native.blazesym import InlinedCall, NativeSymbol, SourcePlace

MAGIC_GO118, MAGIC_GO120 = 0xFFFFFFF0, 0xFFFFFFF1
MAX_TABLE_BYTES = 256 << 20
MAX_FUNCTIONS = 4_000_000
MAX_NAME_BYTES = 4096
MAX_DATA_BYTES = 64 << 20  # where the module data is looked for
MAX_INLINE_DEPTH = 64
MAX_PC_VALUE_STEPS = 1 << 20
# Steps of every pc-value table one lookup reads (a few thousand in Go's own
# largest functions): a forged table of a million zero-pc steps under a
# self-referencing inline tree took 75 s of Python for one address.
MAX_LOOKUP_STEPS = 1 << 18
_HEADER = struct.Struct("<IBBBBqqQQQQQQ")  # magic, pad, pad, quantum, pointer size, nfunc, nfiles, text start, 6 offsets
# _func up to nfuncdata; Go 1.20 added startLine after cuOffset.
_FUNC_120 = struct.Struct("<IiiIIIIIIiBBBB")
_FUNC_118 = struct.Struct("<IiiIIIIIIBBBB")
_INLINED_CALL = struct.Struct("<B3xiii")  # funcID, nameOff, parentPc, startLine (Go 1.20 on)
PCDATA_INLINE_TREE_INDEX = 2
FUNCDATA_INLINE_TREE = 3
# Where moduledata keeps its pointers (Go 1.20 to 1.26): the table's header
# first, the name table's and the compile units' slices after it, gofunc.
_MODULE_FUNCNAMES, _MODULE_CUTAB, _MODULE_GOFUNC = 8, 32, 320


class GoTableError(ValueError):
    pass


@dataclass(frozen=True)
class _TableParts:
    """Where the header says the table's parts are (offsets into it)."""

    names: int
    compile_units: int
    files: int
    pc_tables: int
    functions: int
    quantum: int  # the pc deltas' unit


@dataclass
class _InlineData:
    """Go 1.20 on: where the inline trees are (gofunc) and the section holding them."""

    gofunc: int
    section_address: int
    section: bytes


@dataclass
class _Function:
    """A Go function's entry in the pc-line table."""

    entry: int  # offset from the text start
    pcfile: int
    pcln: int
    cu_offset: int
    start_line: int  # 0: not recorded (Go 1.18, 1.19)
    inline_tree_index: int  # pctab offset of the pc -> inlined call table; 0: none
    inline_tree: int  # offset from gofunc; -1: none


@dataclass
class GoFunctions:
    """Function starts (file addresses) and names, sorted by start, and
    what names their lines."""

    starts: array.array
    name_offsets: array.array
    names: bytes  # the name table
    text_end: int
    table: bytes  # the whole .gopclntab
    function_data: array.array  # each function's _func, from the function table's start
    parts: _TableParts
    text_start: int
    go120: bool
    inline: _InlineData | None = None
    _steps_left: int = MAX_LOOKUP_STEPS  # of the lookup under way

    def lookup(self, vaddr: int) -> tuple[int, str] | None:
        """(start, name) of the function holding vaddr."""
        index = self._index(vaddr)
        if index is None:
            return None
        name = self._name(self.name_offsets[index])
        return (self.starts[index], name) if name is not None else None

    def locate(self, vaddr: int) -> NativeSymbol | None:
        """The function holding vaddr with its line, and the calls Go inlined
        there, outermost first, each at its line."""
        index = self._index(vaddr)
        if index is None:
            return None
        name = self._name(self.name_offsets[index])
        if name is None:
            return None
        self._steps_left = MAX_LOOKUP_STEPS
        function = self._function(index)
        if function is None:
            return NativeSymbol(name, self.starts[index], None, ())
        pc = vaddr - self.text_start
        # Innermost first: each inlined call at pc, then its caller at the call.
        chain: list[InlinedCall] = []
        for _depth in range(MAX_INLINE_DEPTH):
            call = self._inlined_call(function, pc)
            if call is None:
                break
            call_name, parent_pc, start_line = call
            chain.append(InlinedCall(call_name, self._place(function, pc), start_line))
            pc = function.entry + parent_pc
        chain.reverse()
        return NativeSymbol(name, self.starts[index], self._place(function, pc), tuple(chain))

    def function_line(self, start: int) -> int:
        """The line the function at start begins on (Go 1.20 on), else 0."""
        index = self._index(start)
        self._steps_left = MAX_LOOKUP_STEPS
        function = self._function(index) if index is not None else None
        return function.start_line if function is not None else 0

    def __len__(self) -> int:
        return len(self.name_offsets)

    # Inside the table ------------------------------------------------------

    def _index(self, vaddr: int) -> int | None:
        index = bisect.bisect_right(self.starts, vaddr) - 1
        if index < 0 or index >= len(self.name_offsets) or vaddr >= self.text_end:
            return None
        return index

    def _name(self, offset: int) -> str | None:
        return _c_string(self.names, offset)

    def _function(self, index: int) -> _Function | None:
        at = self.parts.functions + self.function_data[index]
        layout = _FUNC_120 if self.go120 else _FUNC_118
        if at + layout.size > len(self.table):
            return None
        fields = layout.unpack_from(self.table, at)
        entry, _name_offset, _args, _deferreturn, _pcsp, pcfile, pcln, pcdata_count, cu_offset = fields[:9]
        start_line = fields[9] if self.go120 else 0
        funcdata_count = fields[-1]
        pcdata_at = at + layout.size
        funcdata_at = pcdata_at + 4 * pcdata_count
        inline_index, inline_tree = 0, -1
        has_tree = pcdata_count > PCDATA_INLINE_TREE_INDEX and funcdata_count > FUNCDATA_INLINE_TREE
        if self.go120 and self.inline is not None and has_tree and funcdata_at + 4 * funcdata_count <= len(self.table):
            inline_index = struct.unpack_from("<I", self.table, pcdata_at + 4 * PCDATA_INLINE_TREE_INDEX)[0]
            tree = struct.unpack_from("<I", self.table, funcdata_at + 4 * FUNCDATA_INLINE_TREE)[0]
            inline_tree = tree if tree != 0xFFFFFFFF else -1
        return _Function(entry, pcfile, pcln, cu_offset, start_line, inline_index, inline_tree)

    def _pc_value(self, table_offset: int, entry: int, pc: int) -> int | None:
        """The value a pc-value table gives pc (runtime.pcvalue): pairs of a
        zig-zag value delta and a pc delta (in quanta), the value applying
        below the pc reached."""
        if table_offset == 0:
            return None
        data = self.table
        at = self.parts.pc_tables + table_offset
        value, current, quantum = -1, entry, self.parts.quantum
        for step in range(min(MAX_PC_VALUE_STEPS, self._steps_left)):
            self._steps_left -= 1
            decoded = _uvarint(data, at)
            if decoded is None:
                return None
            value_delta, at = decoded
            if value_delta == 0 and step > 0:
                return None  # the table ended before pc
            value += -(value_delta & 1) ^ (value_delta >> 1)
            decoded = _uvarint(data, at)
            if decoded is None:
                return None
            pc_delta, at = decoded
            current += pc_delta * quantum
            if pc < current:
                return value
        return None

    def _place(self, function: _Function, pc: int) -> SourcePlace | None:
        line = self._pc_value(function.pcln, function.entry, pc)
        file_index = self._pc_value(function.pcfile, function.entry, pc)
        if line is None or line <= 0 or file_index is None or file_index < 0:
            return None
        entry_at = self.parts.compile_units + 4 * (function.cu_offset + file_index)
        if entry_at + 4 > len(self.table):
            return None
        file_offset = struct.unpack_from("<I", self.table, entry_at)[0]
        file = _c_string(self.table, self.parts.files + file_offset) if file_offset != 0xFFFFFFFF else None
        return SourcePlace(file, line, 0) if file is not None else None

    def _inlined_call(self, function: _Function, pc: int) -> tuple[str, int, int] | None:
        """The inlined call pc is in (its name, its call's pc offset, the line
        its function begins on), if any."""
        inline = self.inline
        if inline is None or function.inline_tree < 0 or function.inline_tree_index == 0:
            return None
        tree_index = self._pc_value(function.inline_tree_index, function.entry, pc)
        if tree_index is None or tree_index < 0:
            return None
        at = inline.gofunc + function.inline_tree + tree_index * _INLINED_CALL.size - inline.section_address
        if at < 0 or at + _INLINED_CALL.size > len(inline.section):
            return None
        _function_id, name_offset, parent_pc, start_line = _INLINED_CALL.unpack_from(inline.section, at)
        name = self._name(name_offset)
        if name is None or parent_pc < 0:
            return None
        return name, parent_pc, max(start_line, 0)


def _c_string(data: bytes, offset: int) -> str | None:
    """The NUL-terminated string at offset, MAX_NAME_BYTES at most; None
    when there is none there."""
    if not 0 <= offset < len(data):
        return None
    end = data.find(b"\0", offset, offset + MAX_NAME_BYTES)
    return data[offset:end].decode("utf-8", "replace") if end >= 0 else None


def _uvarint(data: bytes, at: int) -> tuple[int, int] | None:
    value = shift = 0
    while at < len(data) and shift < 35:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
    return None


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
    functions = parse_go_functions(data, text.address if text is not None else 0)
    if functions is not None and functions.go120:
        functions.inline = _inline_data(handle, header, sections, section.address, functions.parts)
    return functions


def _inline_data(
    handle: BinaryIO,
    header: elf_format.ElfHeader,
    sections: list[elf_format.SectionHeader],
    table_address: int,
    parts: _TableParts,
) -> _InlineData | None:
    """Where the inline trees are: the module data (its own section, or in
    .noptrdata before Go 1.26) points to
    the table, to its parts, and to gofunc. None when it is not found (a
    position-independent build, whose pointers the loader writes)."""
    for name in (".go.module", ".noptrdata", ".data"):  # .go.module: Go 1.26 on
        holder = next((entry for entry in sections if entry.name == name), None)
        if holder is None:
            continue
        data = elf_format.section_data(handle, header, holder, MAX_DATA_BYTES)
        needle = struct.pack("<Q", table_address)
        at = data.find(needle)
        while at >= 0:
            if at % 8 == 0 and at + _MODULE_GOFUNC + 8 <= len(data):
                funcnames, cutab, gofunc = (
                    struct.unpack_from("<Q", data, at + offset)[0]
                    for offset in (_MODULE_FUNCNAMES, _MODULE_CUTAB, _MODULE_GOFUNC)
                )
                if funcnames == table_address + parts.names and cutab == table_address + parts.compile_units:
                    return _section_holding(handle, header, sections, gofunc)
            at = data.find(needle, at + 1)
    return None


def _section_holding(
    handle: BinaryIO, header: elf_format.ElfHeader, sections: list[elf_format.SectionHeader], address: int
) -> _InlineData | None:
    for section in sections:
        if section.address <= address < section.address + section.size and section.size <= MAX_TABLE_BYTES:
            return _InlineData(address, section.address, elf_format.section_data(handle, header, section, MAX_TABLE_BYTES))
    return None


def parse_go_functions(data: bytes, text_address: int = 0) -> GoFunctions | None:
    """text_address: where .text is, for a position-independent build, whose
    table's text start is 0 in the file (the loader relocates it)."""
    if len(data) < _HEADER.size:
        return None
    magic, _pad1, _pad2, quantum, pointer_size, functions, _files, text_start, name_at, cu_at, files_at, pc_at, table_at = (
        _HEADER.unpack_from(data)
    )
    if magic not in (MAGIC_GO118, MAGIC_GO120):
        return None  # an older Go (before 1.18): not read
    if pointer_size != 8 or not 0 < functions <= MAX_FUNCTIONS or quantum == 0:
        raise GoTableError(f"a table of {functions} functions with {pointer_size}-byte pointers")
    text_start = text_start or text_address
    if not all(0 < offset < len(data) for offset in (name_at, cu_at, files_at, pc_at, table_at)):
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
    return GoFunctions(
        starts,
        name_offsets,
        names,
        text_start + entries[functions],
        data,
        function_data,
        _TableParts(name_at, cu_at, files_at, pc_at, table_at, quantum),
        text_start,
        magic == MAGIC_GO120,
    )
