"""ELF files of a process: open them safely, read identity, segments, symbols.

The headers are read by elf_format, which caps every count and length a
file claims (the file is a target's); symbols are decoded in bulk with
struct. Tables are cached on disk by build-id.
"""

from __future__ import annotations

import array
import bisect
import hashlib
import os
import stat
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO

from profiler.native import cache, debuginfod, elf_format
from profiler.native.dwarf_coverage import DwarfCoverage, dwarf_coverage
from profiler.native.elf_format import ELF64_SYMBOL, MAX_STRING_TABLE_BYTES, MAX_SYMBOL_ENTRIES, LoadSegment
from profiler.native.linkage import linkage_symbols
from profiler.native.symbol_table import SymbolTable
from profiler.safety import files

if TYPE_CHECKING:
    from profiler.native.gopclntab import GoFunctions

MAX_ELF_BYTES = 4 << 30  # refuse larger files: a target could map anything
STT_FUNC = 2
STT_GNU_IFUNC = 10
BINDING_RANK = {1: 2, 2: 1}  # STB_GLOBAL, STB_WEAK; STB_LOCAL ranks 0

# What reading a damaged file raises (ElfFormatError is a ValueError).
PARSE_ERRORS = (ValueError, OSError, struct.error)
# Where blazesym finds lines and inlined functions (compressed or not).
DWARF_SECTIONS = frozenset({".debug_info", ".zdebug_info", ".debug_line", ".zdebug_line"})


class UnreadableElf(Exception):
    """opened: the file was opened and is no ELF jitprof can use (it will not
    become one); otherwise no candidate path could be opened, which may be
    passing (its process exited, taking its /proc entries with it)."""

    def __init__(self, message: str, opened: bool = True) -> None:
        super().__init__(message)
        self.opened = opened


