"""The parts of an ELF file jitprof reads itself: the header, program headers,
the build-id note, section headers and symbol tables.

Every count, offset and length comes from a file a target may have written,
so each is checked against the file and capped: reading a file's identity
(segments and build-id) costs at most a few hundred KiB of reads whatever
the file claims, and a symbol table at most MAX_SYMBOL_ENTRIES entries. A
file beyond a cap is read as far as the cap, or refused with ElfFormatError.
"""

from __future__ import annotations

import os
import struct
import threading
from dataclasses import dataclass
from typing import BinaryIO

ELF_MAGIC = b"\x7fELF"
ELFCLASS32, ELFCLASS64 = 1, 2
ELFDATA2LSB = 1
PT_LOAD = 1
PT_INTERP = 3
PT_NOTE = 4
PT_TLS = 7
ET_EXEC = 2
NT_GNU_BUILD_ID = 3
SHT_SYMTAB = 2
SHT_DYNSYM = 11
SHT_NOBITS = 8
SHN_XINDEX = 0xFFFF
SHN_LORESERVE = 0xFF00

# Real files have 8 to 15 program headers and one or two note segments of
# under 100 bytes; these caps are far above that and keep a forged file
# (thousands of note headers over the same MiB) to a fixed cost.
MAX_PROGRAM_HEADERS = 256
MAX_NOTE_SEGMENTS = 8
MAX_NOTE_BYTES = 64 << 10  # read of one note segment
MAX_NOTES_PER_SEGMENT = 256
MAX_BUILD_ID_BYTES = 64  # GNU's are 20 (SHA-1) or 16 (MD5)
# node has about 40 sections and 200 k symbol entries; a Chromium-sized
# binary about 1.5 M. Beyond these the rest of a table is not read.
MAX_SECTIONS = SHN_LORESERVE
MAX_SYMBOL_ENTRIES = 4_000_000
MAX_STRING_TABLE_BYTES = 256 << 20


class ElfFormatError(ValueError):
    """The file is not an ELF file jitprof can read; the message says why."""


@dataclass(frozen=True)
class LoadSegment:
    """A PT_LOAD segment: where file bytes are mapped."""

    file_offset: int
    vaddr: int
    file_size: int


@dataclass(frozen=True)
class SectionHeader:
    """An ELF section header, its name resolved."""

    name: str
    kind: int
    address: int
    offset: int
    size: int
    link: int
    flags: int = 0  # SHF_*


@dataclass(frozen=True)
class ElfHeader:
    """The ELF header fields jitprof reads."""

    elf_class: int
    entry: int
    program_offset: int
    section_offset: int
    program_entry_size: int
    program_count: int
    section_entry_size: int
    section_count: int
    names_index: int
    file_size: int
    file_type: int = 0  # ET_EXEC, ET_DYN, ...


_HEADER = {ELFCLASS64: struct.Struct("<HHIQQQIHHHHHH"), ELFCLASS32: struct.Struct("<HHIIIIIHHHHHH")}
_PROGRAM = {ELFCLASS64: struct.Struct("<IIQQQQQQ"), ELFCLASS32: struct.Struct("<IIIIIIII")}
_SECTION = {ELFCLASS64: struct.Struct("<IIQQQQIIQQ"), ELFCLASS32: struct.Struct("<IIIIIIIIII")}
_NOTE = struct.Struct("<III")
ELF64_SYMBOL = struct.Struct("<IBBHQQ")  # Elf64_Sym: name, info, other, section, value, size


_failed_reads = threading.local()


def failed_reads() -> int:
    """Reads that failed on this thread so far (an I/O error, not the file's
    content): what was read past one is not kept for later runs."""
    return getattr(_failed_reads, "count", 0)


