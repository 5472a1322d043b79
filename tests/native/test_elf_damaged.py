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
