"""The OpenTelemetry thread context (OTEP 4947): a thread-local pointer,
exported in a module's .dynsym as a TLS symbol and reached through a TLSDESC
descriptor, to the thread's current record: trace id (16 bytes), span id
(8), valid (1 byte: 1), a reserved byte, the attributes' size (u16), then
the attributes, each a key index (into the process context's key map), a
length and that many bytes of UTF-8.

The kernel reads the record at each sample from the thread pointer plus the
variable's offset, which glibc writes into the descriptor's second word when
it places the module's TLS block in the static TLS area (every module loaded
at start); here that offset is found: the symbol, its TLSDESC relocation,
the descriptor in the process's memory."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from profiler.native import elf_format

SYMBOLS = (b"otel_thread_ctx_v1", b"custom_labels_current_set_v2")  # the specification's name, and its working name
MAX_STATIC_TLS = 16 << 20  # an offset into the static TLS area is below the thread pointer, and this near
MAX_DYNAMIC_SYMBOLS = 1 << 20
MAX_RELOCATIONS = 1 << 20
STT_TLS = 6
SHT_RELA = 4
R_X86_64_TLSDESC = 36
RECORD_HEADER = struct.Struct("<16s8sBBH")
_DESCRIPTOR = struct.Struct("<Qq")
_RELA = struct.Struct("<QQq")


class Memory(Protocol):
    def read(self, address: int, length: int) -> bytes | None: ...


@dataclass(frozen=True)
class ThreadContext:
    """A thread's current trace, span and attributes, as published."""

    trace_id: str  # hex, "" when none is active (all zeros)
    span_id: str
    attributes: tuple[tuple[str, str], ...]


def descriptor_address(handle: BinaryIO) -> int | None:
    """The file address of the TLSDESC descriptor of the module's context
    pointer (None: the module exports none, or reaches it another way)."""
    header = elf_format.read_header(handle)
    if header.elf_class != elf_format.ELFCLASS64:
        return None
    sections = elf_format.section_headers(handle, header)
    symbol_index = None
    for section in sections:
        if section.kind != elf_format.SHT_DYNSYM or not 0 < section.link < len(sections):
            continue
        strings = elf_format.section_data(handle, header, sections[section.link], elf_format.MAX_STRING_TABLE_BYTES)
        if not any(name + b"\0" in strings for name in SYMBOLS):
            return None  # the cheap test first: most modules have no such name
        data = elf_format.section_data(handle, header, section, MAX_DYNAMIC_SYMBOLS * elf_format.ELF64_SYMBOL.size)
        usable = len(data) - len(data) % elf_format.ELF64_SYMBOL.size
        for index, (name_offset, info, _other, section_index, _value, _size) in enumerate(
            elf_format.ELF64_SYMBOL.iter_unpack(data[:usable])
        ):
            if info & 0xF == STT_TLS and section_index != 0 and elf_format.string_at(strings, name_offset).encode() in SYMBOLS:
                symbol_index = index
                break
    if symbol_index is None:
        return None
    for section in sections:
        if section.kind != SHT_RELA:
            continue
        data = elf_format.section_data(handle, header, section, MAX_RELOCATIONS * _RELA.size)
        usable = len(data) - len(data) % _RELA.size
        for offset, info, _addend in _RELA.iter_unpack(data[:usable]):
            if info & 0xFFFFFFFF == R_X86_64_TLSDESC and info >> 32 == symbol_index:
                return offset
    return None


def thread_pointer_offset(memory: Memory, descriptor_at: int) -> int | None:
    """The pointer's offset from a thread's thread pointer, from the
    descriptor glibc filled in (resolver, argument). None where the module's
    TLS is not in the static area (dlopen'd late: its address is per thread)."""
    data = memory.read(descriptor_at, _DESCRIPTOR.size)
    if data is None:
        return None
    resolver, argument = _DESCRIPTOR.unpack(data)
    if resolver == 0 or not -MAX_STATIC_TLS <= argument < 0:
        return None
    return argument


def decode_record(data: bytes, keys: tuple[str, ...]) -> ThreadContext | None:
    """A record as the kernel read it (possibly cut after the header): None
    when it is not valid; attributes cut short or of unknown keys are left out."""
    if len(data) < RECORD_HEADER.size:
        return None
    trace_id, span_id, valid, _reserved, size = RECORD_HEADER.unpack_from(data)
    if valid != 1:
        return None
    attributes: list[tuple[str, str]] = []
    at, end = RECORD_HEADER.size, min(len(data), RECORD_HEADER.size + size)
    while at + 2 <= end:
        key_index, length = data[at], data[at + 1]
        if at + 2 + length > end:
            break
        if key_index < len(keys) and keys[key_index]:
            attributes.append((keys[key_index], data[at + 2 : at + 2 + length].decode("utf-8", "replace")))
        at += 2 + length
    no_trace = not any(trace_id)
    return ThreadContext("" if no_trace else trace_id.hex(), "" if no_trace else span_id.hex(), tuple(attributes))