def read_exact(handle: BinaryIO, offset: int, length: int, file_size: int) -> bytes:
    """length bytes at offset, which must lie inside the file."""
    if offset < 0 or length < 0 or offset + length > file_size:
        raise ElfFormatError(f"{length} bytes at {offset:#x} lie outside the file ({file_size} bytes)")
    parts = []
    descriptor = handle.fileno()
    while length > 0:
        try:
            chunk = os.pread(descriptor, min(length, 1 << 24), offset)
        except OSError as error:
            _failed_reads.count = failed_reads() + 1
            raise ElfFormatError(f"read at {offset:#x}: {error.strerror}") from error
        if not chunk:
            raise ElfFormatError(f"the file ended at {offset:#x}")
        parts.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(parts)


def read_header(handle: BinaryIO) -> ElfHeader:
    file_size = os.fstat(handle.fileno()).st_size
    identity = read_exact(handle, 0, 16, file_size) if file_size >= 16 else b""
    if identity[:4] != ELF_MAGIC:
        raise ElfFormatError("not an ELF file (no magic number)")
    elf_class, data = identity[4], identity[5]
    if elf_class not in _HEADER:
        raise ElfFormatError(f"unknown ELF class {elf_class}")
    if data != ELFDATA2LSB:
        raise ElfFormatError("a big-endian ELF file (this machine's are little-endian)")
    layout = _HEADER[elf_class]
    fields = layout.unpack(read_exact(handle, 16, layout.size, file_size))
    _type, _machine, _version, entry, program_offset, section_offset, _flags, _size = fields[:8]
    program_entry_size, program_count, section_entry_size, section_count, names_index = fields[8:]
    return ElfHeader(
        elf_class,
        entry,
        program_offset,
        section_offset,
        program_entry_size,
        program_count,
        section_entry_size,
        section_count,
        names_index,
        file_size,
        _type,
    )


def read_load_segments_and_build_id(handle: BinaryIO) -> tuple[list[LoadSegment], str]:
    """The PT_LOAD segments (file offset → address) and the GNU build-id
    (lowercase hex, "" if none), from the program headers alone."""
    header = read_header(handle)
    programs = _program_headers(handle, header)
    segments = [LoadSegment(offset, vaddr, file_size) for kind, offset, vaddr, file_size, _align in programs if kind == PT_LOAD]
    build_id = ""
    notes = [(offset, file_size, align) for kind, offset, _vaddr, file_size, align in programs if kind == PT_NOTE]
    for offset, file_size, align in notes[:MAX_NOTE_SEGMENTS]:
        build_id = _build_id_in_notes(handle, header, offset, file_size, align)
        if build_id:
            break
    return segments, build_id


def load_bias(start: int, file_offset: int, segments: list[LoadSegment]) -> int:
    """What to add to a file address for the process's, from one of its
    mappings (where it starts, and at which offset of the file)."""
    for segment in segments:
        if segment.file_offset <= file_offset < segment.file_offset + max(segment.file_size, 1):
            return start - (segment.vaddr + file_offset - segment.file_offset)
    raise ValueError("the mapping is in none of the file's segments")


def _program_headers(handle: BinaryIO, header: ElfHeader) -> list[tuple[int, int, int, int, int]]:
    """(type, file offset, vaddr, file size, alignment) of each program header."""
    if header.program_count == 0 or header.program_offset == 0:
        return []
    layout = _PROGRAM[header.elf_class]
    if header.program_entry_size != layout.size:
        raise ElfFormatError(f"program headers of {header.program_entry_size} bytes (expected {layout.size})")
    if header.program_count > MAX_PROGRAM_HEADERS:
        raise ElfFormatError(f"{header.program_count} program headers (at most {MAX_PROGRAM_HEADERS} are read)")
    data = read_exact(handle, header.program_offset, layout.size * header.program_count, header.file_size)
    result = []
    for fields in layout.iter_unpack(data):
        if header.elf_class == ELFCLASS64:
            kind, _flags, offset, vaddr, _paddr, file_size, _memory_size, align = fields
        else:
            kind, offset, vaddr, _paddr, file_size, _memory_size, _flags, align = fields
        result.append((kind, offset, vaddr, file_size, align))
    return result


