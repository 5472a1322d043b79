"""Where a node binary keeps a thread's isolate and the isolate's
continuation-preserved embedder data (the AsyncContextFrame that holds
AsyncLocalStorage's stores): what the kernel reads at each sample. Read once
per binary (with its layout, layout.py: one pass over its symbols) from its
symbols and the first instructions of V8's own accessor, within
elf_format's caps."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO

from profiler.native import elf_format
from profiler.native.elf import PARSE_ERRORS

CURRENT_ISOLATE = "_ZN2v88internal18g_current_isolate_E"  # thread_local Isolate* (V8 11.4 on)
GET_EMBEDDER_DATA = "_ZN2v87Isolate36GetContinuationPreservedEmbedderDataEv"
TRY_GET_CURRENT = "_ZN2v87Isolate13TryGetCurrentEv"
CODE_BYTES = 64  # of an accessor decoded
_DISPLACEMENT = struct.Struct("<i")


class IsolateError(Exception):
    """The binary's isolate cannot be found from a sample; the message says why."""


@dataclass(frozen=True)
class IsolateLocations:
    """Where a thread's isolate and its continuation data are found."""

    isolate_tls: int  # g_current_isolate_ from the thread pointer (x86-64: below it)
    embedder_data: int  # the continuation-preserved embedder data in the Isolate


SYMBOL_PREFIXES = (CURRENT_ISOLATE.encode(), b"_ZN2v87Isolate")


def read_locations(handle: BinaryIO) -> IsolateLocations:
    try:
        header = elf_format.read_header(handle)
        sections = elf_format.section_headers(handle, header)
        symbols = elf_format.symbols_named(handle, SYMBOL_PREFIXES, 4096)
    except PARSE_ERRORS as error:
        raise IsolateError(f"its symbols cannot be read ({error})") from error
    return locations_from_symbols(handle, header, sections, symbols)


def locations_from_symbols(
    handle: BinaryIO, header: elf_format.ElfHeader, sections: list, symbols: list[elf_format.NamedSymbol]
) -> IsolateLocations:
    """IsolateLocations from the binary's symbols (those SYMBOL_PREFIXES name, among others)."""
    wanted = {symbol.name: symbol for symbol in symbols if symbol.name in (CURRENT_ISOLATE, GET_EMBEDDER_DATA, TRY_GET_CURRENT)}
    try:
        tls = elf_format.tls_segment(handle, header)
        accessor = wanted.get(GET_EMBEDDER_DATA)
        code = elf_format.symbol_prefix(handle, accessor, sections, header, CODE_BYTES) if accessor else None
        getter = wanted.get(TRY_GET_CURRENT)
        getter_code = elf_format.symbol_prefix(handle, getter, sections, header, CODE_BYTES) if getter else None
    except PARSE_ERRORS as error:
        raise IsolateError(f"its symbols cannot be read ({error})") from error
    isolate_tls = _isolate_offset(wanted.get(CURRENT_ISOLATE), tls, getter_code)
    if code is None:
        raise IsolateError("its V8 has no continuation-preserved embedder data (V8 before 12)")
    return IsolateLocations(isolate_tls, embedder_data_offset(code))


def thread_isolate_offset(handle: BinaryIO, header: elf_format.ElfHeader, symbols: list[elf_format.NamedSymbol]) -> int:
    """Where a thread's isolate is from its thread pointer (symbols: those SYMBOL_PREFIXES name, among others)."""
    wanted = {symbol.name: symbol for symbol in symbols if symbol.name in (CURRENT_ISOLATE, TRY_GET_CURRENT)}
    try:
        tls = elf_format.tls_segment(handle, header)
        sections = elf_format.section_headers(handle, header)
        getter = wanted.get(TRY_GET_CURRENT)
        getter_code = elf_format.symbol_prefix(handle, getter, sections, header, CODE_BYTES) if getter else None
    except PARSE_ERRORS as error:
        raise IsolateError(f"its symbols cannot be read ({error})") from error
    return _isolate_offset(wanted.get(CURRENT_ISOLATE), tls, getter_code)


def _isolate_offset(current: elf_format.NamedSymbol | None, tls: tuple[int, int, int] | None, getter_code: bytes | None) -> int:
    if current is None or tls is None:
        raise IsolateError("its V8 keeps no thread-local isolate in the executable (a shared libnode, or V8 before 11.4)")
    isolate_tls = static_tls_offset(current.value, *tls)
    direct = _fs_displacement(getter_code or b"")
    if direct is not None and direct != isolate_tls:
        raise IsolateError(f"its isolate is at {direct:#x} from the thread pointer, where its TLS segment says {isolate_tls:#x}")
    return isolate_tls


def static_tls_offset(symbol_offset: int, vaddr: int, memory_size: int, align: int) -> int:
    """Where the executable's TLS variable at symbol_offset lies from the
    thread pointer: x86-64 puts the executable's block right below it,
    rounded to its alignment (glibc's _dl_determine_tlsoffset, first module)."""
    align = max(align, 1)
    first_byte = vaddr & (align - 1)
    block = -(-(memory_size - first_byte) // align) * align + first_byte
    return symbol_offset - block


def embedder_data_offset(code: bytes) -> int:
    """The Isolate field V8's GetContinuationPreservedEmbedderData() loads."""
    return loaded_field(code, "GetContinuationPreservedEmbedderData()")


def loaded_field(code: bytes, accessor: str) -> int:
    """The Isolate field an accessor of V8's that returns a handle to it loads
    (`mov disp32(%rdi), reg`) besides the handle scope's next and limit
    (`cmp disp32(%rdi), %rax` is the limit; next sits right before it)."""
    loads: list[int] = []
    limit = None
    for at in range(len(code) - 6):
        rex, opcode, modrm = code[at], code[at + 1], code[at + 2]
        if rex not in (0x48, 0x4C) or modrm & 0xC7 != 0x87:  # mod 10, rm rdi: disp32(%rdi)
            continue
        displacement = _DISPLACEMENT.unpack_from(code, at + 3)[0]
        if opcode == 0x8B:
            loads.append(displacement)
        elif opcode in (0x3B, 0x39) and rex == 0x48 and modrm == 0x87:  # either operand order
            limit = displacement
    if limit is None:
        raise IsolateError(f"its {accessor} is not the code jitprof knows")
    candidates = [load for load in loads if load not in (limit, limit - 8)]
    if len(set(candidates)) != 1 or not 0 < candidates[0] < 1 << 16:
        raise IsolateError(f"its {accessor} is not the code jitprof knows")
    return candidates[0]


def _fs_displacement(code: bytes) -> int | None:
    """A `mov %fs:disp32, %rax` in code (local-exec TLS), or None."""
    pattern = b"\x64\x48\x8b\x04\x25"
    at = code.find(pattern)
    if at < 0 or at + 9 > len(code):
        return None
    return _DISPLACEMENT.unpack_from(code, at + 5)[0]
