import shutil
import subprocess

import pytest

from profiler.native import cache, elf, elf_format, library
from profiler.native.demangle import demangle


def nm_functions(path):
    """An independent reader: binutils' nm."""
    output = subprocess.run(["nm", "--defined-only", str(path)], capture_output=True, text=True, check=True).stdout
    functions = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "tTiW":
            functions[parts[2]] = int(parts[0], 16)
    return functions


def test_symbols_match_nm(chain_binary):
    with open(chain_binary, "rb") as handle:
        table = elf.read_symbols(handle)
    expected = nm_functions(chain_binary)
    for name in ("main", "a", "b", "c"):
        address = expected[name]
        hit = table.lookup(address)
        assert hit is not None and hit.name == name and hit.offset == 0
        assert table.lookup(address + 3).name == name


def test_lookup_outside_any_function(chain_binary):
    with open(chain_binary, "rb") as handle:
        table = elf.read_symbols(handle)
    assert table.lookup(0) is None
    assert table.lookup(table.starts[-1] + table.sizes[-1] + 0x100000) is None


def test_image_identity_segments_and_cache(chain_binary, monkeypatch):
    image = elf.open_elf([str(chain_binary)], str(chain_binary))
    try:
        readelf = subprocess.run(["readelf", "-n", str(chain_binary)], capture_output=True, text=True).stdout
        assert image.build_id and image.build_id in readelf
        assert image.cache_key == f"b-{image.build_id}"
        assert image.segments and any(segment.vaddr == 0 for segment in image.segments)
        first = image.symbols()
    finally:
        image.close()
    # A second image of the same file must come from the cache, not the ELF.
    calls = []
    monkeypatch.setattr(elf, "read_symbols", lambda handle: calls.append(handle) or None)
    again = elf.open_elf([str(chain_binary)], str(chain_binary))
    try:
        table = again.symbols()
    finally:
        again.close()
    assert calls == []
    assert table.starts == first.starts and table.names == first.names


def test_corrupt_cache_entry_is_ignored(tmp_path):
    table = elf.SymbolTable.of([0x10, 0x20], [0x10, 0x8], ["f", "g"])
    cache.store("b-abcd", table)
    loaded = cache.load("b-abcd")
    assert list(loaded.starts) == [0x10, 0x20] and list(loaded.sizes) == [0x10, 0x8] and loaded.names == ["f", "g"]
    path = cache.cache_dir() / "symbols" / "b-abcd.syms"
    path.write_bytes(path.read_bytes()[:30])
    assert cache.load("b-abcd") is None
    assert cache.load("../../etc/passwd") is None


def test_unreadable_and_non_elf_files(tmp_path):
    text_file = tmp_path / "notes.txt"
    text_file.write_text("not an elf")
    for candidate in ([str(text_file)], [str(tmp_path)], [str(tmp_path / "missing")]):
        try:
            elf.open_elf(candidate, "x")
        except elf.UnreadableElf:
            continue
        raise AssertionError(f"{candidate} was accepted")


def test_demangles_cpp_and_legacy_rust():
    assert demangle("_ZN3foo3barEv") == "foo::bar()"
    assert demangle("_ZN4core3fmt5write17h0123456789abcdefE") == "core::fmt::write"
    assert demangle("main") == "main"
    assert demangle("_Znot_valid!") == "_Znot_valid!"


def test_demangles_rust_v0_and_leaves_c_names_alone():
    assert demangle("_RNvCs1234_7mycrate3foo") == "mycrate::foo"
    # The demangler reads a one-letter name as a builtin type's code: C's
    # functions `a` and `b` are not "signed char" and "bool".
    assert [demangle(name) for name in ("a", "b", "v", "_start", "R")] == ["a", "b", "v", "_start", "R"]


def test_hostile_names_stay_as_they_are():
    """A target's file names its symbols: no name makes the demangler fail
    loudly, run long or answer with more than a bounded text."""
    assert demangle("_Z" + "N3foo" * 5000 + "Ev") == "_Z" + "N3foo" * 5000 + "Ev"  # over the length cap

    # g(P<int, int>, P<P<int, int>, P<int, int> >, ...): each parameter refers
    # twice to the one before, doubling the text (30 of them: gigabytes).
    # Beyond 16 KiB the demangler stops and the name stays as it is.
    def doubling(levels: int) -> str:
        return "_Z1g1PIiiE" + "".join(f"S_IS{level}_S{level}_E" for level in range(levels))

    assert demangle(doubling(3)).startswith("g(P<int, int>, P<P<int, int>, P<int, int> >, ")
    assert demangle(doubling(10)) == doubling(10)
    random = __import__("random").Random(7)
    seed = "_ZNSt6vectorIiSaIiEE9push_backERKi"
    for _round in range(3000):
        name = list(seed)
        for _change in range(random.randint(1, 6)):
            name[random.randrange(2, len(name))] = chr(random.choice([random.randint(32, 126), random.randint(0x80, 0x2FF)]))
        assert isinstance(demangle("".join(name)), str)


