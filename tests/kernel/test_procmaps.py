from profiler.kernel.procmaps import parse_maps, parse_maps_line, read_maps

SAMPLE = """\
55d0c4a00000-55d0c4a01000 r--p 00000000 fd:01 1048601                    /usr/bin/chain
55d0c4a01000-55d0c4a02000 r-xp 00001000 fd:01 1048601                    /usr/bin/chain
7f1a2c000000-7f1a2c021000 rw-p 00000000 00:00 0 
7f1a30000000-7f1a30040000 rwxp 00000000 00:00 0 
7f1a3a628000-7f1a3a7bd000 r-xp 00028000 fd:01 1837591                    /usr/lib/x86_64-linux-gnu/libc.so.6
7f1a3a900000-7f1a3a901000 r-xp 00000000 00:05 4242                       /tmp/lib with space.so (deleted)
7ffd1d5f4000-7ffd1d5f6000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
garbage line
"""


def test_parses_every_well_formed_line():
    entries = parse_maps(SAMPLE)
    assert len(entries) == 8
    text = entries[1]
    assert (text.start, text.end, text.offset) == (0x55D0C4A01000, 0x55D0C4A02000, 0x1000)
    assert text.executable and text.readable and not text.writable
    assert text.path == "/usr/bin/chain" and text.inode == 1048601 and text.device == "fd:01"
    assert text.is_file_backed and not text.is_anonymous_exec


def test_executable_only_passes_over_the_rest_unparsed():
    executable = parse_maps(SAMPLE, executable_only=True)
    assert executable == [entry for entry in parse_maps(SAMPLE) if entry.executable]
    assert len(executable) == 6
    assert parse_maps(" r-x\nx\n", executable_only=True) == []  # not the kernel's format


def test_anonymous_exec_is_jit_and_special_names_are_not():
    entries = parse_maps(SAMPLE)
    jit = entries[3]
    assert jit.path == "" and jit.is_anonymous_exec
    vdso = entries[6]
    assert vdso.path == "[vdso]" and not vdso.is_anonymous_exec and not vdso.is_file_backed


def test_shared_anonymous_and_memfd_are_not_files():
    for path in ("/dev/zero (deleted)", "/memfd:doublemapper (deleted)"):
        entry = parse_maps_line(f"7f0000000000-7f0000001000 r-xs 00000000 00:01 77 {path}")
        assert not entry.is_file_backed and entry.is_anonymous_exec


def test_deleted_files_and_paths_with_spaces():
    deleted = parse_maps(SAMPLE)[5]
    assert deleted.path == "/tmp/lib with space.so"
    assert deleted.deleted


def test_malformed_lines_are_rejected():
    assert parse_maps_line("garbage line") is None
    assert parse_maps_line("zz-10 r-xp 0 fd:01 1 /x") is None
    assert parse_maps_line("20-10 r-xp 0 fd:01 1 /x") is None  # end before start
    assert parse_maps_line("") is None


def test_reads_own_maps_and_gone_process():
    own = read_maps(__import__("os").getpid())
    assert any(entry.executable and "python" in entry.path for entry in own)
    assert read_maps(2**22 + 12345) == []
    assert read_maps(__import__("os").getpid(), executable_only=True) == [entry for entry in own if entry.executable]


def test_maps_naming_none_of_the_names_are_not_parsed():
    named = read_maps(__import__("os").getpid(), naming=("[stack]", "/memfd:OTEL_CTX"))
    assert any(entry.path == "[stack]" for entry in named) and any("python" in entry.path for entry in named)
    assert read_maps(__import__("os").getpid(), naming=("/memfd:OTEL_CTX", "[anon:OTEL_CTX]")) == []
