"""The jitdump reader: recorded V8 dumps, hand-built records, and fuzzed bytes."""

from __future__ import annotations

import os
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.jit import jitdump
from profiler.jit.jitdump import HEADER, MAGIC, CodeIndex, CodeLoad, JitdumpFile, JitdumpReader, RecordType
from profiler.jit.names import frame_for_name
from tests.helpers import DATA

DATA = DATA / "jitdump"
HOT_JS = "/tests/data/jitdump/hot.js"


def read(data: bytes, chunk: int | None = None) -> JitdumpReader:
    reader = JitdumpReader()
    if chunk is None:
        reader.feed(data)
    else:
        for start in range(0, len(data), chunk):
            reader.feed(data[start : start + chunk])
    return reader


def header(flags: int = 0, magic: int = MAGIC, version: int = 1) -> bytes:
    return HEADER.pack(magic, version, HEADER.size, 62, 0, 4242, 1, flags)


def record(kind: int, timestamp: int, body: bytes) -> bytes:
    return struct.pack("<IIQ", kind, 16 + len(body), timestamp) + body


def load(timestamp: int, address: int, size: int, name: str, index: int = 1) -> bytes:
    body = struct.pack("<IIQQQQ", 4242, 4242, address, address, size, index) + name.encode() + b"\0" + b"\xcc" * size
    return record(RecordType.CODE_LOAD, timestamp, body)


def debug_info(address: int, entries: list[tuple[int, int, int, bytes]]) -> bytes:
    body = struct.pack("<QQ", address, len(entries))
    for entry_address, line, column, name in entries:
        body += struct.pack("<QII", entry_address, line, column) + name + b"\0"
    return record(RecordType.CODE_DEBUG_INFO, 0, body)


