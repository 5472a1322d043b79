"""The V8 code log: parsing, the code map and inline stacks, on logs recorded
from Node 20, 22, 24 and 26 (tests/data/v8log/record.py)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiler.jit.v8.code_map import CodeMap, CodeObject, IsolateLog, inline_stack
from profiler.jit.v8.log_parser import (
    CodeCreation,
    CodeMove,
    CodeSourceInfo,
    PositionTable,
    ScriptSource,
    SharedFunctionMove,
    V8LogReader,
    line_starts,
    unescape,
)
from profiler.jit.v8.log_source import V8LogSymbols
from tests.helpers import DATA

DATA = DATA / "v8log"
VERSIONS = {"20": (11, 3), "22": (12, 4), "24": (13, 6), "26": (14, 6)}
HELPER_SQUARE_LINE = 4  # "return (x * x) % 65521;" in helper.js
WEIRD_LINES = (6, 7)  # the "weird,name" method in main.js
OUTER_LINES = range(11, 16)


def load(major: str) -> tuple[V8LogReader, list, CodeMap, IsolateLog]:
    reader = V8LogReader()
    events = reader.feed((DATA / f"node{major}.log").read_bytes())
    code_map, isolate = CodeMap(), IsolateLog()
    time_ns = 0
    for event in events:
        if isinstance(event, CodeCreation):
            time_ns = event.time_us * 1000
        code_map.apply(isolate, event, time_ns)
    return reader, events, code_map, isolate


def optimised_outer(code_map: CodeMap) -> list[CodeObject]:
    return [
        code
        for code in code_map.objects()
        if code.name.startswith("outer ") and code.source is not None and code.source.inlining_parents
    ]


@pytest.mark.parametrize("major", VERSIONS)
def test_recorded_log_parses_cleanly(major):
    reader, events, _, _ = load(major)
    assert reader.bad_lines == 0 and reader.skipped_long_lines == 0
    assert reader.version is not None and (reader.version.major, reader.version.minor) == VERSIONS[major]
    kinds = {type(event) for event in events}
    assert {CodeCreation, CodeSourceInfo, ScriptSource, CodeMove} <= kinds
    names = {event.name.split(" ")[0] for event in events if isinstance(event, CodeCreation)}
    assert {"outer", "square", "weird,name"} <= names  # V8 leaves this comma unescaped
    scripts = {event.url.rsplit("/", 1)[-1] for event in events if isinstance(event, ScriptSource)}
    assert scripts == {"main.js", "helper.js"}


@pytest.mark.parametrize("major", VERSIONS)
def test_inline_stacks_cross_scripts_with_lines(major):
    _, _, code_map, _ = load(major)
    optimised = optimised_outer(code_map)
    assert optimised, "no optimised outer with inlined functions in the log"
    seen_inlined: set[str] = set()
    for code in optimised:
        positions = code.source.positions
        for code_offset, inlining in zip(positions.code_offsets, positions.inlining_ids):
            stack = inline_stack(code, code_offset)
            assert stack[0].function is code.function and not stack[0].inlined
            outer_line, _ = stack[0].script.line_and_column(stack[0].script_offset)
            assert outer_line in OUTER_LINES  # the call site in outer
            if inlining < 0:
                assert len(stack) == 1
                continue
            assert all(frame.inlined for frame in stack[1:])
            leaf = stack[-1]
            line, column = leaf.script.line_and_column(leaf.script_offset)
            assert column >= 1
            name = leaf.function.name.split(" ")[0]
            seen_inlined.add(name)
            if name == "square":
                assert leaf.script.url.endswith("/helper.js")  # inlined across scripts
                assert line in (3, HELPER_SQUARE_LINE)
            else:
                assert name == "weird,name" and line in WEIRD_LINES and leaf.script.url.endswith("/main.js")
    assert seen_inlined == {"square", "weird,name"}


def test_inlining_walk_follows_parents():
    """A hand-made table two levels deep: add inlined into inner inlined into outer."""
    isolate = IsolateLog()
    code_map = CodeMap()
    source = "function add(a,b){return a+b}\nfunction inner(x){return add(x,1)}\nfunction outer(y){return inner(y)}\n"
    escaped = source.replace("\n", "\\n").replace(",", "\\x2C")
    reader = V8LogReader()
    log = (
        f"script-source,7,/app/t.js,{escaped}\n"
        "code-creation,JS,9,10,0x1000,40,add /app/t.js:1:13,0xa1,~\n"
        "code-source-info,0x1000,7,12,29,C0O19,,\n"
        "code-creation,JS,9,11,0x1100,40,inner /app/t.js:2:15,0xa2,~\n"
        "code-source-info,0x1100,7,45,66,C0O50,,\n"
        "code-creation,JS,13,12,0x2000,300,outer /app/t.js:3:15,0xa3,*\n"
        "code-source-info,0x2000,7,82,102,C0O87C122O19I1,F0O87F1O57I0,S0xa2S0xa1\n"
    ).encode()
    for event in reader.feed(log):
        code_map.apply(isolate, event, 0)
    code = code_map.lookup(0x2000 + 130)
    stack = inline_stack(code, 130)
    names = [frame.function.name.split(" ")[0] for frame in stack]
    lines = [frame.script.line_and_column(frame.script_offset)[0] for frame in stack]
    assert names == ["outer", "inner", "add"]
    assert lines == [3, 2, 1]
    assert [frame.inlined for frame in stack] == [False, True, True]
    assert len(inline_stack(code, 10)) == 1  # before the first inlined position


@pytest.mark.parametrize("major", VERSIONS)
def test_code_move_follows_the_code(major):
    _, events, _, _ = load(major)
    code_map, isolate = CodeMap(), IsolateLog()
    checked = 0
    for event in events:
        before = code_map.lookup(event.source) if isinstance(event, CodeMove) else None
        exact = before is not None and before.start == event.source
        code_map.apply(isolate, event, 0)
        if exact:
            moved = code_map.lookup(event.destination)
            assert moved is before and moved.start == event.destination
            assert code_map.lookup(event.source) is not before
            checked += 1
    assert checked >= 3


@pytest.mark.parametrize("major", VERSIONS)
def test_address_reuse_resolves_by_time(major):
    _, events, _, _ = load(major)
    code_map, isolate = CodeMap(), IsolateLog()
    reused = 0
    for event in events:
        time_ns = event.time_us * 1000 if isinstance(event, CodeCreation) else code_map.latest_ns
        overlapped = []
        if isinstance(event, CodeCreation):
            overlapped = [code for code in code_map.objects() if code.start < event.start + event.size and event.start < code.end]
        code_map.apply(isolate, event, time_ns)
        for old in overlapped:
            shared = max(old.start, event.start)  # an address both held
            new = code_map.lookup(shared)
            assert new is not old and new.created_ns == time_ns and new.start == event.start
            assert code_map.lookup(shared, time_ns - 1) is old  # a sample taken before the new code
            assert code_map.lookup(shared, time_ns + 1) is new
            assert code_map.lookup(old.start, time_ns + 1) is not old
            reused += 1
    assert reused >= 1


def test_sfi_move_keeps_function_records():
    isolate = IsolateLog()
    code_map = CodeMap()
    events = V8LogReader().feed(
        b"code-creation,JS,9,1,0x10,8,f /a.js:1:1,0xaa,~\nsfi-move,0xaa,0xbb\n"
        b"code-creation,JS,13,2,0x40,8,g /a.js:2:1,0xcc,*\ncode-source-info,0x40,1,0,9,C0O1C4O2I0,F0O3,S0xbb\n"
    )
    assert any(isinstance(event, SharedFunctionMove) for event in events)
    for event in events:
        code_map.apply(isolate, event, 0)
    stack = inline_stack(code_map.lookup(0x44), 4)
    assert [frame.function.name for frame in stack] == ["g /a.js:2:1", "f /a.js:1:1"]


def test_truncated_last_line_waits_for_the_rest():
    data = (DATA / "node24.log").read_bytes()
    whole = V8LogReader().feed(data)
    cut = data.rfind(b"\ncode-creation") + 30
    reader = V8LogReader()
    first = reader.feed(data[:cut])
    assert len(first) < len(whole)
    rest = reader.feed(data[cut:])
    assert [type(event) for event in first + rest] == [type(event) for event in whole]
    assert reader.bad_lines == 0


def test_byte_at_a_time_equals_whole():
    data = (DATA / "node22.log").read_bytes()[:4000]
    reader = V8LogReader()
    pieces = [event for offset in range(len(data)) for event in reader.feed(data[offset : offset + 1])]
    assert pieces == V8LogReader().feed(data)


def test_unescape_and_utf16_line_starts():
    assert unescape(r"a\x2Cb\\c\nd\u00e9") == "a,b\\c\nd\u00e9"
    assert unescape(r"\ud83d\ude00") == "\U0001f600"  # a pair written one unit at a time
    # An astral character is two UTF-16 units: V8's offsets count it so.
    assert list(line_starts(r"\ud83d\ude00x\ny\x0az")) == [0, 4, 6]
    assert list(line_starts(r"a\\nb")) == [0]  # an escaped backslash before n is not a newline


def test_malformed_lines_are_counted():
    reader = V8LogReader()
    events = reader.feed(b"code-creation,JS,x,y\ncode-source-info,zz\ncode-move,0x1\nscript-source,1\ntick,1,2\n")
    assert events == [] and reader.bad_lines == 4


def test_over_long_line_is_skipped(monkeypatch):
    monkeypatch.setattr("profiler.jit.v8.log_parser.MAX_LINE_BYTES", 100)
    reader = V8LogReader()
    events = reader.feed(b"script-source,1,/a.js," + b"x" * 150)
    events += reader.feed(b"y" * 50 + b"\ncode-move,0x1,0x2\n")
    assert events == [CodeMove(1, 2)] and reader.skipped_long_lines == 1


def test_symbol_source_reads_an_open_log(tmp_path):
    """The source finds a log through /proc/PID/fd, tails it and names frames."""
    log = tmp_path / "isolate-0x1234-99-v8.log"
    data = (DATA / "node24.log").read_bytes()
    log.write_bytes(data[: data.index(b"\ncode-move") + 1])
    handle = open(log, "rb")  # noqa: SIM115  (held open as V8 does)
    try:
        symbols = V8LogSymbols()
        _, _, code_map, _ = load("24")
        code = next(code for code in optimised_outer(code_map) if code.source.positions.inlining_ids)
        # the offset of the first inlined position in the first optimised outer (before any move)
        events = V8LogReader().feed(log.read_bytes())
        first = next(
            event for event in events if isinstance(event, CodeSourceInfo) and event.inlined_functions and event.positions
        )
        table = PositionTable.parse(first.positions)
        index = next(i for i, inlining in enumerate(table.inlining_ids) if inlining >= 0)
        offset = table.code_offsets[index]
        frames = symbols.expand(os.getpid(), 10**18, first.start + offset)
        assert frames is not None and len(frames) >= 2
        assert frames[0].name.startswith("outer main.js:") and not frames[0].inlined and frames[0].line_exact
        assert frames[-1].inlined and frames[-1].tier in ("maglev", "turbofan") and frames[-1].line_exact
        assert frames[-1].name.split(" ")[0] in ("square", "weird,name")
        assert code is not None
        assert symbols.expand(os.getpid(), 10**18, 0x10) is None
        no_inline = V8LogSymbols(expand_inlining=False).expand(os.getpid(), 10**18, first.start + offset)
        assert no_inline is not None and len(no_inline) == 1 and no_inline[0].name == frames[0].name
        symbols.close()
    finally:
        handle.close()


def test_symbol_source_refuses_files_that_are_not_logs(tmp_path):
    fake = tmp_path / "app.log"
    fake.write_text("code-creation,JS,9,1,0x5000,8,f /a.js:1:1,0xaa,~\n")  # no v8-version header
    with open(fake, "rb"):
        assert V8LogSymbols().expand(os.getpid(), 0, 0x5004) is None


_LOG_BYTES = (DATA / "node26.log").read_bytes()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cuts=st.lists(st.integers(0, len(_LOG_BYTES)), max_size=6),
    noise=st.lists(st.tuples(st.integers(0, len(_LOG_BYTES)), st.binary(min_size=1, max_size=12)), max_size=12),
    chunk=st.integers(1, 5000),
)
def test_fuzzed_logs_never_raise(cuts, noise, chunk):
    data = bytearray(_LOG_BYTES)
    for position, garbage in noise:
        data[position : position + len(garbage)] = garbage
    for position in sorted(cuts, reverse=True):
        del data[position : position + 40]
    reader = V8LogReader()
    code_map, isolate = CodeMap(), IsolateLog()
    for offset in range(0, len(data), chunk):
        for event in reader.feed(bytes(data[offset : offset + chunk])):
            code_map.apply(isolate, event, 0)
    for code in list(code_map.objects()):
        for offset in (0, code.size // 2, code.size - 1):
            for frame in inline_stack(code, offset):
                if frame.script is not None:
                    frame.script.line_and_column(frame.script_offset)


def test_symbol_source_never_opens_a_fifo_named_like_a_log(tmp_path):
    fifo = tmp_path / "isolate-0x1-1-v8.log"
    os.mkfifo(fifo)
    descriptor = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # held, as a hostile target could
    try:
        assert V8LogSymbols().expand(os.getpid(), 0, 0x5004) is None  # returns, does not wait
    finally:
        os.close(descriptor)


def test_code_created_again_and_again_at_one_address_stays_bounded():
    from profiler.jit.v8 import code_map
    from profiler.jit.v8.code_map import CodeMap, IsolateLog
    from profiler.jit.v8.log_parser import parse_line

    codes, isolate = CodeMap(), IsolateLog()
    for number in range(code_map.MAX_RETIRED + 5000):
        event = parse_line(f"code-creation,JS,15,{number},0x1000,64,fn{number} a.js:1:1,0x2000,~")
        codes.apply(isolate, event, number * 1000)
    assert len(codes) == 1 and len(codes._retired) == code_map.MAX_RETIRED
    newest = codes.lookup(0x1010)
    assert newest is not None and newest.name == f"fn{code_map.MAX_RETIRED + 4999} a.js:1:1"
    # A sample from just before the last replacement finds the code that ran then.
    then = codes.lookup(0x1010, (code_map.MAX_RETIRED + 4998) * 1000 + 1)
    assert then is not None and then.name == f"fn{code_map.MAX_RETIRED + 4998} a.js:1:1"


def test_a_huge_script_keeps_four_bytes_a_line():
    from profiler.jit.v8.log_parser import MAX_SCRIPT_LINES, line_starts

    starts = line_starts("x\\n" * 100000)
    assert starts.itemsize == 4 and len(starts) == 100001 and starts[1] == 2
    assert len(line_starts("\\n" * (MAX_SCRIPT_LINES + 10))) == MAX_SCRIPT_LINES


def test_line_starts_count_an_escaped_backslash_as_one_unit_not_a_newline():
    # \\n is a backslash then "n", not a newline; \\\n is a backslash then a newline.
    assert list(line_starts(r"a\\nb")) == [0]
    assert list(line_starts(r"a\\\nb")) == [0, 3]
    assert list(line_starts(r"\x22q\x22\n\u00e9\\\\\x0Ax")) == [0, 4, 8]
    # Against the decoded text, on a mix of every escape:
    escaped = r"f(\x22\\\u00e9\\n\n)\x0a\\\\\nz" * 50
    decoded = unescape(escaped)
    expected = [0] + [index + 1 for index, char in enumerate(decoded) if char == "\n"]
    assert list(line_starts(escaped)) == expected