def tls_segment(handle: BinaryIO, header: ElfHeader) -> tuple[int, int, int] | None:
    """The PT_TLS segment's (vaddr, memory size, alignment), or None."""
    if header.elf_class != ELFCLASS64 or header.program_count == 0 or header.program_offset == 0:
        return None
    layout = _PROGRAM[ELFCLASS64]
    if header.program_entry_size != layout.size or header.program_count > MAX_PROGRAM_HEADERS:
        raise ElfFormatError("unexpected program headers")
    data = read_exact(handle, header.program_offset, layout.size * header.program_count, header.file_size)
    for kind, _flags, _offset, vaddr, _paddr, _file_size, memory_size, align in layout.iter_unpack(data):
        if kind == PT_TLS:
            return vaddr, memory_size, align
    return None


def program_header_types(handle: BinaryIO, header: ElfHeader) -> set[int]:
    """Which kinds of program header the file has (PT_INTERP: a program)."""
    return {kind for kind, *_rest in _program_headers(handle, header)}


def _build_id_in_notes(handle: BinaryIO, header: ElfHeader, offset: int, size: int, align: int) -> str:
    """The GNU build-id among the notes at [offset, offset + size), if any."""
    size = min(size, MAX_NOTE_BYTES, max(header.file_size - offset, 0))
    if size < _NOTE.size or offset < 0:
        return ""
    data = read_exact(handle, offset, size, header.file_size)
    step = 8 if align == 8 else 4
    position = 0
    for _ in range(MAX_NOTES_PER_SEGMENT):
        if position + _NOTE.size > len(data):
            break
        name_size, description_size, kind = _NOTE.unpack_from(data, position)
        name_start = position + _NOTE.size
        description_start = name_start + _aligned(name_size, step)
        description_end = description_start + description_size
        if description_end > len(data):
            break
        if kind == NT_GNU_BUILD_ID and data[name_start : name_start + name_size] == b"GNU\0":
            if 0 < description_size <= MAX_BUILD_ID_BYTES:
                return data[description_start:description_end].hex()
        position = description_start + _aligned(description_size, step)
    return ""


def _aligned(value: int, step: int) -> int:
    return (value + step - 1) & ~(step - 1)


def build_id(handle: BinaryIO) -> str:
    """The file's GNU build-id; ElfFormatError if it is no ELF file."""
    return read_load_segments_and_build_id(handle)[1]


def section_headers(handle: BinaryIO, header: ElfHeader | None = None) -> list[SectionHeader]:
    """Every section header, named from the section name table."""
    header = header or read_header(handle)
    if header.section_offset == 0:
        return []
    layout = _SECTION[header.elf_class]
    if header.section_entry_size != layout.size:
        raise ElfFormatError(f"section headers of {header.section_entry_size} bytes (expected {layout.size})")
    count, names_index = header.section_count, header.names_index
    if count == 0 or names_index == SHN_XINDEX:
        # Past SHN_LORESERVE sections the true values are in section 0.
        first = layout.unpack(read_exact(handle, header.section_offset, layout.size, header.file_size))
        count = count or first[5]
        names_index = first[6] if names_index == SHN_XINDEX else names_index
    if count > MAX_SECTIONS:
        raise ElfFormatError(f"{count} sections (at most {MAX_SECTIONS} are read)")
    data = read_exact(handle, header.section_offset, layout.size * count, header.file_size)
    raw = list(layout.iter_unpack(data))
    names = b""
    if 0 < names_index < len(raw):
        _name, kind, _flags, _address, offset, size = raw[names_index][:6]
        if kind != SHT_NOBITS and size <= MAX_STRING_TABLE_BYTES:
            try:
                names = read_exact(handle, offset, size, header.file_size)
            except ElfFormatError:
                names = b""
    result = []
    for fields in raw:
        name_offset, kind, flags, address, offset, size, link = fields[:7]
        result.append(SectionHeader(string_at(names, name_offset), kind, address, offset, size, link, flags))
    return result


def section_data(handle: BinaryIO, header: ElfHeader, section: SectionHeader, max_bytes: int) -> bytes:
    """A section's bytes, at most max_bytes of them (b"" for NOBITS)."""
    if section.kind == SHT_NOBITS:
        return b""
    return read_exact(handle, section.offset, min(section.size, max_bytes), header.file_size)


