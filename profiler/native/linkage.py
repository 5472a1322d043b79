"""Names no symbol table gives: the PLT stubs a program calls libraries
through (`malloc@plt`, as perf names them), and a stripped program's entry
point (`_start`). Read from the file's section headers, .rela.plt and
.dynsym, each read bounded like every other read of a target's file."""

from __future__ import annotations

import struct
from typing import BinaryIO

from profiler.native import elf_format

PLT_ENTRY_BYTES = 16  # x86-64's lazy and IBT PLTs alike
MAX_PLT_ENTRIES = 200_000
MAX_DYNAMIC_SYMBOLS_BYTES = 64 << 20
ENTRY_SYMBOL_BYTES = 0x40  # glibc's _start is 0x22-0x26 bytes: never more than this is named _start
SHT_RELA = 4
R_X86_64_JUMP_SLOT = 7
R_X86_64_GLOB_DAT = 6
_RELA = struct.Struct("<QQq")
_JUMP_INDIRECT = b"\xff\x25"  # jmp *disp32(%rip)
_BOUND_JUMP_INDIRECT = b"\xf2\xff\x25"  # bnd jmp *disp32(%rip)
_END_BRANCH = b"\xf3\x0f\x1e\xfa"  # endbr64


def linkage_symbols(handle: BinaryIO) -> list[tuple[int, int, str]]:
    """(start, size, name) of each PLT stub, and of the entry point when the
    file is a program; ValueError or OSError when the file cannot be read."""
    header = elf_format.read_header(handle)
    if header.elf_class != elf_format.ELFCLASS64:
        return []
    sections = elf_format.section_headers(handle, header)
    by_name = {section.name: section for section in sections}
    found: list[tuple[int, int, str]] = []
    relocations = by_name.get(".rela.plt")
    if relocations is not None and relocations.kind == SHT_RELA and 0 < relocations.link < len(sections):
        names = _DynamicSymbols(handle, header, sections, sections[relocations.link])
        slots = _relocated_slots(handle, header, relocations, names, R_X86_64_JUMP_SLOT)
        # With IBT the stubs are in .plt.sec; else in .plt, after its resolver entry.
        if ".plt.sec" in by_name:
            first = by_name[".plt.sec"].address
        elif ".plt" in by_name:
            first = by_name[".plt"].address + PLT_ENTRY_BYTES
        else:
            first = 0
        if first:
            found += [
                (first + index * PLT_ENTRY_BYTES, PLT_ENTRY_BYTES, f"{name}@plt")
                for index, (_slot, name) in enumerate(slots)
                if name
            ]
        got_stubs = by_name.get(".plt.got")
        dynamic = by_name.get(".rela.dyn")
        if got_stubs is not None and dynamic is not None and dynamic.kind == SHT_RELA:
            by_slot = dict(_relocated_slots(handle, header, dynamic, names, R_X86_64_GLOB_DAT))
            found += _got_stubs(handle, header, got_stubs, by_slot)
    if header.file_type == elf_format.ET_EXEC or elf_format.PT_INTERP in elf_format.program_header_types(handle, header):
        if header.entry:
            found.append((header.entry, ENTRY_SYMBOL_BYTES, "_start"))
    return found


class _DynamicSymbols:
    """The names of a .dynsym, decoded as asked: node's has 75,000, its PLT
    names 500 of them."""

    def __init__(self, handle: BinaryIO, header: elf_format.ElfHeader, sections: list, table: elf_format.SectionHeader) -> None:
        self._symbols = b""
        self._strings = b""
        if 0 < table.link < len(sections):
            self._symbols = elf_format.section_data(handle, header, table, MAX_DYNAMIC_SYMBOLS_BYTES)
            self._strings = elf_format.section_data(handle, header, sections[table.link], MAX_DYNAMIC_SYMBOLS_BYTES)

    def name(self, index: int) -> str:
        at = index * elf_format.ELF64_SYMBOL.size
        if at + elf_format.ELF64_SYMBOL.size > len(self._symbols):
            return ""
        return elf_format.string_at(self._strings, elf_format.ELF64_SYMBOL.unpack_from(self._symbols, at)[0])


def _relocated_slots(
    handle: BinaryIO, header: elf_format.ElfHeader, section: elf_format.SectionHeader, names: _DynamicSymbols, kind: int
) -> list[tuple[int, str]]:
    """(GOT slot, symbol name) of each relocation of that kind, in order."""
    data = elf_format.section_data(handle, header, section, MAX_PLT_ENTRIES * _RELA.size)
    slots = []
    for offset, info, _addend in _RELA.iter_unpack(data[: len(data) - len(data) % _RELA.size]):
        if info & 0xFFFFFFFF != kind:
            continue
        slots.append((offset, names.name(info >> 32)))
    return slots


def _got_stubs(
    handle: BinaryIO, header: elf_format.ElfHeader, section: elf_format.SectionHeader, by_slot: dict[int, str]
) -> list[tuple[int, int, str]]:
    """.plt.got's stubs jump through a GOT slot a GLOB_DAT relocation names."""
    code = elf_format.section_data(handle, header, section, MAX_PLT_ENTRIES * 8)
    found = []
    for start in range(0, len(code) - len(code) % 8, 8):
        stub = code[start : start + PLT_ENTRY_BYTES]
        offset = len(_END_BRANCH) if stub.startswith(_END_BRANCH) else 0
        for jump in (_BOUND_JUMP_INDIRECT, _JUMP_INDIRECT):
            if stub[offset : offset + len(jump)] == jump and len(stub) >= offset + len(jump) + 4:
                after = offset + len(jump) + 4
                displacement = int.from_bytes(stub[after - 4 : after], "little", signed=True)
                name = by_slot.get(section.address + start + after + displacement, "")
                if name:
                    found.append((section.address + start, 8, f"{name}@plt"))
                break
    return found
