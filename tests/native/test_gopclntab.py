"""Go programs named from .gopclntab, which stripping keeps: functions,
lines and the calls Go inlined, checked against the symbol table and the
DWARF (read by blazesym) of the same program built unstripped."""

from __future__ import annotations

import dataclasses
import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from profiler.native.gopclntab import GoTableError, parse_go_functions, read_go_functions
from profiler.native.locator_process import CodeLocator

SOURCE = Path(__file__).resolve().parents[2] / "fixtures" / "gowork.go"


@pytest.fixture(scope="module")
def go_builds(tmp_path_factory) -> tuple[Path, Path]:
    """gowork built with its symbols and DWARF, and with neither (-s -w)."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        pytest.skip("no Go toolchain")
    directory = tmp_path_factory.mktemp("go")
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(directory), "GOCACHE": str(directory / "cache"), "GOFLAGS": "-mod=mod"}
    full, stripped = directory / "full", directory / "stripped"
    subprocess.run([go, "build", "-o", str(full), str(SOURCE)], check=True, env=environment, cwd=directory)
    subprocess.run([go, "build", "-ldflags=-s -w", "-o", str(stripped), str(SOURCE)], check=True, env=environment, cwd=directory)
    assert ".symtab" not in subprocess.run(["readelf", "-S", str(stripped)], capture_output=True, text=True).stdout
    return full, stripped


def test_go_functions_from_gopclntab_agree_with_the_symbol_table(go_builds):
    """A stripped Go binary keeps .gopclntab: its functions are named from it
    as the unstripped binary's symbol table names them."""
    full, stripped = go_builds
    symbols = {}
    for line in subprocess.run(["nm", str(full)], capture_output=True, text=True, check=True).stdout.splitlines():
        fields = line.split(maxsplit=2)
        if len(fields) == 3 and fields[1] in "tT":
            symbols[int(fields[0], 16)] = fields[2].removesuffix(".abi0")  # assembly's ABI mark: tracebacks omit it
    with full.open("rb") as handle:
        functions = read_go_functions(handle)
    assert functions is not None and len(functions) > 500
    agreed = sum(1 for start in functions.starts if symbols.get(start) == functions.lookup(start)[1])
    assert agreed / len(functions) >= 0.99
    with stripped.open("rb") as handle:
        stripped_functions = read_go_functions(handle)
    assert stripped_functions is not None
    crunch = next(start for start in stripped_functions.starts if stripped_functions.lookup(start)[1] == "main.crunch")
    assert stripped_functions.lookup(crunch + 3) == (crunch, "main.crunch")


def chain(located) -> tuple[tuple[str, int], ...]:  # noqa: ANN001
    """(function, line) outermost first: the function, then each inlined call
    (assembly's ABI mark, which DWARF keeps, left out as tracebacks do)."""
    frames = [(located.name.removesuffix(".abi0"), located.place.line if located.place else 0)]
    frames += [(call.name, call.place.line if call.place else 0) for call in located.inlined]
    return tuple(frames)


def test_go_lines_and_inlined_calls_agree_with_dwarf(go_builds):
    """From the stripped binary's table alone: each address's function, the
    calls Go inlined there and every frame's line, as the unstripped
    binary's DWARF says (crunch -> step -> mix, inlined twice)."""
    full, stripped = go_builds
    with stripped.open("rb") as handle:
        functions = read_go_functions(handle)
    assert functions is not None and functions.inline is not None  # the module data was found
    crunch = next(start for start in functions.starts if functions.lookup(start)[1] == "main.crunch")
    generator = random.Random(7)
    addresses = list(range(crunch, crunch + 0x30))
    for _ in range(1500):  # and the runtime's: inlining everywhere
        index = generator.randrange(len(functions.starts) - 1)
        addresses.append(
            generator.randrange(functions.starts[index], max(functions.starts[index] + 1, functions.starts[index + 1]))
        )
    with full.open("rb") as handle:
        from_dwarf = CodeLocator().locate(handle, addresses)
    compared = agreed = inlined = 0
    for address, dwarf in zip(addresses, from_dwarf, strict=True):
        if dwarf is None or not dwarf.name or dwarf.place is None:
            continue  # padding between functions, or no line in the DWARF either
        compared += 1
        located = functions.locate(address)
        assert located is not None, hex(address)
        agreed += chain(located) == chain(dwarf)
        inlined += bool(located.inlined)
    assert compared >= 1000 and agreed / compared >= 0.99, (compared, agreed)
    assert inlined / compared >= 0.1  # the test covers inlined calls
    hot = functions.locate(crunch + 0x10)
    assert hot is not None and [name for name, _line in chain(hot)] == ["main.crunch", "main.step", "main.mix"]
    assert functions.function_line(crunch) == 17  # `func crunch(...)`