def string_at(table: bytes, offset: int) -> str:
    if offset >= len(table):
        return ""
    end = table.find(b"\0", offset)
    return table[offset : end if end >= 0 else len(table)].decode("utf-8", "replace")


def dynamic_strings(handle: BinaryIO, max_bytes: int) -> bytes:
    """The names the file exports and imports (the .dynsym's string table),
    at most max_bytes of them; b"" for a file without one."""
    header = read_header(handle)
    sections = section_headers(handle, header)
    for section in sections:
        if section.kind == SHT_DYNSYM and 0 < section.link < len(sections):
            return section_data(handle, header, sections[section.link], max_bytes)
    return b""


@dataclass(frozen=True)
class NamedSymbol:
    """A symbol-table entry, its name resolved."""

    name: str
    value: int
    size: int
    section_index: int


def symbols_named(
    handle: BinaryIO, prefixes: tuple[bytes, ...], max_matches: int, table_kind: int = SHT_SYMTAB
) -> list[NamedSymbol]:
    """The .symtab (or, table_kind SHT_DYNSYM, the exported) symbols whose
    names start with one of prefixes (data and functions alike), at most
    max_matches of them; the table is read within the usual caps. Empty for
    a file without that table."""
    header = read_header(handle)
    if header.elf_class != ELFCLASS64:
        return []
    sections = section_headers(handle, header)
    found: list[NamedSymbol] = []
    for section in sections:
        if section.kind != table_kind or not 0 < section.link < len(sections):
            continue
        data = section_data(handle, header, section, MAX_SYMBOL_ENTRIES * ELF64_SYMBOL.size)
        strings = section_data(handle, header, sections[section.link], MAX_STRING_TABLE_BYTES)
        usable = len(data) - len(data) % ELF64_SYMBOL.size
        for name_offset, _info, _other, section_index, value, size in ELF64_SYMBOL.iter_unpack(data[:usable]):
            if not strings.startswith(prefixes, name_offset):
                continue
            found.append(NamedSymbol(string_at(strings, name_offset), value, size, section_index))
            if len(found) >= max_matches:
                return found
    return found


def symbol_bytes(handle: BinaryIO, symbol: NamedSymbol, sections: list[SectionHeader], header: ElfHeader) -> bytes | None:
    """The initial bytes of a data symbol (None: in no section with file bytes)."""
    if not 0 < symbol.section_index < len(sections) or not 0 < symbol.size <= 64:
        return None
    section = sections[symbol.section_index]
    if section.kind == SHT_NOBITS:
        return bytes(symbol.size)  # .bss: zero
    start = symbol.value - section.address
    if start < 0 or start + symbol.size > section.size:
        return None
    return read_exact(handle, section.offset + start, symbol.size, header.file_size)


def bytes_at_address(
    handle: BinaryIO, header: ElfHeader, sections: list[SectionHeader], address: int, length: int
) -> bytes | None:
    """length bytes at a virtual address, from the section with file bytes that holds them all (None: none does)."""
    for section in sections:
        if section.kind == SHT_NOBITS or not section.address <= address:
            continue
        start = address - section.address
        if start + length <= section.size:
            return read_exact(handle, section.offset + start, length, header.file_size)
    return None


def symbol_prefix(
    handle: BinaryIO, symbol: NamedSymbol, sections: list[SectionHeader], header: ElfHeader, length: int
) -> bytes | None:
    """The first length bytes (fewer if the symbol is shorter) of a symbol with file bytes (a function's code)."""
    if not 0 < symbol.section_index < len(sections) or symbol.size <= 0 or not 0 < length <= 4096:
        return None
    section = sections[symbol.section_index]
    if section.kind == SHT_NOBITS:
        return None
    start = symbol.value - section.address
    wanted = min(length, symbol.size)
    if start < 0 or start + wanted > section.size:
        return None
    return read_exact(handle, section.offset + start, wanted, header.file_size)