@dataclass
class ElfImage:
    """One opened ELF file; the handle stays open so symbols outlive the process."""

    path: str
    handle: BinaryIO
    build_id: str
    segments: list[LoadSegment]
    cache_key: str
    size: int = 0
    debug_file: str = ""  # separate debug file found by build-id (local symbols)
    debug_root: str = ""  # the target's filesystem root the debug file is inside, if any
    _symbols: SymbolTable | None = field(default=None, repr=False)
    _function_starts: array.array | None = field(default=None, repr=False)
    _debug_handle: BinaryIO | None = field(default=None, repr=False)
    _linkage: SymbolTable | None = field(default=None, repr=False)
    _go_functions: GoFunctions | None = field(default=None, repr=False)
    _go_read: bool = field(default=False, repr=False)
    _debug_tried: bool = field(default=False, repr=False)
    _has_dwarf: bool | None = field(default=None, repr=False)
    _dwarf_coverage: DwarfCoverage | None = field(default=None, repr=False)
    _symbols_cached: bool | None = field(default=None, repr=False)

    def vaddr_for_file_offset(self, file_offset: int) -> int | None:
        for segment in self.segments:
            if segment.file_offset <= file_offset < segment.file_offset + max(segment.file_size, 1):
                return file_offset - segment.file_offset + segment.vaddr
        return None

    def vaddr_for_mapping(self, file_offset: int, length: int) -> int | None:
        """The address the first byte of a mapping of the file has: by the
        segment most of the mapping holds. Linkers may start a segment in the
        page where the one before ends with another address-offset delta
        (rustc's and lld's executables: text at offset 0x169c0, address
        0x179c0), so the mapping's first byte may belong to the other one."""
        best, best_overlap = None, 0
        for segment in self.segments:
            overlap = min(file_offset + length, segment.file_offset + segment.file_size) - max(file_offset, segment.file_offset)
            if overlap > best_overlap:
                best, best_overlap = segment, overlap
        if best is None:
            return self.vaddr_for_file_offset(file_offset)
        return file_offset - best.file_offset + best.vaddr

    def symbols(self) -> SymbolTable:
        if self._symbols is None:
            self._fetch_debug_file()
            key = self.names_key()
            cached = cache.load(key)
            if cached is None:
                cached, complete = self._read_all_symbols()
                if complete:  # never keep, under the debug file's key, a table read without it
                    cache.store(key, cached)
            self._symbols = cached
        return self._symbols

    def has_dwarf(self) -> bool:
        """Does the file, or its debug file, have DWARF (source lines, inlined
        functions)? Without, blazesym names only what the symbol table does."""
        if self._has_dwarf is None:
            self._has_dwarf = self.debug_handle() is not None
            if not self._has_dwarf:
                try:
                    names = {section.name for section in elf_format.section_headers(self.handle)}
                except PARSE_ERRORS:
                    names = set()
                self._has_dwarf = bool(names & DWARF_SECTIONS)
        return self._has_dwarf

    def names_key(self) -> str:
        """The cache key of what is named from the file: with its debug file, if it has one."""
        return self.cache_key + ("-d" if self.debug_file else "")

    def symbols_at_hand(self) -> bool:
        """Is the symbol table read, or cached (loaded in a few bulk copies)?
        A large file's first read is slow here (node's: 0.4 s and 25 MiB at a
        cold start), where blazesym's helper names it in milliseconds."""
        if self._symbols is not None:
            return True
        if self._symbols_cached is None:  # asked once: a run does not cache a table it does not read
            self._fetch_debug_file()
            self._symbols_cached = cache.has_symbols(self.names_key())
        return self._symbols_cached

    def dwarf_covers(self, vaddr: int) -> bool:
        """(A file with DWARF.) May its DWARF describe vaddr? Where it does
        not, blazesym names the address by the symbol table, as this file's
        own table does without the helper."""
        if self._dwarf_coverage is None:
            self._dwarf_coverage = dwarf_coverage(self.debug_handle() or self.handle)
        return self._dwarf_coverage.covers(vaddr)

    def _has_symtab(self) -> bool:
        """Does the file keep its full symbol table (not stripped)?"""
        try:
            return any(section.kind == elf_format.SHT_SYMTAB for section in elf_format.section_headers(self.handle))
        except PARSE_ERRORS:
            return True  # nothing to fetch for a file that cannot be read

    def function_start(self, vaddr: int) -> int | None:
        """Where the function holding vaddr begins, from the unwind tables
        (for code no symbol names: its frames stay apart as file+0x…)."""
        if self._function_starts is None:
            from profiler.native import library  # noqa: PLC0415  (cffi, only when a name is missing)

            try:
                self._function_starts = library.function_starts(self.handle.fileno())
            except (OSError, library.NativeUnavailable):
                self._function_starts = array.array("I")
        index = bisect.bisect_right(self._function_starts, vaddr) - 1
        return self._function_starts[index] if index >= 0 else None

    def _read_all_symbols(self) -> tuple[SymbolTable, bool]:
        """The symbols, and whether the debug file (if any) was read with them.
        The debug file was found inside a process's root, which goes with the
        process: the host's file of the same build-id serves then."""
        if not self.debug_file:
            return read_symbols(self.handle), True
        for root in dict.fromkeys([self.debug_root, ""]):
            try:
                with _open_elf_file(self.debug_file, root) as debug_handle:
                    if root != self.debug_root and _build_id_of(debug_handle) != self.build_id:
                        continue
                    debug_handle.seek(0)
                    return read_symbols(self.handle, debug_handle), True
            except (OSError, ValueError):
                continue
        return read_symbols(self.handle), False

    def linkage(self) -> SymbolTable:
        """PLT stubs (`func@plt`) and a program's entry point (`_start`):
        names symbol tables do not give."""
        if self._linkage is None:
            try:
                found = sorted(linkage_symbols(self.handle))
            except PARSE_ERRORS:
                found = []
            self._linkage = SymbolTable.of(
                [start for start, _size, _name in found],
                [size for _start, size, _name in found],
                [name for _start, _size, name in found],
            )
        return self._linkage

    def go_functions(self) -> GoFunctions | None:
        """A Go program's functions from .gopclntab (kept when stripped)."""
        if not self._go_read:
            from profiler.native.gopclntab import read_go_functions  # noqa: PLC0415  (off the start's path)

            self._go_read = True
            try:
                self._go_functions = read_go_functions(self.handle)
            except PARSE_ERRORS:
                self._go_functions = None
        return self._go_functions

    def debug_handle(self) -> BinaryIO | None:
        """The separate debug file, opened (safely, once) and kept open with
        the image: DWARF lines and inlined functions are read from it."""
        if not self._debug_tried:
            self._debug_tried = True
            self._fetch_debug_file()
            for root in dict.fromkeys([self.debug_root, ""]) if self.debug_file else ():
                try:
                    handle = _open_elf_file(self.debug_file, root)
                except OSError:
                    continue
                try:
                    same_build = root == self.debug_root or _build_id_of(handle) == self.build_id
                except ValueError:
                    same_build = False
                if same_build:
                    handle.seek(0)
                    self._debug_handle = handle
                    break
                handle.close()
        return self._debug_handle

    def _fetch_debug_file(self) -> None:
        """A stripped file's debug file from debuginfod, when one is configured."""
        if not self.debug_file and self.build_id and debuginfod.configured() and not self._has_symtab():
            fetched = debuginfod.debug_file(self.build_id, _build_id_of)
            if fetched is not None:
                self.debug_file, self.debug_root = str(fetched), ""

    def close(self) -> None:
        self.handle.close()
        if self._debug_handle is not None:
            self._debug_handle.close()


