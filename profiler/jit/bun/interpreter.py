"""JavaScriptCore's interpreter (the LLInt) in bun's binary, named by bytecode
handler (`llint_op_call_varargs`): bun's symbol table names none of it, and
its frames were `bun+0x…`.

JavaScriptCore keeps the address of each handler in its opcode maps, the
`__DATA,__jsc_opcodes` section, filled when it starts: three maps in a row
(operands of one byte, wide16 and wide32), each indexed by opcode. It keeps
each opcode's name, in the same order, in a table of (pointer, length with
the NUL) pairs in .rodata. The table is found by the name of the bytecode
every function starts with (op_enter) and read entry by entry while entries
are names; the maps are read from a live bun's memory (16 KiB, once per
binary and run), and every handler must lie in the binary's text. A handler
ends where the next one begins; the last one is not named.

Only a binary linked at fixed addresses (bun's releases are) holds the
table's pointers in the file as they are in memory; another keeps its
`bun+0x…` frames. So the handlers a live bun showed are the binary's own:
they are kept in jitprof's cache by the binary's identity, and a bun that
exits before it could be read (a short script) is named from there.
"""

from __future__ import annotations

import bisect
import re
import struct
import threading
import time
from dataclasses import dataclass
from typing import BinaryIO

from profiler.jit.symbol_source import JitSymbolSource
from profiler.kernel.address_spaces import KnownMapping
from profiler.kernel.process_memory import MemoryThread, ProcessMemory
from profiler.model.profile import Frame, FrameKind
from profiler.native import cache, elf_format

OPCODE_SECTION = "__DATA,__jsc_opcodes"
ANCHOR = b"\0op_enter\0"
VARIANTS = ("", "_wide16", "_wide32")  # the three maps, in their order
MAX_RODATA_BYTES = 64 << 20  # bun 1.4's: 22 MiB
MAX_SECTION_BYTES = 64 << 10  # bun 1.4's: 16 KiB
MAX_NAMES = 4096  # bun 1.4's JavaScriptCore: 282 opcodes and helpers
MAX_NAME_BYTES = 128
MAX_BINARIES = 16
RETRY_S = 1.0  # a bun read before its JavaScriptCore started: its maps are still empty
_ENTRY = struct.Struct("<QQ")
_NAME = re.compile(rb"[a-z][a-z0-9_]*\Z")
_HANDLER_NAME = re.compile(r"[a-z][a-z0-9_]{0,200}\Z")
CACHE_KIND = "bun"
MAX_CACHE_BYTES = 1 << 20


@dataclass(frozen=True)
class OpcodeTables:
    """Where a binary keeps its opcode maps and what their entries are called."""

    names: tuple[str, ...]
    maps_address: int  # file address (ELF vaddr) of the maps' section
    maps_size: int
    text_start: int
    text_end: int


@dataclass(frozen=True)
class Handlers:
    """The interpreter's handlers: file addresses, sorted, and their names."""

    starts: tuple[int, ...]
    names: tuple[str, ...]

    def name_at(self, file_address: int) -> str | None:
        index = bisect.bisect_right(self.starts, file_address) - 1
        if index < 0 or index >= len(self.starts) - 1:
            return None
        return self.names[index]


def names_table(rodata: bytes, base: int) -> tuple[str, ...]:
    """The opcodes' names from .rodata (its bytes, at file address base):
    the run of (pointer, length) entries around op_enter's, each a name with
    its NUL; () when there is none."""
    anchor = rodata.find(ANCHOR)
    if anchor < 0:
        return ()
    wanted = _ENTRY.pack(base + anchor + 1, len(ANCHOR) - 1)
    at = rodata.find(wanted)
    while at >= 0 and at % 8:
        at = rodata.find(wanted, at + 1)
    if at < 0:
        return ()

    def name_at(offset: int) -> str | None:
        if offset < 0 or offset + _ENTRY.size > len(rodata):
            return None
        pointer, length = _ENTRY.unpack_from(rodata, offset)
        start = pointer - base
        if start < 0 or not 2 <= length <= MAX_NAME_BYTES or start + length > len(rodata):
            return None
        text = rodata[start : start + length]
        if text[-1] != 0 or _NAME.match(text[:-1]) is None:
            return None
        return text[:-1].decode()

    first = at
    while (at - first) // _ENTRY.size < MAX_NAMES and name_at(first - _ENTRY.size) is not None:
        first -= _ENTRY.size
    names: list[str] = []
    offset = first
    while len(names) < MAX_NAMES and (name := name_at(offset)) is not None:
        names.append(name)
        offset += _ENTRY.size
    return tuple(names)


def _fixed_address_sections(handle: BinaryIO) -> tuple[elf_format.ElfHeader, dict[str, elf_format.SectionHeader]] | None:
    """The binary's header and its sections by name, or None: not ELF, or
    not linked at fixed addresses."""
    try:
        header = elf_format.read_header(handle)
        if header.file_type != elf_format.ET_EXEC:
            return None
        return header, {section.name: section for section in elf_format.section_headers(handle, header)}
    except (elf_format.ElfFormatError, OSError):
        return None


