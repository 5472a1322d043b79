"""native/, our C library, reached through cffi: the unwind-table compiler
and the walker that finishes stack walks from a copy of the stack.

The library is built by `make setup` (native/Makefile) next to its source. A
missing or stale build is an error with the fix, never a silent fallback to
a slower path. cffi releases the GIL during each call, so a table compiles
on a builder thread while sampling goes on.
"""

from __future__ import annotations

import array
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiler.errors import JitprofError
from profiler.native.cffi_declarations import parsed_ffi, write_parsed

NATIVE_DIR = Path(__file__).resolve().parents[2] / "native"
LIBRARY_PATH = NATIVE_DIR / "build" / "libjitprof_native.so"
HEADER_PATH = NATIVE_DIR / "jitprof_native.h"
ABI_HEADER_PATH = NATIVE_DIR.parent / "bpf" / "jitprof_abi.h"
# cffi's declarations parsed by set-up (out-of-line ABI mode): parsing them
# at every start took 20 ms, holding the GIL the BPF load needs.
DECLARATIONS_MODULE = "jitprof_cffi_declarations"

ERRORS = {1: "not an ELF file", 2: "not an x86-64 ELF64 file", 3: "too large", 4: "cannot be read", 5: "out of memory"}

_lock = threading.Lock()
_loaded: tuple[Any, Any] | None = None


class NativeUnavailable(JitprofError):
    pass


@dataclass(frozen=True)
class CompiledRows:
    """A file's unwind rows compiled for the walker, and what failed."""

    packed: bytes  # rows in the BPF walker's layout
    fdes: int
    failed_fdes: int
    malformed: int


# The kernel's integer types, as jitprof_abi.h uses them.
_KERNEL_TYPES = "".join(
    f"typedef {kind}_t __{name};\n"
    for kind, name in (
        ("uint8", "u8"),
        ("uint16", "u16"),
        ("uint32", "u32"),
        ("uint64", "u64"),
        ("int16", "s16"),
        ("int32", "s32"),
        ("int64", "s64"),
    )
)


def _declarations() -> str:
    """What cffi is told: the shared part of jitprof_abi.h, then the library's own."""
    parts = [_KERNEL_TYPES]
    for path in (ABI_HEADER_PATH, HEADER_PATH):
        text = path.read_text()
        parts.append(text[text.index("/* cffi-begin */") + len("/* cffi-begin */") : text.index("/* cffi-end */")])
    return "\n".join(parts)


def check_built() -> None:
    """The library is built and current, or NativeUnavailable with the fix.
    (Cheap: what needs only its BPF calls, through ctypes, asks no more.)"""
    if not LIBRARY_PATH.is_file():
        raise NativeUnavailable(f"jitprof's native library is not built ({LIBRARY_PATH})", "run `make setup`")
    sources = [path for path in NATIVE_DIR.glob("*.[ch]") if not path.name.startswith("fuzz_")]
    # The headers shared with the BPF program (its own parts, *.bpf.h, are not built in).
    sources += [path for path in ABI_HEADER_PATH.parent.glob("*.h") if not path.name.endswith(".bpf.h")]
    if LIBRARY_PATH.stat().st_mtime < max(path.stat().st_mtime for path in sources):
        raise NativeUnavailable(f"jitprof's native library is older than its source ({LIBRARY_PATH})", "run `make setup`")


def load() -> tuple[Any, Any]:
    """(ffi, lib), loaded once per process."""
    global _loaded
    with _lock:
        if _loaded is None:
            try:
                import cffi  # noqa: F401, PLC0415  (missing: one error with the fix, not an ImportError later)
            except ImportError as error:
                raise NativeUnavailable("the cffi module is missing", "run `make setup`") from error
            check_built()
            ffi = parsed_ffi(LIBRARY_PATH.parent, DECLARATIONS_MODULE, _declarations())
            try:
                lib = ffi.dlopen(str(LIBRARY_PATH))
            except OSError as error:
                raise NativeUnavailable(f"cannot load {LIBRARY_PATH}: {error}", "run `make setup`") from error
            _loaded = (ffi, lib)
        return _loaded


def write_parsed_declarations() -> Path:
    """(Set-up.) native/'s declarations parsed once."""
    return write_parsed(LIBRARY_PATH.parent, DECLARATIONS_MODULE, _declarations())


def compile_unwind_rows(descriptor: int) -> CompiledRows:
    """Rows for the ELF file open at descriptor (read from its start)."""
    ffi, lib = load()
    rows = ffi.new("struct unwind_row **")
    count = ffi.new("uint64_t *")
    stats = ffi.new("struct jp_table_stats *")
    result = lib.jp_unwind_rows(descriptor, rows, count, stats)
    if result == lib.JP_UNSUPPORTED:  # not x86-64 code: nothing the walker could use
        return CompiledRows(b"", 0, 0, 0)
    if result != lib.JP_OK:
        raise OSError(f"unwind table: {ERRORS.get(result, f'error {result}')}")
    try:
        packed = bytes(ffi.buffer(rows[0], count[0] * ffi.sizeof("struct unwind_row"))) if count[0] else b""
    finally:
        lib.jp_free(rows[0])
    return CompiledRows(packed, stats.fdes, stats.failed, stats.malformed)


def function_starts(descriptor: int) -> array.array:
    """Where the functions of the ELF file open at descriptor begin (file
    addresses of its FDEs), sorted, each once."""
    ffi, lib = load()
    starts = ffi.new("uint32_t **")
    count = ffi.new("uint64_t *")
    result = lib.jp_function_starts(descriptor, starts, count)
    try:
        if result != lib.JP_OK:
            return array.array("I")
        found = array.array("I")
        found.frombytes(bytes(ffi.buffer(starts[0], count[0] * 4)))
    finally:
        lib.jp_free(starts[0])
    return array.array("I", sorted(set(found)))