def test_damaged_gopclntab_is_refused_not_trusted():
    header = struct.pack("<IBBBBqqQQQQQQ", 0xFFFFFFF1, 0, 0, 1, 8, 10**9, 0, 0x401000, 64, 0, 0, 0, 72)
    with pytest.raises(GoTableError):
        parse_go_functions(header + b"\0" * 64)
    header = struct.pack("<IBBBBqqQQQQQQ", 0xFFFFFFF1, 0, 0, 1, 8, 5, 0, 0x401000, 64, 64, 64, 64, 72)
    with pytest.raises(GoTableError):
        parse_go_functions(header + b"\0" * 16)  # the function table runs past the end
    assert parse_go_functions(b"\x00" * 80) is None  # no magic: not a table this reads


def test_forged_line_and_inline_tables_end_without_a_wrong_answer(go_builds):
    """Damage anywhere in the table's line and inline data: every lookup
    still ends, with a name or nothing, never an error."""
    _full, stripped = go_builds
    with stripped.open("rb") as handle:
        functions = read_go_functions(handle)
    assert functions is not None
    generator = random.Random(3)
    original = functions.table
    for _round in range(20):
        damaged = bytearray(original)
        for _ in range(2000):
            damaged[generator.randrange(functions.parts.pc_tables, len(damaged))] = generator.randrange(256)
        functions.table = bytes(damaged)
        for _ in range(200):
            index = generator.randrange(len(functions.starts) - 1)
            located = functions.locate(functions.starts[index] + generator.randrange(64))
            assert located is None or located.name


def test_pc_value_tables_that_never_advance_cost_one_bounded_lookup(go_builds, monkeypatch):
    """Every pc-value table forged into steps that never advance the pc: a
    lookup read a million steps per table, per inlined level (75 s of
    Python for one address). One lookup now reads MAX_LOOKUP_STEPS in all."""
    _full, stripped = go_builds
    with stripped.open("rb") as handle:
        functions = read_go_functions(handle)
    assert functions is not None
    # Every table the function tables point at now reads steps of value +1,
    # pc +0 (the pc's zero in two bytes: at any offset, the second step is
    # one of them) for millions of steps: moved past the real table's end.
    span = functions.parts.functions - functions.parts.pc_tables + (8 << 20)
    functions.parts = dataclasses.replace(functions.parts, pc_tables=len(functions.table))
    functions.table = functions.table + b"\x02\x80\x00" * (span // 3)
    from profiler.native import gopclntab  # noqa: PLC0415

    decoded = [0]
    uvarint = gopclntab._uvarint

    def counted(data: bytes, at: int) -> tuple[int, int] | None:
        decoded[0] += 1
        return uvarint(data, at)

    monkeypatch.setattr(gopclntab, "_uvarint", counted)
    index = len(functions.starts) // 2
    located = functions.locate(functions.starts[index] + 8)
    assert located is not None and located.name and located.place is None
    assert decoded[0] <= 2 * gopclntab.MAX_LOOKUP_STEPS + 2, decoded  # two numbers a step
    decoded[0] = 0
    functions.function_line(functions.starts[index])
    assert decoded[0] <= 2 * gopclntab.MAX_LOOKUP_STEPS + 2, decoded