def test_node_dumps_name_javascript_with_times():
    for major in ("20", "26"):
        reader = read((DATA / f"node{major}.dump").read_bytes())
        assert reader.error == "" and reader.header is not None and reader.header.elf_machine == 62
        ours = [code for code in reader.code._loads if HOT_JS in code.name]
        assert {frame_for_name(code.name).name for code in ours} >= {"square hot.js:3", "sumSquares hot.js:7"}
        optimized = [code for code in ours if code.name.startswith("JS:*") or code.name.startswith("JS:*'")]
        assert optimized, major
        for code in ours:  # a lookup inside the code, at its time, finds it
            assert reader.code.lookup(code.start + code.size // 2, code.time_ns) == code
            assert reader.code.lookup(code.start, code.time_ns - 1) != code
        assert reader.unwinding_records > 0  # read past, by their sizes


def test_v8_debug_lines_lose_the_elf_header_bias():
    reader = read((DATA / "node26.dump").read_bytes())
    with_lines = [code for code in reader.code._loads if code.lines]
    assert with_lines
    for code in with_lines:
        # Unbiased, every line lies inside its code (V8 adds 0x40 to each).
        assert all(code.start <= line.address < code.end for line in code.lines), code.name
    first = with_lines[0]
    assert first.line_at(first.lines[0].address) == first.lines[0]


def test_node20_garbage_file_names_are_ignored_not_shown():
    # Node 20's debug records for user scripts carry freed memory as the
    # file name: those records are dropped, the loads still named.
    reader = read((DATA / "node20.dump").read_bytes())
    assert reader.insane_debug_records > 0
    for code in reader.code._loads:
        assert all(line.file.isprintable() for line in code.lines)
    assert any(HOT_JS in code.name for code in reader.code._loads)


def test_reading_in_small_pieces_gives_the_same_result():
    data = (DATA / "node26.dump").read_bytes()
    whole, pieces = read(data), read(data, chunk=97)
    assert [(code.start, code.name, code.time_ns) for code in whole.code._loads] == [
        (code.start, code.name, code.time_ns) for code in pieces.code._loads
    ]
    assert pieces.bytes_read == len(data)


def test_address_reuse_is_resolved_by_time_and_moves_follow_code():
    data = header()
    data += load(100, 0x1000, 0x100, "first")
    data += load(200, 0x1000, 0x80, "second")  # the address reused
    data += record(RecordType.CODE_MOVE, 300, struct.pack("<IIQQQQQ", 1, 1, 0, 0x1000, 0x5000, 0x80, 2))
    data += record(RecordType.CODE_CLOSE, 400, b"")
    data += load(500, 0x9000, 0x10, "after close")
    reader = read(data)
    assert reader.closed and reader.moves == 1
    assert reader.code.lookup(0x1010, 150).name == "first"
    assert reader.code.lookup(0x1010, 250).name == "second"
    assert reader.code.lookup(0x10F0, 250).name == "first"  # beyond the newer, smaller code
    assert reader.code.lookup(0x1010, 50) is None  # before anything was there
    assert reader.code.lookup(0x5010, 350).name == "second"
    assert reader.code.lookup(0x9000, 600) is None  # nothing is read after CLOSE


def test_debug_info_applies_to_the_next_load_at_its_address():
    data = header()
    data += debug_info(0x2000, [(0x2000, 10, 1, b"/src/a.c"), (0x2010, 12, 5, b"/src/a.c")])
    data += load(100, 0x2000, 0x40, "function_a")
    reader = read(data)
    code = reader.code.lookup(0x2018, 100)
    assert code is not None and code.line_at(0x2018).line == 12 and code.line_at(0x2004).line == 10
    frame = frame_for_name(code.name)
    assert frame.name == "function_a"


def test_damaged_debug_info_is_counted_and_the_load_kept():
    data = header()
    data += debug_info(0x2000, [(0x2000, 10, 1, b"\x90\x8a\x55garbage")])
    data += load(100, 0x2000, 0x40, "function_a")
    # An embedded NUL splits a name: the record no longer ends where its entries do.
    data += debug_info(0x3000, [(0x3000, 10, 1, b"/src/b.c\0\x7f\x01\x02\x03\x04\x05\x06\x07\x08")])
    data += load(200, 0x3000, 0x40, "function_b")
    reader = read(data)
    assert reader.insane_debug_records == 2 and reader.error == ""
    assert [code.lines for code in reader.code._loads] == [(), ()]
    assert [code.name for code in reader.code._loads] == ["function_a", "function_b"]


def test_bad_files_are_reported():
    assert "other byte order" in read(struct.pack(">I", MAGIC) + b"\0" * 36).error
    assert "bad magic" in read(b"ELF\x7f" + b"\0" * 60).error
    assert "version" in read(header(version=2)).error
    assert "TSC" in read(header(flags=1)).error
    assert "claims 8 bytes" in read(header() + struct.pack("<IIQ", 0, 8, 0)).error
    assert "too short" in read(header() + record(RecordType.CODE_LOAD, 1, b"\0" * 20)).error
    truncated = read(header() + load(1, 0x1000, 0x10, "whole") + load(2, 0x2000, 0x10, "cut")[:-5])
    assert truncated.error == "" and [code.name for code in truncated.code._loads] == ["whole"]  # the rest may come


def test_code_index_finds_small_code_over_large_code_by_page():
    index = CodeIndex()
    index.add(CodeLoad(0x10000, 0x20000, "large", 0, 0, 0))  # 32 pages
    for number in range(1, 1001):
        index.add(CodeLoad(0x10000 + number * 0x100, 0x80, f"f{number}", number, number, number))
    assert index.lookup(0x10000 + 500 * 0x100 + 4).name == "f500"
    assert index.lookup(0x10000 + 500 * 0x100 + 0x90).name == "large"  # between the small ones
    assert index.lookup(0x10000 + 500 * 0x100 + 4, 499).name == "large"  # before f500 was loaded
    assert index.lookup(0x10000 + 0x20000 + 0x90) is None  # past the large, between small ones
    assert len(index) == 1001


def test_code_index_past_its_page_budget_still_finds_code(monkeypatch):
    monkeypatch.setattr(jitdump, "MAX_PAGE_ENTRIES", 8)
    index = CodeIndex()
    index.add(CodeLoad(0x1000, 0x100, "paged", 1, 1, 1))
    index.add(CodeLoad(0x0, 1 << 40, "absurd", 2, 2, 2))  # a writer's size: not 2**28 pages
    index.add(CodeLoad(0x3000, 0x100, "paged too", 3, 3, 3))
    assert index.lookup(0x1010).name == "absurd"  # the newer
    assert index.lookup(0x1010, 1).name == "paged"
    assert index.lookup(0x3010).name == "paged too"
    assert index.lookup(0x5_0000_0000).name == "absurd"


def test_file_is_tailed_as_it_grows(tmp_path):
    path = tmp_path / "jit-1.dump"
    path.write_bytes(header() + load(1, 0x1000, 0x10, "one"))
    descriptor = os.open(path, os.O_RDONLY)
    dump = JitdumpFile(str(path), descriptor)
    try:
        assert dump.tail() == 1
        with open(path, "ab") as handle:
            handle.write(load(2, 0x2000, 0x10, "two"))
        assert dump.tail() == 1 and dump.reader.code.lookup(0x2004, 2).name == "two"
        assert dump.tail() == 0
    finally:
        dump.close()


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=600), st.integers(min_value=1, max_value=64))
def test_fuzzed_bytes_never_crash_or_loop(tail, chunk):
    valid = header() + load(1, 0x1000, 0x10, "seed") + debug_info(0x2000, [(0x2000, 1, 1, b"a.c")])
    for data in (tail, valid + tail, valid[: len(tail) % len(valid)] + tail):
        reader = read(data, chunk)
        assert reader.bytes_read <= len(data)
        for code in reader.code._loads:
            assert code.size > 0


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=200), st.binary(min_size=1, max_size=8))
def test_flipped_bytes_in_a_real_dump_never_crash(position, garbage):
    data = bytearray((DATA / "node26.dump").read_bytes()[:4000])
    data[HEADER.size + position : HEADER.size + position + len(garbage)] = garbage
    reader = read(bytes(data))
    assert reader.records >= 0 and reader.bytes_read <= len(data)


def test_a_dump_stops_at_its_entry_limits(monkeypatch):
    """2 GiB of tiny load records (or of source lines) would otherwise take
    millions of objects: reading stops at the limit, and says so."""
    from profiler.jit import jitdump

    monkeypatch.setattr(jitdump, "MAX_CODE_LOADS", 100)
    data = header() + b"".join(load(number, 0x1000 + 16 * number, 8, f"f{number}") for number in range(500))
    reader = read(data)
    assert len(reader.code) == 100 and "100 code loads" in reader.error
    monkeypatch.setattr(jitdump, "MAX_CODE_LOADS", 1 << 20)
    monkeypatch.setattr(jitdump, "MAX_DEBUG_LINES", 1000)
    lines = [(0x1000 + offset, offset, 1, b"/a.js") for offset in range(300)]
    data = header() + b"".join(
        debug_info(0x1000 + 0x1000 * n, [(a + 0x1000 * n, l, c, f) for a, l, c, f in lines])
        + load(n, 0x1000 + 0x1000 * n, 0x400, f"g{n}")
        for n in range(10)
    )
    reader = read(data)
    assert len(reader.code) == 4 and "1,000 source lines" in reader.error
