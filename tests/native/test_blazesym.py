"""blazesym through cffi, and the names no symbol table gives (PLT stubs,
a stripped program's entry), on real files: the fixtures, the system's
programs, checked against binutils."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from profiler.native import blazesym
from profiler.native.blazesym import BlazesymLocator, _declarations
from profiler.native.demangle import demangle
from profiler.native.dwarf_declarations import base_name
from profiler.native.linkage import linkage_symbols
from profiler.native.locator_process import CodeLocator
from tests.conftest import FIXTURES, ROOT
from tests.hostile_elf import symbol_address


@pytest.fixture(scope="module")
def built(chain_binary) -> Path:
    return FIXTURES


def test_header_becomes_declarations():
    declarations = _declarations(blazesym.HEADER_PATH.read_text())
    assert "#ifdef" not in declarations and "#include" not in declarations
    assert "#define BLAZE_ERR_OK 0" in declarations
    assert "blaze_symbolize_elf_virt_offsets" in declarations


def test_inlined_chain_as_addr2line_gives_it(built):
    binary = built / "inlined"
    start = symbol_address(binary, "crunch")
    with binary.open("rb") as handle:
        located = CodeLocator().locate(handle, list(range(start, start + 0x60)))
    addresses = [f"{address:#x}" for address in range(start, start + 0x60)]
    text = subprocess.run(
        ["addr2line", "-f", "-i", "-e", str(binary), *addresses], capture_output=True, text=True, check=True
    ).stdout
    # addr2line prints innermost first, a function then its file:line, per address.
    blocks: list[list[tuple[str, int]]] = []
    lines = text.splitlines()
    pairs = list(zip(lines[::2], lines[1::2], strict=True))
    index = 0
    for _address in addresses:
        block = [pairs[index]]
        index += 1
        while index < len(pairs) and block[-1][0] != "crunch":
            block.append(pairs[index])
            index += 1
        blocks.append([(name, int(place.split(":")[1].split()[0])) for name, place in block])
    compared = 0
    for symbol, block in zip(located, blocks, strict=True):
        assert symbol is not None and symbol.name == "crunch" and symbol.start == start
        ours = [(call.name, call.place.line if call.place else 0) for call in reversed(symbol.inlined)]
        ours.append(("crunch", symbol.place.line if symbol.place else 0))
        if block[-1][1] == 0:  # addr2line knows no line there
            continue
        assert ours == block, (symbol, block)
        compared += 1
    assert compared >= 0x30
    assert any(len(symbol.inlined) == 2 for symbol in located if symbol is not None)


def test_inlined_functions_carry_the_line_they_are_declared_on(built):
    """speedscope shows one line per function, where it begins: DWARF's
    DW_AT_decl_line of the inlined function, read in the helper."""
    binary = built / "inlined"
    start = symbol_address(binary, "crunch")
    with binary.open("rb") as handle:
        located = CodeLocator().locate(handle, list(range(start, start + 0x60)))
    source = (ROOT / "fixtures" / "inlined.c").read_text().splitlines()
    declared = {
        name: next(number for number, text in enumerate(source, 1) if f" {name}(uint64_t" in text) for name in ("rotate", "mix")
    }
    calls = {(call.name, call.start_line) for symbol in located if symbol is not None for call in symbol.inlined}
    assert calls == {("rotate", declared["rotate"]), ("mix", declared["mix"])}, calls


@pytest.mark.parametrize(
    "shown, declared",
    [
        ("rotate", "rotate"),
        ("shapes::Accumulator<unsigned long>::fold(std::vector<unsigned long> const&) const", "fold"),
        ("std::__1::max<int, std::less<int>>(int const&, int const&)", "max<int, std::less<int>>"),
        ("operator()", "operator()"),
        ("ns::Outer<a::b>::inner", "inner"),
    ],
)
def test_names_as_dwarf_declares_them(shown, declared):
    assert base_name(shown) == declared


def test_short_c_names_stay_names(built):
    """blazesym's own demangler reads `a` as a mangled type ("signed char")."""
    binary = built / "chain"
    with binary.open("rb") as handle:
        located = CodeLocator().locate(handle, [symbol_address(binary, name) + 4 for name in ("a", "b", "c", "main")])
    assert [symbol.name for symbol in located if symbol] == ["a", "b", "c", "main"]


def test_symbolizer_renewed_once_its_files_are_closed(built):
    """(In the helper's own locator, run here in process.)"""
    locator = BlazesymLocator()
    opened = [(built / name).open("rb") for name in ("inlined", "chain", "workload")]
    for handle in opened:
        assert locator.locate(handle, [0x1000])
    for handle in opened[:2]:
        handle.close()
    with (built / "inlined").open("rb") as handle:
        assert locator.locate(handle, [symbol_address(built / "inlined", "crunch")])[0].name == "crunch"
    assert locator.renewals == 1
    opened[2].close()
    locator.close()