def open_elf(candidates: list[str], display_path: str, root: str = "") -> ElfImage:
    """Open the first readable candidate path as an ELF image; root is the
    target's filesystem root (/proc/PID/root) for finding debug files."""
    last_error: Exception | None = None
    opened = False
    for candidate in candidates:
        try:
            # kept open deliberately
            inside = bool(root) and candidate.startswith(root + "/")
            handle = _open_elf_file(candidate[len(root) :], root) if inside else _open_elf_file(candidate, "")
        except OSError as error:
            last_error = error
            continue
        try:
            image = _image_from_handle(handle, display_path)
            image.debug_file, image.debug_root = find_debug_file(image.build_id, root)
            return image
        except UnreadableElf as error:
            handle.close()
            last_error = error
            opened = True
    raise UnreadableElf(f"{display_path}: {last_error}", opened)


def _image_from_handle(handle: BinaryIO, display_path: str) -> ElfImage:
    info = os.fstat(handle.fileno())
    if not stat.S_ISREG(info.st_mode):
        raise UnreadableElf("not a regular file")
    if info.st_size > MAX_ELF_BYTES:
        raise UnreadableElf(f"{info.st_size} bytes is over the {MAX_ELF_BYTES} byte limit")
    try:
        segments, build_id = elf_format.read_load_segments_and_build_id(handle)
    except PARSE_ERRORS as error:
        raise UnreadableElf(str(error)) from error
    return ElfImage(display_path, handle, build_id, segments, cache_key_for(build_id, info), size=info.st_size)


MAX_VDSO_BYTES = 1 << 20
AT_SYSINFO_EHDR = 33  # getauxval: where the kernel mapped the vDSO


def vdso_image() -> ElfImage | None:
    """The kernel's vDSO, as mapped into every process on this kernel: read
    from jitprof's own memory into a private file, for its unwind rows (its
    code keeps no frame pointers) and its symbols (__vdso_clock_gettime)."""
    import ctypes  # noqa: PLC0415  (only for this)

    try:
        getauxval = ctypes.CDLL(None).getauxval
    except (OSError, AttributeError):
        return None
    getauxval.restype = ctypes.c_ulong
    address = getauxval(ctypes.c_ulong(AT_SYSINFO_EHDR))
    size = 0
    with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
        for line in maps:
            if line.rstrip().endswith("[vdso]"):
                start, _, end = line.split(" ", 1)[0].partition("-")
                if int(start, 16) == address:
                    size = int(end, 16) - address
    if not address or not 0 < size <= MAX_VDSO_BYTES:
        return None
    descriptor = os.memfd_create("jitprof-vdso", os.MFD_CLOEXEC)
    handle = os.fdopen(descriptor, "w+b")
    handle.write(ctypes.string_at(address, size))
    handle.flush()
    handle.seek(0)
    try:
        image = _image_from_handle(handle, "[vdso]")  # type: ignore[arg-type]
    except UnreadableElf:
        handle.close()
        return None
    if image.build_id:  # the kernel's own code, built once per kernel
        image.cache_key = f"b-{image.build_id}"
    return image


def cache_key_for(build_id: str, info: os.stat_result) -> str:
    """A system file (root's, writable by no one else) is cached by its
    build-id, shared by every copy; any other file by its identity, which
    its owner cannot make equal to another file's, so a build-id copied into
    a user's library cannot poison the entry of the system's."""
    system_file = info.st_uid == 0 and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if build_id and system_file:
        return f"b-{build_id}"
    identity = f"{info.st_dev}\0{info.st_ino}\0{info.st_size}\0{info.st_mtime_ns}\0{info.st_ctime_ns}\0{build_id}".encode()
    return "f-" + hashlib.sha256(identity).hexdigest()[:40]


def _build_id_of(handle: BinaryIO) -> str:
    """The build-id of a file a server sent; ValueError if it is not ELF."""
    try:
        return elf_format.build_id(handle)
    except PARSE_ERRORS as error:
        raise ValueError(str(error)) from error


