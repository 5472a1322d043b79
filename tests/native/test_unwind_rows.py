"""The native row compiler checked against binutils' own interpretation of the CFI."""

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from profiler.native import cache, library, unwind_rows
from profiler.native.unwind_rows import CfaType, RbpRule, RbxRule, UnwindRow

LIBC = Path("/lib/x86_64-linux-gnu/libc.so.6")


@dataclass
class ReadelfRow:
    loc: int
    cfa: str
    rbp: str
    ra: str
    rbx: str = "u"


@dataclass
class ReadelfFde:
    start: int
    end: int
    rows: list[ReadelfRow]


def readelf_fdes(path: Path) -> list[ReadelfFde]:
    text = subprocess.run(
        # readelf exits 1 on libc (no .debug_frame) after printing .eh_frame in full.
        ["readelf", "--debug-dump=frames-interp", str(path)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    cies: dict[str, list[ReadelfRow]] = {}
    fdes: list[ReadelfFde] = []
    current_rows: list[ReadelfRow] | None = None
    columns: list[str] = []
    for line in text.splitlines():
        header = re.match(
            r"^([0-9a-f]{8}) [0-9a-f]+ [0-9a-f]+ (CIE|FDE)(?: cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+))?", line
        )
        if header:
            current_rows = []
            columns = []
            if header.group(2) == "CIE":
                cies[header.group(1)] = current_rows
            else:
                fde = ReadelfFde(int(header.group(4), 16), int(header.group(5), 16), current_rows)
                fde.cie_rows = cies.get(header.group(3), [])  # type: ignore[attr-defined]
                fdes.append(fde)
            continue
        if line.strip().startswith("LOC"):
            columns = line.split()
            continue
        fields = line.split()
        if current_rows is not None and columns and len(fields) == len(columns) and re.fullmatch(r"[0-9a-f]{16}", fields[0]):
            values = dict(zip(columns, fields))
            current_rows.append(
                ReadelfRow(
                    int(fields[0], 16), values["CFA"], values.get("rbp", "u"), values.get("ra", "u"), values.get("rbx", "u")
                )
            )
    for fde in fdes:
        if not fde.rows:  # no instructions of its own: the CIE's initial rule applies
            fde.rows = [ReadelfRow(fde.start, row.cfa, row.rbp, row.ra, row.rbx) for row in fde.cie_rows[:1]]  # type: ignore[attr-defined]
    return fdes


def expected_row(row: ReadelfRow) -> UnwindRow | None:
    """What the compiler must produce for a readelf row (None: any expression type)."""
    if row.ra == "u":
        return UnwindRow(row.loc, CfaType.END_OF_STACK)
    if row.cfa == "exp":
        return None
    match = re.fullmatch(r"(rsp|rbp|rbx)\+(-?\d+)", row.cfa)
    if not match or row.ra != "c-8":
        return UnwindRow(row.loc, CfaType.UNSUPPORTED)
    cfa_type = {"rsp": CfaType.RSP, "rbp": CfaType.RBP, "rbx": CfaType.RBX}[match.group(1)]
    offset = int(match.group(2))
    # readelf shows "u" both for no rule and for DW_CFA_undefined: the
    # compiler keeps rbx (same) for the first and loses it for the second,
    # which these files do not use for rbx.
    rbx_saved = re.fullmatch(r"c(-?\d+)", row.rbx)
    rbx_rule, rbx_offset = (RbxRule.OFFSET, int(rbx_saved.group(1))) if rbx_saved else (RbxRule.SAME, 0)
    if not rbx_saved and row.rbx not in ("u", "s"):
        rbx_rule = RbxRule.LOST
    if row.rbp in ("u", "s"):
        return UnwindRow(row.loc, cfa_type, offset, rbx_rule=rbx_rule, rbx_offset=rbx_offset)
    saved = re.fullmatch(r"c(-?\d+)", row.rbp)
    if saved:
        return UnwindRow(row.loc, cfa_type, offset, RbpRule.OFFSET, int(saved.group(1)), rbx_rule, rbx_offset)
    return UnwindRow(row.loc, CfaType.UNSUPPORTED)


def native_table(path: Path) -> unwind_rows.UnwindTable:
    compiled = library.compile_unwind_rows_of(path)
    return unwind_rows.UnwindTable(unwind_rows.unpack_rows(compiled.packed), fde_count=compiled.fdes)


@pytest.fixture(scope="module")
def libc_table():
    return native_table(LIBC)


def check_against_readelf(path: Path, table=None) -> int:
    if table is None:
        table = native_table(path)
    fdes = readelf_fdes(path)
    assert fdes, "readelf found no FDEs"
    starts = {fde.start for fde in fdes}
    # glibc's clone and clone3 end their CFI where the parent's rule holds on (see clone_gaps).
    clone_syscalls = {begin + offset for begin, offset in clone_gaps(path)}
    checked = 0
    for fde in fdes:
        if fde.start in table.failed_fde_starts:
            continue
        for row in fde.rows:
            got = table.lookup(row.loc)
            want = expected_row(row)
            assert got is not None, f"{path}: no row at {row.loc:#x}"
            if want is None:
                assert got.cfa_type in (CfaType.PLT, CfaType.SIGNAL, CfaType.UNSUPPORTED), (hex(row.loc), got)
            else:
                assert got.same_rule(want), f"{path} at {row.loc:#x}: readelf {row}, compiled {got}"
            checked += 1
        if fde.end not in starts and fde.end > fde.start and fde.end not in clone_syscalls:
            assert table.lookup(fde.end).cfa_type is CfaType.GAP, hex(fde.end)
    return checked


def clone_gaps(path: Path) -> list[tuple[int, int]]:
    """(a section's address, the offset in it of each syscall that begins
    glibc's clone sequence: syscall; test %rax,%rax; jl; je to the thread's
    start), from the file's executable sections by readelf."""
    found = []
    sections = subprocess.run(["readelf", "-SW", str(path)], capture_output=True, text=True, check=True).stdout
    for match in re.finditer(r"\]\s+(\S+)\s+PROGBITS\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+\S+\s+\S*X", sections):
        address, offset, size = (int(match.group(number), 16) for number in (2, 3, 4))
        with open(path, "rb") as handle:
            handle.seek(offset)
            code = handle.read(size)
        found += [(address, hit.start()) for hit in CLONE_SEQUENCE.finditer(code)]
    return found


# syscall; test %rax,%rax; jl rel8; je rel8
CLONE_SEQUENCE = re.compile(rb"\x0f\x05\x48\x85\xc0\x7c.\x74.", re.DOTALL)


def test_glibc_s_clones_keep_the_parent_s_rule_through_their_system_call(libc_table):
    """clone and clone3 end their CFI at the syscall, and the new thread's
    begins after the jumps that follow: in between, where a thread-making
    parent spends its clone's system call, the parent's rule holds (its
    return address on top of the stack), and the thread's start ends a walk."""
    gaps = clone_gaps(LIBC)
    assert len(gaps) >= 2, gaps  # clone and clone3
    for begin, offset in gaps:
        after_syscall = begin + offset + 2
        row = libc_table.lookup(after_syscall)
        assert row is not None and row.cfa_type is CfaType.RSP and row.cfa_offset == 8, (hex(after_syscall), row)
        thread_start = next(candidate for candidate in libc_table.rows if candidate.pc > after_syscall)
        assert thread_start.cfa_type is CfaType.END_OF_STACK and thread_start.pc - after_syscall < 16, thread_start


def test_fixture_rows_match_readelf(chain_binary):
    assert check_against_readelf(chain_binary) > 10


def test_libc_rows_match_readelf(libc_table):
    checked = check_against_readelf(LIBC, libc_table)
    assert checked > 20000


def test_the_dynamic_loaders_rows_match_readelf():
    """ld.so's lazy-binding and TLS-descriptor trampolines keep their CFA in rbx."""
    loader = Path("/lib64/ld-linux-x86-64.so.2").resolve()
    table = native_table(loader)
    assert check_against_readelf(loader, table) > 1000
    in_rbx = [row for row in table.rows if row.cfa_type is CfaType.RBX]
    assert in_rbx and all(row.rbx_rule is RbxRule.OFFSET and row.rbx_offset < 0 for row in in_rbx)


def test_known_libc_rules(libc_table):
    table = libc_table
    types = {row.cfa_type for row in table.rows}
    # PLT stubs, __restore_rt (signals) and _start (end of stack) are all there.
    assert {CfaType.PLT, CfaType.SIGNAL, CfaType.RSP, CfaType.RBP, CfaType.GAP} <= types
    assert table.fde_count > 3000


def test_gaps_and_merging(libc_table):
    table = libc_table
    pcs = [row.pc for row in table.rows]
    assert pcs == sorted(pcs) and len(set(pcs)) == len(pcs)
    for previous, row in zip(table.rows, table.rows[1:]):
        assert not previous.same_rule(row)


def test_pack_round_trip_and_cache(tmp_path):
    rows = [
        UnwindRow(0x1000, CfaType.RSP, 8),
        UnwindRow(0x1004, CfaType.RBP, 16, RbpRule.OFFSET, -16),
        UnwindRow(0x1008, CfaType.RBX, 32, RbpRule.OFFSET, -24, RbxRule.OFFSET, -32),
        UnwindRow(0x100C, CfaType.RSP, 8, rbx_rule=RbxRule.LOST),
        UnwindRow(0x1010, CfaType.GAP),
    ]
    packed = unwind_rows.UnwindTable(rows).pack()
    assert len(packed) == 5 * unwind_rows.ROW_SIZE == 80
    assert unwind_rows.unpack_rows(packed) == rows
    cache.store_cached("b-1234", packed)
    assert cache.load_cached("b-1234") == packed
    assert cache.load_cached("b-9999") is None
    assert cache.load_cached("../x") is None


def test_non_elf_gives_no_rows(tmp_path):
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x7fELF" + b"\xff" * 100)
    assert library.compile_unwind_rows_of(junk).packed == b""  # no sections: no CFI
    junk.write_bytes(b"not an ELF file at all")
    with pytest.raises(OSError, match="not an ELF file"):
        library.compile_unwind_rows_of(junk)