def opcode_tables(handle: BinaryIO) -> OpcodeTables | None:
    """The binary's opcode names and where its maps are, or None (not bun's
    JavaScriptCore, or not linked at fixed addresses)."""
    found = _fixed_address_sections(handle)
    if found is None:
        return None
    header, sections = found
    rodata, maps, text = sections.get(".rodata"), sections.get(OPCODE_SECTION), sections.get(".text")
    if rodata is None or maps is None or text is None:
        return None
    if rodata.size > MAX_RODATA_BYTES or not 0 < maps.size <= MAX_SECTION_BYTES:
        return None
    try:
        names = names_table(elf_format.section_data(handle, header, rodata, MAX_RODATA_BYTES), rodata.address)
    except (elf_format.ElfFormatError, OSError):
        return None
    if not names or 3 * len(names) * 8 > maps.size:
        return None
    return OpcodeTables(names, maps.address, maps.size, text.address, text.address + text.size)


def text_range(handle: BinaryIO) -> tuple[int, int] | None:
    """Where a binary linked at fixed addresses keeps its text: what kept
    handlers are checked against, without the opcode names' search of
    .rodata (60 ms for bun 1.4's 22 MiB, at every run)."""
    found = _fixed_address_sections(handle)
    text = found[1].get(".text") if found is not None else None
    return (text.address, text.address + text.size) if text is not None else None


def handlers_from(tables: OpcodeTables, maps: bytes, load_bias: int) -> Handlers | None:
    """The handlers the maps (the section's bytes as a live bun holds them)
    point at, or None: not filled yet, or not the layout described above."""
    count = len(tables.names)
    words = struct.unpack_from(f"<{3 * count}Q", maps)
    by_address: dict[int, str] = {}
    for variant, suffix in enumerate(VARIANTS):
        for index, name in enumerate(tables.names):
            address = words[variant * count + index]
            if address == 0:
                continue
            file_address = address - load_bias
            if not tables.text_start <= file_address < tables.text_end:
                return None
            by_address.setdefault(file_address, (f"llint_{name}" if name.startswith("op_") else name) + suffix)
    if len(by_address) < count:  # most of one map at least
        return None
    starts = sorted(by_address)
    return Handlers(tuple(starts), tuple(by_address[start] for start in starts))


def cached_handlers(key: str, text: tuple[int, int]) -> Handlers | None:
    """The handlers a live bun of this binary showed before, or None; what
    is read back is checked as a live read is (in the text, in order,
    names of the form the tables give)."""
    kept = cache.read_json(CACHE_KIND, key, MAX_CACHE_BYTES)
    if not isinstance(kept, dict):
        return None
    starts, names = kept.get("starts"), kept.get("names")
    if not isinstance(starts, list) or not isinstance(names, list) or len(starts) != len(names):
        return None
    if not 0 < len(starts) <= 3 * MAX_NAMES:
        return None
    if not all(isinstance(start, int) and text[0] <= start < text[1] for start in starts):
        return None
    if any(later <= earlier for earlier, later in zip(starts, starts[1:])):
        return None
    if not all(isinstance(name, str) and _HANDLER_NAME.match(name) for name in names):
        return None
    return Handlers(tuple(starts), tuple(names))


def handlers_kept(mapping: KnownMapping) -> bool:
    """Did a live bun of this binary show its handlers before (kept in the cache)?"""
    image = mapping.image
    if image is None:
        return False
    text = text_range(image.handle)
    return text is not None and cached_handlers(image.cache_key, text) is not None


def keep_handlers(key: str, handlers: Handlers) -> None:
    cache.write_json(CACHE_KIND, key, {"starts": list(handlers.starts), "names": list(handlers.names)})


def read_maps(pid: int, address: int, size: int) -> bytes | None:
    """The maps' bytes in a live process (bounded, on a thread of their own)."""
    try:
        memory = ProcessMemory(pid)
    except OSError:
        return None
    reader = MemoryThread(memory)
    try:
        return reader.run(lambda: memory.read(address, size))
    finally:
        reader.close()


@dataclass
class _Binary:
    tables: OpcodeTables | None
    handlers: Handlers | None = None
    tried_at: float = 0.0


class BunInterpreterNames(JitSymbolSource):
    """Names a bun's interpreter handlers, which its binary does not."""

    def __init__(self) -> None:
        self._binaries: dict[str, _Binary] = {}
        self._lock = threading.Lock()

    def resolve_file_code(self, pid: int, mapping: KnownMapping, address: int, time_ns: int = 0) -> Frame | None:
        image = mapping.image
        if image is None or mapping.module_name != "bun":
            return None
        handlers = self._handlers(pid, mapping)
        if handlers is None:
            return None
        name = handlers.name_at(address - mapping.load_bias)
        return Frame(name, mapping.module_name, FrameKind.NATIVE) if name is not None else None

    def _handlers(self, pid: int, mapping: KnownMapping) -> Handlers | None:
        image = mapping.image
        assert image is not None
        with self._lock:
            binary = self._binaries.get(image.cache_key)
            if binary is None:
                if len(self._binaries) >= MAX_BINARIES:
                    return None
                text = text_range(image.handle)
                kept = cached_handlers(image.cache_key, text) if text is not None else None
                tables = opcode_tables(image.handle) if kept is None else None
                binary = self._binaries[image.cache_key] = _Binary(tables, kept)
            if binary.handlers is not None or binary.tables is None:
                return binary.handlers
            now = time.monotonic()
            if now - binary.tried_at < RETRY_S:
                return None
            binary.tried_at = now
            tables = binary.tables
        maps = read_maps(pid, tables.maps_address + mapping.load_bias, tables.maps_size)
        handlers = handlers_from(tables, maps, mapping.load_bias) if maps is not None else None
        with self._lock:
            if handlers is None or binary.handlers is not None:
                return binary.handlers
            binary.handlers = handlers
        keep_handlers(image.cache_key, handlers)
        return handlers