def test_symbolizer_renewed_after_a_while_and_names_the_same(built, monkeypatch):
    """What blazesym parsed and mapped is let go now and then; the same
    addresses name the same after it."""
    import profiler.native.blazesym as blazesym  # noqa: PLC0415

    binary = built / "inlined"
    address = symbol_address(binary, "crunch")
    locator = BlazesymLocator()
    with binary.open("rb") as handle:
        first = locator.locate(handle, [address])
        assert locator.locate(handle, [address]) == first and locator.renewals == 0
        monkeypatch.setattr(blazesym, "RENEW_AFTER_S", 0.0)
        assert locator.locate(handle, [address]) == first and first[0].name == "crunch"
        assert locator.renewals >= 1
    locator.close()


def objdump_plt_names(binary: Path) -> dict[int, str]:
    sections = subprocess.run(["readelf", "-S", "-W", str(binary)], capture_output=True, text=True, check=True).stdout
    plts = [name for name in (".plt", ".plt.sec", ".plt.got") if f" {name} " in sections]
    command = ["objdump", "-d", *(argument for name in plts for argument in ("-j", name)), str(binary)]
    text = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return {int(match.group(1), 16): match.group(2) for match in re.finditer(r"^([0-9a-f]+) <(\S+@plt)>:", text, re.M)}


@pytest.mark.parametrize("program", ["inlined", "/usr/bin/xz", "/usr/bin/node"])
def test_plt_stubs_named_as_objdump_names_them(built, program):
    binary = Path(program) if program.startswith("/") else built / program
    with binary.open("rb") as handle:
        ours = {start: name for start, _size, name in linkage_symbols(handle) if name.endswith("@plt")}
    expected = objdump_plt_names(binary)
    assert expected and ours == expected


def test_entry_point_of_a_program_only(built):
    with Path("/usr/bin/xz").open("rb") as handle:
        entry = [(start, name) for start, _size, name in linkage_symbols(handle) if name == "_start"]
    header = subprocess.run(["readelf", "-h", "/usr/bin/xz"], capture_output=True, text=True, check=True).stdout
    assert entry == [(int(re.search(r"Entry point address:\s+(0x[0-9a-f]+)", header).group(1), 16), "_start")]
    with (built / "libdlwork.so").open("rb") as handle:
        assert not [name for _start, _size, name in linkage_symbols(handle) if name == "_start"]


def test_rust_legacy_names_read_as_rust():
    mangled = "_ZN71_$LT$rust_work..engine..Mixer$u20$as$u20$rust_work..engine..Stepper$GT$4step17h3a5c44773817a3abE"
    assert demangle(mangled) == "<rust_work::engine::Mixer as rust_work::engine::Stepper>::step"
    assert demangle("_ZN9rust_work6engine5drive17hbcf1a75b5da9a3b5E") == "rust_work::engine::drive"
    assert (
        demangle("_ZNSt6vectorIiSaIiEE9push_backERKi@plt") == "std::vector<int, std::allocator<int> >::push_back(int const&)@plt"
    )


def test_load_bias_from_the_segment_a_mapping_holds(built):
    """rustc's executable text starts in the page where the read-only segment
    ends, at another address-offset delta: the executable mapping's first
    byte is in the read-only segment's range, its code in the text's."""
    from profiler.native.elf import open_elf  # noqa: PLC0415

    binary = built / "rust_work"
    image = open_elf([str(binary)], str(binary))
    try:
        text = max(image.segments, key=lambda segment: segment.file_size)
        page = text.file_offset & ~0xFFF
        assert image.vaddr_for_file_offset(page) == page  # the read-only segment's answer, wrong for the text
        assert image.vaddr_for_mapping(page, text.file_size + (text.file_offset - page)) == text.vaddr - (text.file_offset - page)
    finally:
        image.close()


def test_symbol_names_as_people_know_them():
    from profiler.native.blazesym import _symbol_name  # noqa: PLC0415

    assert _symbol_name("fopencookie@@GLIBC_2.2.5") == "fopencookie"
    assert _symbol_name("__GI___pthread_mutex_lock") == "__pthread_mutex_lock"
    assert _symbol_name("signed char") == "a"  # blazesym's reading of C's `a`
    assert _symbol_name("std::vector<int>::at(unsigned long)") == "std::vector<int>::at(unsigned long)"


def test_ld_so_entry_is_start_up_to_the_next_symbol():
    """ld.so's `_start` has no size: the return address of its call, at the
    byte before `_dl_start_user`, still belongs to it (not `_dl_help`)."""
    from profiler.native.elf import open_elf  # noqa: PLC0415

    loader = Path("/lib64/ld-linux-x86-64.so.2").resolve()
    image = open_elf([str(loader)], str(loader))
    try:
        if image.debug_handle() is None:
            pytest.skip("libc6-dbg is installed by make setup")
        symbols = subprocess.run(["nm", image.debug_file], capture_output=True, text=True, check=True)
        start_user = next(int(line.split()[0], 16) for line in symbols.stdout.splitlines() if line.endswith(" _dl_start_user"))
        header = subprocess.run(["readelf", "-h", str(loader)], capture_output=True, text=True, check=True).stdout
        entry = int(re.search(r"Entry point address:\s+(0x[0-9a-f]+)", header).group(1), 16)
        located = CodeLocator().locate(image.debug_handle(), [entry, start_user - 1, start_user])
        assert [symbol.name for symbol in located] == ["_start", "_start", "_dl_start_user"]
    finally:
        image.close()