def test_cxx_filt_agrees_when_available():
    if shutil.which("c++filt") is None:
        return
    name = "_ZNSt6vectorIiSaIiEE9push_backERKi"
    expected = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
    assert demangle(name) == expected


def test_the_vdso_is_read_from_memory_with_its_symbols_and_unwind_rows():
    image = elf.vdso_image()
    assert image is not None
    try:
        assert image.path == "[vdso]" and image.build_id
        assert image.cache_key == f"b-{image.build_id}"  # the kernel's: one cache entry per kernel build
        names = {name.removeprefix("__vdso_") for name in image.symbols().names}
        assert {"clock_gettime", "gettimeofday"} <= names
        assert len(library.compile_unwind_rows(image.handle.fileno()).packed) > 0
    finally:
        image.close()


def test_functions_of_a_stripped_file_are_kept_apart_by_their_start(tmp_path, chain_binary):
    from profiler.kernel.address_spaces import KnownMapping
    from profiler.kernel.procmaps import MapEntry
    from profiler.symbolize.symbolizer import ElfSymbols

    functions = nm_functions(chain_binary)
    stripped = tmp_path / "chain-stripped"
    shutil.copy(chain_binary, stripped)
    subprocess.run(["strip", "--strip-all", str(stripped)], check=True)
    image = elf.open_elf([str(stripped)], str(stripped))
    try:
        assert not {"main", "c"} & set(image.symbols().names)
        for name in ("main", "a", "b", "c"):
            assert image.function_start(functions[name] + 3) == functions[name]
        # As the symbolizer names them: distinct frames, by file and start.
        text = next(segment for segment in image.segments if segment.vaddr <= functions["c"] < segment.vaddr + segment.file_size)
        entry = MapEntry(
            0x555500000000 + text.vaddr,
            0x555500000000 + text.vaddr + text.file_size,
            True,
            False,
            True,
            text.file_offset,
            "08:01",
            1,
            str(stripped),
        )
        mapping = KnownMapping(entry, [], image, attached=True)
        names = {
            name: ElfSymbols().resolve(1, mapping, entry.start + functions[name] - text.vaddr + 2).name for name in ("b", "c")
        }
        assert names == {"b": f"chain-stripped+{functions['b']:#x}", "c": f"chain-stripped+{functions['c']:#x}"}
    finally:
        image.close()


LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


@pytest.mark.skipif(
    not elf.find_debug_file(elf.open_elf([LIBC], LIBC).build_id)[0], reason="libc6-dbg is installed by make setup"
)
def test_debug_file_of_a_gone_root_is_the_hosts_and_nothing_poorer_is_cached(tmp_path, monkeypatch):
    """A debug file found inside a process's root, read after the process
    (and its /proc/PID/root) is gone: the host's file of the same build-id
    names libc's local functions, and a table read without any debug file is
    never kept under the debug file's cache key."""
    monkeypatch.setenv("JITPROF_CACHE_DIR", str(tmp_path / "cache"))
    lost = elf.open_elf([LIBC], LIBC)
    lost.debug_file, lost.debug_root = "/usr/lib/debug/.build-id/00/nothing-here.debug", ""
    assert "__libc_start_call_main" not in _names(lost)
    assert cache.load(lost.cache_key + "-d") is None
    lost.close()
    image = elf.open_elf([LIBC], LIBC)
    image.debug_root = str(tmp_path / "gone-root")  # /proc/PID/root of an exited process
    assert "__libc_start_call_main" in _names(image)  # a local function: only the debug file has it
    image.close()


def _names(image: elf.ElfImage) -> set[str]:
    table = image.symbols()
    return {table.lookup(address).name for address in table.starts if table.lookup(address) is not None}


def test_bytes_at_a_virtual_address_come_from_the_section_holding_them(chain_binary):
    """Checked against objdump's own reading of the same section."""
    with open(chain_binary, "rb") as handle:
        header = elf_format.read_header(handle)
        sections = elf_format.section_headers(handle, header)
        rodata = next(section for section in sections if section.name == ".rodata")
        bss = next(section for section in sections if section.name == ".bss")
        found = elf_format.bytes_at_address(handle, header, sections, rodata.address, min(rodata.size, 16))
        assert elf_format.bytes_at_address(handle, header, sections, rodata.address + rodata.size - 4, 8) is None
        assert elf_format.bytes_at_address(handle, header, sections, bss.address, 4) is None
    dump = subprocess.run(
        ["objcopy", "-O", "binary", "--only-section=.rodata", str(chain_binary), "/dev/stdout"],
        capture_output=True,
        check=True,
    ).stdout
    assert found == dump[: len(found)] and len(found) == min(rodata.size, 16)