def rows_valid(packed: bytes) -> bool:
    """Are these packed rows as the compiler writes them (see jp_rows_valid)?"""
    ffi, lib = load()
    size = ffi.sizeof("struct unwind_row")
    if len(packed) % size:
        return False
    if not packed:
        return True
    return bool(lib.jp_rows_valid(ffi.cast("const struct unwind_row *", ffi.from_buffer(packed)), len(packed) // size))


# jitprof_abi.h's mapping kinds (tests/kernel/test_abi.py checks them).
MAPPING_ELF = 1
MAPPING_JIT = 2
MAPPING_PENDING = 3  # MAPPING_ELF_PENDING
WALK_PENDING = 64  # jitprof_native.h: JP_WALK_PENDING


@dataclass(frozen=True)
class WalkMapping:
    """A mapping as the user-space walker steps through it."""

    start: int
    end: int
    load_bias: int
    kind: int  # MAPPING_*
    rows: bytes = b""  # packed rows (unwind_rows.ROW_FORMAT); none: frame-pointer steps


@dataclass(frozen=True)
class WalkStack:
    """The copy of a stack a walk goes over."""

    data: bytes
    address: int  # of data[0]
    reached_end: bool  # memory beyond data was not readable
    holes: int = 0  # bit i set: data's page i was not readable (data starts at a page)


@dataclass(frozen=True)
class WalkRegisters:
    """The registers a walk resumes from."""

    pc: int
    sp: int
    fp: int
    exact_pc: bool
    rbx: int = 0  # 0: not known


@dataclass(frozen=True)
class WalkResult:
    """The frames a walk found and how it ended."""

    frames: tuple[int, ...]
    end: int  # a WalkEnd value, or WALK_PENDING
    pending_address: int | None = None  # WALK_PENDING: the address in the mapping it waits for
    frame_pointers: tuple[int, ...] = ()  # each frame's frame pointer


def walk_copy(mappings: list[WalkMapping], stack: WalkStack, start: WalkRegisters, max_frames: int) -> WalkResult:
    """Walk a stack copy with the kernel walker's rules (native/walk.c);
    mappings sorted by start, not overlapping."""
    ffi, lib = load()
    row_size = ffi.sizeof("struct unwind_row")
    table = ffi.new("struct jp_walk_mapping[]", max(len(mappings), 1))
    keep_alive = []
    for index, mapping in enumerate(mappings):
        slot = table[index]
        slot.start, slot.end, slot.kind = mapping.start, mapping.end, mapping.kind
        slot.load_bias = mapping.load_bias & 0xFFFFFFFFFFFFFFFF
        if mapping.rows:
            rows = ffi.from_buffer(mapping.rows)
            keep_alive.append(rows)
            slot.rows = ffi.cast("const struct unwind_row *", rows)
            slot.row_count = len(mapping.rows) // row_size
    data = ffi.from_buffer(stack.data)
    copy = ffi.new(
        "struct jp_walk_stack *",
        {
            "bytes": ffi.cast("const uint8_t *", data),
            "length": len(stack.data),
            "address": stack.address,
            "reached_end": int(stack.reached_end),
            "holes": stack.holes & 0xFFFFFFFF,
        },
    )
    registers = ffi.new(
        "struct jp_walk_registers *",
        {"pc": start.pc, "sp": start.sp, "fp": start.fp, "rbx": start.rbx, "exact_pc": int(start.exact_pc)},
    )
    limit = max(max_frames, 0)
    frames = ffi.new("uint64_t[]", max(limit, 1))
    frame_pointers = ffi.new("uint64_t[]", max(limit, 1))
    count = ffi.new("uint32_t *")
    end = lib.jp_walk_copy(table, len(mappings), copy, registers, frames, frame_pointers, limit, count)
    pending = int(frames[count[0]]) if end == WALK_PENDING and count[0] < limit else None
    return WalkResult(tuple(frames[0 : count[0]]), end, pending, tuple(frame_pointers[0 : count[0]]))


def compile_unwind_rows_of(path: str | os.PathLike[str]) -> CompiledRows:
    descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        return compile_unwind_rows(descriptor)
    finally:
        os.close(descriptor)


@dataclass(frozen=True)
class MappedPosition:
    """Where a generated position came from (0-based), by index into the
    map's sources and names; name -1: none."""

    source: int
    line: int
    column: int
    name: int
    generated_column: int  # where the segment found begins on its line


class MalformedMappings(ValueError):
    pass


def source_map_lookup(
    mappings: bytes, source_count: int, name_count: int, positions: list[tuple[int, int]]
) -> list[MappedPosition | None]:
    """The original of each generated (line, column), 0-based, sorted, from
    a source map's `mappings` (native/source_map.c); None where nothing is
    mapped. MalformedMappings if the string is not a valid one."""
    ffi, lib = load()
    if not positions:
        return []
    queries = ffi.new("struct jp_generated[]", [{"line": line, "column": column} for line, column in positions])
    results = ffi.new("struct jp_original[]", len(positions))
    text = ffi.from_buffer(mappings)
    code = lib.jp_source_map_lookup(
        ffi.cast("const uint8_t *", text), len(mappings), source_count, name_count, queries, len(positions), results
    )
    if code == lib.JP_SOURCE_MAP_UNSORTED:
        raise ValueError("positions must be sorted")
    if code != lib.JP_OK:
        raise MalformedMappings("malformed mappings")
    return [
        MappedPosition(result.source, result.line, result.column, result.name, result.generated_column)
        if result.source >= 0
        else None
        for result in results
    ]


if __name__ == "__main__":
    print(f"setup: wrote {write_parsed_declarations().name}", file=sys.stderr)