def _open_elf_file(path: str, root: str) -> BinaryIO:
    """A file a target may control, opened safely: inside its filesystem
    root (/proc/PID/root) when root is given, else on the host."""
    return files.open_in_root(root, path, MAX_ELF_BYTES) if root else files.open_regular(path, MAX_ELF_BYTES)


def find_debug_file(build_id: str, root: str = "") -> tuple[str, str]:
    """The distribution's detached debug file for a build-id (e.g. libc6-dbg):
    (its path, the target's root it is inside, or "" for the host's)."""
    if len(build_id) < 3:
        return "", ""
    relative = f"/usr/lib/debug/.build-id/{build_id[:2]}/{build_id[2:]}.debug"
    for base in ([root] if root else []) + [""]:
        try:
            with _open_elf_file(relative, base):
                return relative, base
        except OSError:
            continue
    return "", ""


def symbols_by_build_id(build_id: str) -> SymbolTable | None:
    """The symbols of a build's debug file, installed or from debuginfod
    (for naming frames after the run: jitprof report)."""
    path, root = find_debug_file(build_id)
    if not path:
        fetched = debuginfod.debug_file(build_id, _build_id_of)
        path, root = (str(fetched), "") if fetched is not None else ("", "")
    if not path:
        return None
    try:
        with _open_elf_file(path, root) as handle:
            return read_symbols(handle)
    except PARSE_ERRORS:
        return None


def read_symbols(*handles: BinaryIO) -> SymbolTable:
    """Function symbols from .symtab and .dynsym of the file (and its debug
    file, which has the local symbols a stripped library lacks)."""
    by_start: dict[int, tuple[tuple[int, int, int], str]] = {}
    for handle in handles:
        _collect_symbols(handle, by_start)
    starts = sorted(by_start)
    sizes = [by_start[start][0][0] for start in starts]
    # A symbol of unknown size (assembly, _init/_fini) ends at the next one.
    for index in range(len(starts) - 1):
        sizes[index] = min(sizes[index], starts[index + 1] - starts[index]) or sizes[index]
    names = [by_start[start][1] for start in starts]
    return SymbolTable.of(starts, sizes, names)


def _collect_symbols(handle: BinaryIO, by_start: dict[int, tuple[tuple[int, int, int], str]]) -> None:
    try:
        header = elf_format.read_header(handle)
        if header.elf_class != elf_format.ELFCLASS64:
            return
        sections = elf_format.section_headers(handle, header)
    except PARSE_ERRORS as error:  # a damaged header or section table: the file says nothing usable
        raise UnreadableElf(f"{type(error).__name__}: {error}") from error
    tables = [section for section in sections if section.kind in (elf_format.SHT_SYMTAB, elf_format.SHT_DYNSYM)]
    tables.sort(key=lambda section: section.kind != elf_format.SHT_SYMTAB)  # .symtab first, as it names more
    entries_left = MAX_SYMBOL_ENTRIES
    for section in tables:
        if not 0 < section.link < len(sections) or entries_left <= 0:
            continue
        try:
            data = elf_format.section_data(handle, header, section, entries_left * ELF64_SYMBOL.size)
            strings = elf_format.section_data(handle, header, sections[section.link], MAX_STRING_TABLE_BYTES)
        except PARSE_ERRORS:
            continue
        usable = len(data) - len(data) % ELF64_SYMBOL.size
        entries_left -= usable // ELF64_SYMBOL.size
        for name_offset, info, _other, section_index, value, size in ELF64_SYMBOL.iter_unpack(data[:usable]):
            symbol_type = info & 0xF
            if symbol_type not in (STT_FUNC, STT_GNU_IFUNC) or value == 0 or section_index == 0:
                continue
            if size == 0:
                size = _size_to_section_end(sections, section_index, value)
            end = strings.find(b"\0", name_offset)
            name = strings[name_offset : end if end >= 0 else len(strings)].decode("utf-8", "replace")
            # Of aliases at one address keep the largest, then the public
            # name (getpid over __getpid).
            rank = (size, -(len(name) - len(name.lstrip("_"))), BINDING_RANK.get(info >> 4, 0))
            existing = by_start.get(value)
            if existing is not None and existing[0] >= rank:
                continue
            by_start[value] = (rank, name)


def _size_to_section_end(sections: list[elf_format.SectionHeader], section_index: int, value: int) -> int:
    """Size of an unsized symbol: at most up to the end of its section."""
    if section_index >= len(sections):
        return 0
    section = sections[section_index]
    return max(section.address + section.size - value, 0)
