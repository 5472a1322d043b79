"""ELF files an attacker would hand jitprof, made at test time from a small
C program: each one crashed, hung or blew up root's profiler before blazesym
ran in its confined helper."""

from __future__ import annotations

import os
import struct
import subprocess
import zlib
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


def _text_range(binary: Path) -> tuple[int, int]:
    """The file addresses from the first function's start to the last one's end."""
    starts, ends = [], []
    listing = subprocess.run(["nm", "-S", "--defined-only", str(binary)], capture_output=True, text=True, check=True)
    for line in listing.stdout.splitlines():
        fields = line.split()
        if len(fields) == 4 and fields[2] in "Tt":
            starts.append(int(fields[0], 16))
            ends.append(int(fields[0], 16) + int(fields[1], 16))
    return min(starts), max(ends)


# The compile unit (name, low_pc, high_pc, stmt_list), a function's abstract
# and concrete entries, an inlined call, and a childless unit: all DWARF 4,
# addresses as DW_FORM_addr so that no linker arithmetic is needed.
_ABBREVIATIONS = """
    .section .debug_abbrev,"",@progbits
    .uleb128 1, 0x11
    .byte 1
    .uleb128 0x03, 0x08, 0x11, 0x01, 0x12, 0x01, 0x10, 0x17, 0, 0
    .uleb128 2, 0x2e
    .byte 0
    .uleb128 0x03, 0x08, 0x20, 0x0b, 0, 0
    .uleb128 3, 0x2e
    .byte 1
    .uleb128 0x03, 0x08, 0x11, 0x01, 0x12, 0x01, 0, 0
    .uleb128 4, 0x1d
    .byte 1
    .uleb128 0x31, 0x13, 0x11, 0x01, 0x12, 0x01, 0x58, 0x0b, 0x59, 0x0b, 0, 0
    .uleb128 5, 0x11
    .byte 0
    .uleb128 0x03, 0x08, 0x11, 0x01, 0x12, 0x01, 0, 0
    .byte 0
"""

# One sequence over [low, high): a row at low, `rows` rows at it each one
# line further (special opcode 19: line +1, address +0), then the end.
_LINE_PROGRAM = """
    .section .debug_line,"",@progbits
.Lline:
    .long .Lline_end - .Lline - 4
    .short 4
    .long .Lheader_end - .Lheader
.Lheader:
    .byte 1, 1, 1, -5, 14, 13
    .byte 0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1
    .byte 0
    .asciz "crafted.c"
    .uleb128 0, 0, 0
    .byte 0
.Lheader_end:
    .byte 0, 9, 2
    .quad {low}
    .byte 0x14
    .fill {rows}, 1, 19
    .byte 2
    .uleb128 {length}
    .byte 0, 1, 1
.Lline_end:
"""


# A DWARF 4 compile unit over the code, its line table at .Lline; its
# children and its end (.Lunit_end) follow.
_UNIT_START = """
    .section .debug_info,"",@progbits
.Lunit:
    .long .Lunit_end - .Lunit - 4
    .short 4
    .long 0
    .byte 8
    .uleb128 1
    .asciz "crafted.c"
    .quad {low}, {high}
    .long .Lline
"""


def _with_dwarf(directory: Path, name: str, source: str, flags: tuple[str, ...] | list[str], dwarf: str) -> Path:
    """The program built without debug info, then again with `dwarf` (an
    assembly text naming {low}, {high} and {length}, the text's range) as its
    only debug info; the loaded bytes do not move between the two links."""
    plain_flags = [flag for flag in flags if not flag.startswith("-g")]
    plain = build(directory, f"{name}-plain", "-g0", *plain_flags, source=source)
    low, high = _text_range(plain)
    plain.unlink()
    assembly = directory / f"{name}-dwarf.s"
    assembly.write_text(
        '    .section .note.GNU-stack,"",@progbits\n' + _ABBREVIATIONS + dwarf.format(low=low, high=high, length=high - low)
    )
    binary = build(directory, name, "-g0", *plain_flags, str(assembly), source=source)
    assert _text_range(binary) == (low, high)
    return binary


