"""ELF files an attacker would hand jitprof, made at test time from a small
C program: each one crashed, hung or blew up root's profiler before blazesym
ran in its confined helper."""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

from tests.helpers import read_uleb

# mix's loop is most of hot's time: the inlined frame is in most of its samples, not only where a sample happens to land.
HOT_SOURCE = r"""
#include <stdlib.h>
#include <time.h>
static volatile int sink;
static inline __attribute__((always_inline)) int mix(int x) { int r = x; for (int k = 0; k < 64; k++) r = r * 31 + k; return r + sink; }
__attribute__((noinline)) int hot(int n) { int s = 0; for (int i = 0; i < n; i++) s += mix(i); return s; }
int main(int argc, char **argv) {
    time_t end = time(NULL) + (argc > 1 ? atoi(argv[1]) : 0);
    do sink += hot(1000000); while (time(NULL) < end);
    return 0;
}
"""


def build(directory: Path, name: str, *flags: str, source: str = HOT_SOURCE) -> Path:
    source_path = directory / f"{name}.c"
    source_path.write_text(source)
    binary = directory / name
    subprocess.run(["gcc", "-O1", *flags, "-o", str(binary), str(source_path)], check=True)
    return binary


def section_offset(binary: Path, name: str) -> int:
    from elftools.elf.elffile import ELFFile  # noqa: PLC0415

    with binary.open("rb") as handle:
        section = ELFFile(handle).get_section_by_name(name)
        assert section is not None, name
        return int(section["sh_offset"])


def compressed_size_bomb(
    directory: Path, claimed: int = (1 << 64) - 1, source: str = HOT_SOURCE, flags: tuple[str, ...] | list[str] = ("-g",)
) -> Path:
    """-gz=zlib, its .debug_info's compression header claiming `claimed` bytes
    (blazesym 0.2 panics on 2^64-1, allocates 2^40)."""
    binary = build(directory, "zbomb", *flags, "-gz=zlib", source=source)
    offset = section_offset(binary, ".debug_info")
    with binary.open("r+b") as handle:
        handle.seek(offset + 8)  # Elf64_Chdr: ch_type, ch_reserved, then ch_size
        handle.write(struct.pack("<Q", claimed))
    return binary


def fifo_debuglink(directory: Path, source: str = HOT_SOURCE, flags: tuple[str, ...] | list[str] = ("-g",)) -> Path:
    """Debug info moved out to a file its .gnu_debuglink names, which is then
    replaced by a FIFO no one writes: opening it blocks for ever."""
    binary = build(directory, "linked", *flags, source=source)
    debug = directory / "linked.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(binary), str(debug)], check=True)
    subprocess.run(["objcopy", "--strip-debug", f"--add-gnu-debuglink={debug}", str(binary)], check=True, cwd=directory)
    debug.unlink()
    os.mkfifo(debug)
    return binary


def load_end(binary: Path) -> int:
    """Where the last loaded segment's bytes end in the file: past it are
    only sections no process maps (.symtab, .strtab, .debug_*)."""
    from elftools.elf.elffile import ELFFile  # noqa: PLC0415

    with binary.open("rb") as handle:
        return max(
            int(segment["p_offset"]) + int(segment["p_filesz"])
            for segment in ELFFile(handle).iter_segments()
            if segment["p_type"] == "PT_LOAD"
        )


def symbol_address(binary: Path, name: str) -> int:
    for line in subprocess.run(["nm", str(binary)], capture_output=True, text=True, check=True).stdout.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2] == name:
            return int(fields[0], 16)
    raise AssertionError(name)


def line_table_without_files(directory: Path, source: str = HOT_SOURCE, flags: tuple[str, ...] | list[str] = ("-g",)) -> Path:
    """-gdwarf-5, its line table's header listing no file names while every
    row names file 1: an index past the table, as DW_LNS_set_file 99 makes it
    (blazesym 0.2 panics)."""
    binary = build(directory, "nofiles", *flags, "-gdwarf-5", source=source)
    offset = section_offset(binary, ".debug_line")
    data = bytearray(binary.read_bytes())
    position = offset + 4  # unit_length (32-bit DWARF)
    version = struct.unpack_from("<H", data, position)[0]
    assert version == 5, version
    position += 2 + 1 + 1 + 4 + 1 + 1 + 1 + 1 + 1  # version .. line_range
    opcode_base = data[position]
    position += 1 + opcode_base - 1
    for _table in ("directories", "file names"):
        format_count = data[position]
        position += 1
        forms = []
        for _ in range(format_count):
            _content, position = read_uleb(data, position)
            form, position = read_uleb(data, position)
            forms.append(form)
        count_at = position
        count, position = read_uleb(data, position)
        if _table == "file names":
            assert data[count_at] == count and count >= 1, count  # a one-byte count
            data[count_at] = 0
            break
        sizes = {0x1F: 4, 0x0E: 4, 0x0B: 1, 0x05: 2, 0x1E: 16}  # line_strp, strp, data1, data2, data16
        position += count * sum(sizes[form] for form in forms)
    binary.write_bytes(bytes(data))
    return binary
