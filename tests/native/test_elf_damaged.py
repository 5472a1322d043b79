"""ELF files as hostile input: truncated and corrupted copies of real files
give a clear UnreadableElf or a (possibly smaller) symbol table, never another
exception, a hang, or an allocation the file does not back."""

import random
from pathlib import Path

import pytest

from profiler.native import elf
from tests.helpers import ROOT

SOURCES = [ROOT / "fixtures" / "build" / "chain", ROOT / "fixtures" / "build" / "libdlwork.so"]


def damaged_copies(source: Path, directory: Path, count: int, seed: int) -> list[Path]:
    data = source.read_bytes()
    generator = random.Random(seed)
    copies = []
    for number in range(count):
        copy = bytearray(data)
        if number % 3 == 0:
            copy = copy[: generator.randrange(len(copy))]  # truncated
        else:
            # Headers and tables are where lengths live: aim at the ELF
            # header, the section headers at the end, and anywhere.
            for _ in range(generator.randint(1, 24)):
                region = generator.choice([(0, 64), (max(len(copy) - 2048, 0), len(copy)), (0, len(copy))])
                position = generator.randrange(*region)
                copy[position] = generator.randrange(256)
        path = directory / f"{source.name}-{number}"
        path.write_bytes(bytes(copy))
        copies.append(path)
    return copies


@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.name)
def test_damaged_elf_files_fail_cleanly(source, tmp_path, chain_binary):
    for path in damaged_copies(source, tmp_path, 150, seed=len(source.name)):
        try:
            image = elf.open_elf([str(path)], str(path))
        except elf.UnreadableElf:
            continue
        try:
            table = elf.read_symbols(image.handle)
            assert len(table.starts) == len(table.names) == len(table.sizes)
            assert list(table.starts) == sorted(table.starts)
        except elf.UnreadableElf:
            pass
        finally:
            image.close()


def forged_notes_file(path: Path, headers: int, note_bytes: int = 1 << 20) -> Path:
    """The attack measured: an ELF whose every program header is a PT_NOTE
    over the same zeroed MiB (pyelftools walked 2,000 MiB of empty notes)."""
    import struct

    header_size, entry_size = 64, 56
    notes_at = header_size + headers * entry_size
    elf_header = (
        b"\x7fELF\x02\x01\x01"
        + bytes(9)
        + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, header_size, 0, 0, header_size, entry_size, headers, 64, 0, 0)
    )
    program = struct.pack("<IIQQQQQQ", 4, 4, notes_at, 0, 0, note_bytes, note_bytes, 4)
    path.write_bytes(elf_header + program * headers + bytes(note_bytes))
    return path


@pytest.mark.parametrize("headers", [2000, 200])
def test_a_file_of_forged_notes_is_read_in_bounded_time(tmp_path, headers):
    import time

    path = forged_notes_file(tmp_path / "notes.so", headers)
    started = time.monotonic()
    try:
        image = elf.open_elf([str(path)], str(path))
    except elf.UnreadableElf as error:
        assert headers > 256 and "program headers" in str(error)
    else:
        assert image.build_id == "" and image.segments == []
        image.close()
    with open(path, "rb") as handle:  # as a debug file a debuginfod server sent
        if headers > 256:
            with pytest.raises(ValueError, match="program headers"):
                elf._build_id_of(handle)
        else:
            assert elf._build_id_of(handle) == ""
    assert time.monotonic() - started < 1.0