def deep_inlines(
    directory: Path, depth: int = 100_000, source: str = HOT_SOURCE, flags: tuple[str, ...] | list[str] = ()
) -> Path:
    """Every function's code inside `depth` nested inlined calls (blazesym
    0.2 recurses once per level: 5,000 survive, 20,000 overflow its stack)."""
    dwarf = (
        _UNIT_START
        + f""".Linlined:
    .uleb128 2
    .asciz "deep"
    .byte 1
    .uleb128 3
    .asciz "outer"
    .quad {{low}}, {{high}}
    .rept {depth}
    .uleb128 4
    .long .Linlined - .Lunit
    .quad {{low}}, {{high}}
    .byte 1, 7
    .endr
    .fill {depth + 2}, 1, 0
.Lunit_end:
"""
        + _LINE_PROGRAM.replace("{rows}", "1")
    )
    return _with_dwarf(directory, "deep", source, flags, dwarf)


def many_rows(directory: Path, rows: int = 50_000_000, source: str = HOT_SOURCE, flags: tuple[str, ...] | list[str] = ()) -> Path:
    """One line table of `rows` rows, a byte each, over the code (blazesym
    0.2 keeps every row: 1.25 GB for 50 M)."""
    dwarf = (
        _UNIT_START
        + """    .byte 0
.Lunit_end:
"""
        + _LINE_PROGRAM.replace("{rows}", str(rows))
    )
    return _with_dwarf(directory, "rows", source, flags, dwarf)


def many_units(
    directory: Path, units: int = 2_000_000, source: str = HOT_SOURCE, flags: tuple[str, ...] | list[str] = ()
) -> Path:
    """`units` tiny compile units, each claiming the whole code (blazesym
    0.2 keeps a record per unit: 1.92 GB for 2 M in 66 MB)."""
    dwarf = f"""
    .section .debug_info,"",@progbits
    .rept {units}
    .long 7 + 1 + 2 + 16
    .short 4
    .long 0
    .byte 8
    .uleb128 5
    .asciz "u"
    .quad {{low}}, {{high}}
    .endr
"""
    return _with_dwarf(directory, "units", source, flags, dwarf)


def sparse_debug_link(
    directory: Path, size: int = 200 << 30, source: str = HOT_SOURCE, flags: tuple[str, ...] | list[str] = ("-g",)
) -> Path:
    """Debug info moved out to the file its .gnu_debuglink names, which is
    then made `size` bytes long (sparse: it costs the disk nothing)."""
    binary = build(directory, "sparse", *flags, source=source)
    debug = directory / "sparse.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(binary), str(debug)], check=True)
    subprocess.run(["objcopy", "--strip-debug", f"--add-gnu-debuglink={debug}", str(binary)], check=True, cwd=directory)
    os.truncate(debug, size)
    return binary


def _zeros_compressed(size: int) -> bytes:
    """A zlib stream that inflates to `size` zero bytes, made without
    compressing them: a full flush makes each MiB's deflate block the same bytes."""
    mebibyte = 1 << 20
    assert size % mebibyte == 0
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(bytes(mebibyte)) + compressor.flush(zlib.Z_FULL_FLUSH)
    assert compressor.compress(bytes(mebibyte)) + compressor.flush(zlib.Z_FULL_FLUSH) == block
    ending = compressor.flush(zlib.Z_FINISH)
    adler = ((size % 65521) << 16) | 1  # of zeros: a stays 1, b grows by 1 a byte
    return b"\x78\xda" + block * (size // mebibyte) + ending + struct.pack(">I", adler)


def line_string_bomb(
    directory: Path, inflated: int = 8 << 30, source: str = HOT_SOURCE, flags: tuple[str, ...] | list[str] = ("-g",)
) -> Path:
    """-gdwarf-5, its .debug_line_str replaced by a compressed section that
    truly inflates to `inflated` bytes (8 GiB from 8 MiB)."""
    from elftools.elf.elffile import ELFFile  # noqa: PLC0415

    binary = build(directory, "linestr", *flags, "-gdwarf-5", source=source)
    with binary.open("rb") as handle:
        elf = ELFFile(handle)
        index = next(number for number, section in enumerate(elf.iter_sections()) if section.name == ".debug_line_str")
        header_at = int(elf.header["e_shoff"]) + index * int(elf.header["e_shentsize"])
    data = bytearray(binary.read_bytes())
    offset = len(data)
    contents = struct.pack("<IIQQ", 1, 0, inflated, 1) + _zeros_compressed(inflated)  # Elf64_Chdr, ELFCOMPRESS_ZLIB
    data += contents
    flags_at, offset_at = header_at + 8, header_at + 24  # sh_flags; sh_offset, then sh_size
    struct.pack_into("<Q", data, flags_at, struct.unpack_from("<Q", data, flags_at)[0] | 0x800)  # SHF_COMPRESSED
    struct.pack_into("<QQ", data, offset_at, offset, len(contents))
    binary.write_bytes(bytes(data))
    return binary
