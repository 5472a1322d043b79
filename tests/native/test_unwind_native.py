"""The C table compiler (native/) against the pyelftools compiler, the oracle:
identical rows on real files, and no crash, hang or bad read on damaged ones
(the ASan build of the same code)."""

import os
import random
import subprocess
from pathlib import Path

import pytest

from profiler.native import library, unwind_rows
from tests.helpers import ROOT
from tests.native import unwind_oracle

LIBRARIES = Path("/usr/lib/x86_64-linux-gnu")
# Small enough for the oracle to take a few seconds; node and libjvm are
# compared in e2e/test_unwind_tables.py.
FILES = [
    LIBRARIES / "libc.so.6",
    LIBRARIES / "libstdc++.so.6",
    LIBRARIES / "liblzma.so.5",
    Path("/usr/lib/moar/libmoar.so"),
    ROOT / "fixtures" / "build" / "dwarf_cases",
    ROOT / "fixtures" / "build" / "libdlwork.so",
]
FUZZER = ROOT / "native" / "build" / "fuzz_unwind"


def oracle_rows(path: Path) -> bytes:
    with open(path, "rb") as handle:
        return unwind_oracle.compile_table(handle).pack()


def assert_same_rows(path: Path) -> int:
    real = Path(os.path.realpath(path))
    native = library.compile_unwind_rows_of(real).packed
    expected = oracle_rows(real)
    if native != expected:
        got, want = unwind_rows.unpack_rows(native), unwind_rows.unpack_rows(expected)
        first = next((index for index, (left, right) in enumerate(zip(got, want)) if left != right), min(len(got), len(want)))
        pytest.fail(
            f"{path}: {len(got)} rows against {len(want)}; first difference at row {first}: "
            f"{got[first : first + 2]} against {want[first : first + 2]}"
        )
    return len(native) // unwind_rows.ROW_SIZE


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.name)
def test_native_rows_equal_the_oracle(path, chain_binary):
    if not path.exists():
        pytest.skip(f"{path} is not installed")
    assert assert_same_rows(path) > 5


def test_gnu_args_size_is_read_past(tmp_path):
    """libc's FDEs with DW_CFA_GNU_args_size have rows (pyelftools alone
    rejects them; the oracle drops the instruction first)."""
    compiled = library.compile_unwind_rows_of(LIBRARIES / "libc.so.6")
    assert compiled.failed_fdes == 0 and compiled.malformed == 0
    assert len(unwind_rows.unpack_rows(compiled.packed)) > 20000


def test_a_file_truncated_while_read_is_an_error_not_a_crash(tmp_path, chain_binary):
    copy = tmp_path / "chain"
    data = chain_binary.read_bytes()
    copy.write_bytes(data)
    descriptor = os.open(copy, os.O_RDONLY)
    try:
        os.truncate(copy, 200)  # the section table now points past the end
        assert library.compile_unwind_rows(descriptor).packed == b""
    finally:
        os.close(descriptor)


def test_fifo_and_directory_are_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not an ELF"):
        library.compile_unwind_rows_of(fifo)  # O_NONBLOCK open, fstat refuses it: never blocks
    with pytest.raises(OSError):
        library.compile_unwind_rows_of(tmp_path)


def test_damaged_files_under_address_sanitizer(tmp_path, chain_binary):
    """Truncated and corrupted copies of real files: the ASan/UBSan build
    must finish every one without a report."""
    assert FUZZER.exists(), "native/build/fuzz_unwind missing: run make setup"
    damaged = []
    generator = random.Random(7)
    for source in (chain_binary, ROOT / "fixtures" / "build" / "dwarf_cases", LIBRARIES / "liblzma.so.5"):
        data = bytearray(Path(os.path.realpath(source)).read_bytes())
        # Damage aimed at the CFI: bytes of .eh_frame and .eh_frame_hdr flipped.
        start = data.find(b"zR\x00")
        for round_number in range(30):
            copy = bytearray(data)
            for _ in range(generator.randint(1, 40)):
                position = (
                    generator.randrange(max(start - 64, 0), min(start + 4096, len(copy)))
                    if start > 0
                    else generator.randrange(len(copy))
                )
                copy[position] = generator.randrange(256)
            path = tmp_path / f"{Path(source).name}-{round_number}"
            path.write_bytes(bytes(copy))
            damaged.append(str(path))
    # libc's section headers damaged: where the code after clone's syscall is
    # read from (its rows continue through that gap) comes from them.
    libc = bytearray(Path(os.path.realpath(LIBRARIES / "libc.so.6")).read_bytes())
    headers = int.from_bytes(libc[0x28:0x30], "little")
    for round_number in range(10):
        copy = bytearray(libc)
        for _ in range(generator.randint(1, 8)):
            copy[generator.randrange(headers, len(copy))] = generator.randrange(256)
        path = tmp_path / f"libc-{round_number}"
        path.write_bytes(bytes(copy))
        damaged.append(str(path))
    completed = subprocess.run([str(FUZZER), "40", *damaged], capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "ERROR: AddressSanitizer" not in completed.stderr and "runtime error" not in completed.stderr
    assert completed.stdout.count("rows ") == len(damaged)


def test_a_missing_build_is_one_error_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(library, "_loaded", None)
    monkeypatch.setattr(library, "LIBRARY_PATH", tmp_path / "libjitprof_native.so")
    with pytest.raises(library.NativeUnavailable) as raised:
        library.load()
    assert "not built" in raised.value.render() and "make setup" in raised.value.render()
