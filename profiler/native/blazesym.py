"""blazesym's C API through cffi: function names (demangled), source lines
and inlined functions of native code, from a file's symbols and DWARF.

The library and its header are built by `make setup` (native/Makefile, cargo
from crates.io) next to native/. jitprof opens every target's file itself and
hands blazesym /proc/self/fd/N of the file it holds open: a path no target
can swap. A symbolizer keeps every file it parsed until it is freed (the C
API has no evict), so `BlazesymLocator` starts a new one once files it read
have been closed. It runs in the helper process of locator_process, never in
jitprof's own: a file blazesym crashes, hangs or blows up on costs that
file's names only.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from profiler.native.cffi_declarations import parsed_ffi, write_parsed
from profiler.native.library import NATIVE_DIR, NativeUnavailable

LIBRARY_PATH = NATIVE_DIR / "build" / "libjitprof_blazesym.so"
DECLARATIONS_MODULE = "jitprof_cffi_blazesym"
HEADER_PATH = NATIVE_DIR / "build" / "blazesym.h"
REASON_SUCCESS = 0
MAX_NAME_BYTES = 4096  # a template's demangled name can be huge: cut, never kept whole
MAX_FILES_BEFORE_RENEW = 64  # closed files a symbolizer may still hold before it is renewed
# And what it parsed and mapped goes this often (the pages of DWARF it read
# count in our RSS: 10 MiB of libpython's in minutes of --all). Addresses
# once named stay memoised by the symbolizer: only new ones parse again
# (node's first lookup takes 50 ms, libpython's 11).
RENEW_AFTER_S = 120.0

_lock = threading.Lock()
_loaded: tuple[Any, Any] | None = None


@dataclass(frozen=True)
class SourcePlace:
    """A file, line and column from debug information."""

    file: str  # as the debug info has it: directory/file when both are known
    line: int
    column: int


@dataclass(frozen=True)
class InlinedCall:
    """A function inlined at an address, and where its next call is."""

    name: str
    place: SourcePlace | None  # where in this function the next one in (or the address) is
    start_line: int = 0  # the line the function begins on, where known (Go's inline tree has it)


@dataclass(frozen=True)
class NativeSymbol:
    """One address: its function, and the functions the compiler inlined
    there, outermost first."""

    name: str
    start: int  # the function's first address (file virtual address)
    place: SourcePlace | None  # in the function: the line executing, or the call of the first inlined one
    inlined: tuple[InlinedCall, ...]


# blazesym's demangler reads any name as a mangled one, and a one-letter C
# name is a builtin type's code in the Itanium scheme: C's `a`, `b` and `c`
# come back as "signed char", "bool" and "char". No function is named so:
# those are the letters again.
_ITANIUM_BUILTIN_TYPES = {
    "void": "v",
    "wchar_t": "w",
    "bool": "b",
    "char": "c",
    "signed char": "a",
    "unsigned char": "h",
    "short": "s",
    "unsigned short": "t",
    "int": "i",
    "unsigned int": "j",
    "long": "l",
    "unsigned long": "m",
    "long long": "x",
    "unsigned long long": "y",
    "__int128": "n",
    "unsigned __int128": "o",
    "float": "f",
    "double": "d",
    "long double": "e",
    "__float128": "g",
    "...": "z",
}


def _undo_type_name(name: str) -> str:
    return _ITANIUM_BUILTIN_TYPES.get(name, name)


_SYMBOL_VERSION = re.compile(r"@@?[A-Za-z_][\w.]*$")
_GLIBC_ALIAS = re.compile(r"^__[GE]I_(?=[A-Za-z_])")


def _symbol_name(name: str) -> str:
    """A symbol table's name as people know the function: without its
    version (`fopencookie@@GLIBC_2.2.5`) or glibc's internal alias prefix
    (`__GI___pthread_mutex_lock`), which blazesym may pick of the aliases."""
    return _GLIBC_ALIAS.sub("", _SYMBOL_VERSION.sub("", _undo_type_name(name)))


def _declarations(header: str) -> str:
    """The header as cffi's cdef takes it: no preprocessor lines but the
    integer #defines, no C++ guards."""
    header = re.sub(r"#ifdef __cplusplus.*?#endif[^\n]*\n", "", header, flags=re.S)
    kept = []
    for line in header.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            if re.fullmatch(r"#define BLAZE_\w+ -?\d+", stripped):
                kept.append(stripped)
            continue
        kept.append(line)
    return "\n".join(kept)


# What native/blazesym exports beside the C API: blazesym's demangler, for
# names that do not come from a symbolization.
_JITPROF_DECLARATIONS = """
char *jitprof_demangle(const char *name);
void jitprof_demangle_free(char *text);
"""


def _all_declarations() -> str:
    return _declarations(HEADER_PATH.read_text()) + _JITPROF_DECLARATIONS


def write_parsed_declarations() -> Path:
    """(Set-up.) The C API's declarations parsed once (the helper parsed them at its every start: 30 ms)."""
    return write_parsed(LIBRARY_PATH.parent, DECLARATIONS_MODULE, _all_declarations())


def _load() -> tuple[Any, Any]:
    global _loaded
    with _lock:
        if _loaded is None:
            if not LIBRARY_PATH.exists() or not HEADER_PATH.exists():
                raise NativeUnavailable(f"{LIBRARY_PATH} is not built; run `make setup` (it builds native/ with cargo)")
            ffi = parsed_ffi(LIBRARY_PATH.parent, DECLARATIONS_MODULE, _all_declarations())
            try:
                library = ffi.dlopen(str(LIBRARY_PATH))
            except OSError as error:
                raise NativeUnavailable(f"cannot load {LIBRARY_PATH}: {error}; run `make setup`") from error
            _loaded = (ffi, library)
        return _loaded


