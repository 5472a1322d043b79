"""Which addresses a file's DWARF describes (.debug_aranges), on files
built here: a program of one unit with DWARF and one without, as node is
(libuv's units only); ranges that do not cover every unit, or that this
reader cannot read, count as DWARF everywhere."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from profiler.native.dwarf_coverage import _address_ranges, dwarf_coverage
from tests.hostile_elf import symbol_address

WITH_DWARF = "int with_dwarf(int x) { return x * 3 + 1; }\n"
WITHOUT_DWARF = "int with_dwarf(int);\nint without_dwarf(int x) { return x * 2; }\nint main(int c, char **v) { return with_dwarf(c) + without_dwarf(c); }\n"


def build(directory: Path, *dwarf_flags: str) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    (directory / "a.c").write_text(WITH_DWARF)
    (directory / "b.c").write_text(WITHOUT_DWARF)
    subprocess.run(["gcc", "-O1", "-c", *dwarf_flags, "-o", directory / "a.o", directory / "a.c"], check=True)
    subprocess.run(["gcc", "-O1", "-g0", "-c", "-o", directory / "b.o", directory / "b.c"], check=True)
    program = directory / "program"
    subprocess.run(["gcc", *dwarf_flags, "-o", program, directory / "a.o", directory / "b.o"], check=True)
    return program


def coverage_of(program: Path):  # noqa: ANN201
    with program.open("rb") as handle:
        return dwarf_coverage(handle)


def test_only_the_unit_with_dwarf_is_covered(tmp_path: Path) -> None:
    program = build(tmp_path, "-g")
    coverage = coverage_of(program)
    assert not coverage.everywhere
    assert coverage.covers(symbol_address(program, "with_dwarf"))
    assert not coverage.covers(symbol_address(program, "without_dwarf"))
    assert not coverage.covers(symbol_address(program, "main"))


def test_without_aranges_or_with_compressed_sections_dwarf_is_everywhere(tmp_path: Path) -> None:
    program = build(tmp_path, "-g")
    stripped = tmp_path / "no-aranges"
    subprocess.run(["objcopy", "--remove-section=.debug_aranges", program, stripped], check=True)
    assert coverage_of(stripped).everywhere
    compressed = tmp_path / "compressed"
    subprocess.run(["objcopy", "--compress-debug-sections=zlib", program, compressed], check=True)
    assert coverage_of(compressed).everywhere
    assert coverage_of(Path("/bin/true")).everywhere  # no DWARF at all: the caller asks has_dwarf first


def aranges_set(unit: int, pairs: list[tuple[int, int]], address_size: int = 8) -> bytes:
    body = struct.pack("<HIBB", 2, unit, address_size, 0) + b"\0" * 4  # padded to 16 from the set's start
    body += b"".join(struct.pack("<QQ", start, size) for start, size in pairs) + struct.pack("<QQ", 0, 0)
    return struct.pack("<I", len(body)) + body


def test_sets_are_read_by_their_units_and_damage_is_refused() -> None:
    data = aranges_set(0, [(0x1000, 0x10), (0x2000, 0x20)]) + aranges_set(0x40, [(0x3000, 8)])
    assert _address_ranges(data) == {0: [(0x1000, 0x1010), (0x2000, 0x2020)], 0x40: [(0x3000, 0x3008)]}
    assert _address_ranges(data[:-8]) is None  # a set running past the section
    assert _address_ranges(aranges_set(0, [(0x1000, 0x10)], address_size=4)) is None
    assert _address_ranges(struct.pack("<I", 0xFFFFFFF5)) is None  # a reserved length
    assert _address_ranges(b"\x01\x00") is None