def _text(ffi: Any, pointer: Any) -> str:
    if pointer == ffi.NULL:
        return ""
    return ffi.string(pointer, MAX_NAME_BYTES).decode("utf-8", "replace")


def _place(ffi: Any, info: Any) -> SourcePlace | None:
    file = _text(ffi, info.file)
    if not file or info.line == 0:
        return None
    directory = _text(ffi, info.dir)
    path = f"{directory.rstrip('/')}/{file}" if directory and not file.startswith("/") else file
    return SourcePlace(path, int(info.line), int(info.column))


def demangle(name: str) -> str | None:
    """A mangled C++ or Rust name as blazesym writes it when it symbolizes
    (Rust without its hash); None when it is not one. NativeUnavailable when
    the library is not built."""
    ffi, library = _load()
    text = library.jitprof_demangle(name.encode("utf-8", "surrogateescape"))
    if text == ffi.NULL:
        return None
    try:
        return ffi.string(text).decode("utf-8", "replace")
    finally:
        library.jitprof_demangle_free(text)


class BlazesymLocator:
    """Names addresses of opened ELF files, in this process: only inside the
    confined helper (locator_process), since blazesym maps and parses files
    a target controls. One caller at a time (blazesym's objects do no
    locking)."""

    def __init__(self) -> None:
        self._ffi, self._library = _load()
        self._symbolizer: Any = None
        self._read: set[BinaryIO] = set()  # the files the current symbolizer parsed
        self._lock = threading.Lock()
        self._born = 0.0
        self.renewals = 0

    def _current(self) -> Any:
        closed = sum(1 for handle in self._read if handle.closed)
        worn = closed and (closed >= MAX_FILES_BEFORE_RENEW or closed * 2 >= len(self._read))
        if self._symbolizer is not None and (worn or time.monotonic() - self._born >= RENEW_AFTER_S):
            self._library.blaze_symbolizer_free(self._symbolizer)
            self._symbolizer = None
            self._read.clear()
            self.renewals += 1
        if self._symbolizer is None:
            options = self._ffi.new("blaze_symbolizer_opts *")
            options.type_size = self._ffi.sizeof("blaze_symbolizer_opts")
            options.auto_reload = False
            options.code_info = True
            options.inlined_fns = True
            options.demangle = True  # C++ (Itanium) and Rust (legacy and v0)
            self._symbolizer = self._library.blaze_symbolizer_new_opts(options)
            self._born = time.monotonic()
            if self._symbolizer == self._ffi.NULL:
                self._symbolizer = None
                raise NativeUnavailable(f"blazesym: {self._error()}")
        return self._symbolizer

    def _error(self) -> str:
        return _text(self._ffi, self._library.blaze_err_str(self._library.blaze_err_last()))

    def locate(self, handle: BinaryIO, vaddrs: list[int]) -> list[NativeSymbol | None]:
        """The symbols at file virtual addresses of the open file; None where
        blazesym names nothing. OSError when the file cannot be read.

        A function is named by the symbol table, as perf and addr2line name it
        (DWARF drops the clone suffixes `.part.0`, `.cold`, `.isra.0` and
        picks other aliases); its lines and inlined functions come from DWARF."""
        if not vaddrs:
            return []
        with self._lock:
            named = self._symbolize(handle, vaddrs, debug_syms=False)
            placed = self._symbolize(handle, vaddrs, debug_syms=True)
        located: list[NativeSymbol | None] = []
        for by_symbol, by_dwarf in zip(named, placed, strict=True):
            if by_symbol is not None and by_dwarf is not None:
                by_dwarf = NativeSymbol(by_symbol.name, by_symbol.start, by_dwarf.place, by_dwarf.inlined)
            located.append(by_dwarf or by_symbol)
        return located

    def _symbolize(self, handle: BinaryIO, vaddrs: list[int], debug_syms: bool) -> list[NativeSymbol | None]:
        ffi, library = self._ffi, self._library
        symbolizer = self._current()
        self._read.add(handle)
        source = ffi.new("blaze_symbolize_src_elf *")
        source.type_size = ffi.sizeof("blaze_symbolize_src_elf")
        path = ffi.new("char[]", f"/proc/self/fd/{handle.fileno()}".encode())
        source.path = path
        source.debug_syms = debug_syms
        addresses = ffi.new("uint64_t[]", vaddrs)
        result = library.blaze_symbolize_elf_virt_offsets(symbolizer, source, addresses, len(vaddrs))
        if result == ffi.NULL:
            raise OSError(f"blazesym: {self._error()}")
        try:
            symbols = [self._symbol(result.syms[index]) for index in range(min(int(result.cnt), len(vaddrs)))]
        finally:
            library.blaze_syms_free(result)
        return symbols + [None] * (len(vaddrs) - len(symbols))

    def _symbol(self, sym: Any) -> NativeSymbol | None:
        ffi = self._ffi
        if sym.reason != REASON_SUCCESS or sym.name == ffi.NULL:
            return None
        inlined = tuple(
            InlinedCall(_undo_type_name(_text(ffi, sym.inlined[index].name)), _place(ffi, sym.inlined[index].code_info))
            for index in range(int(sym.inlined_cnt))
        )
        return NativeSymbol(_symbol_name(_text(ffi, sym.name)), int(sym.addr), _place(ffi, sym.code_info), inlined)

    def close(self) -> None:
        with self._lock:
            if self._symbolizer is not None:
                self._library.blaze_symbolizer_free(self._symbolizer)
                self._symbolizer = None
            self._read.clear()


if __name__ == "__main__":
    print(f"setup: wrote {write_parsed_declarations().name}", file=sys.stderr)
