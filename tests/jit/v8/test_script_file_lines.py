"""Lines for a code log written without sources (Deno's, spawned): read from
the script's file, used for a function only while V8's declared position of
it agrees with the file."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from profiler.jit.v8.log_source import V8LogSymbols
from profiler.jit.v8.script_file_lines import ScriptFileReader, file_line_starts
from profiler.jit.v8.source_map_files import TargetUser
from profiler.kernel.address_spaces import KnownMapping
from profiler.kernel.procmaps import MapEntry

SCRIPT = """// leaf and outer, inlined
function leaf(n) {
  let x = 7;
  x = (x * 31 + n) % 1000003; // HOT
  return x;
}

function outer(n) {
  return leaf(n) + 1; // CALL
}
"""
OUTER, LEAF = 0x5000, 0x6000


def _line_and_column(text: str, offset: int) -> tuple[int, int]:
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


def _log(script: Path, with_leaf_source: bool = True) -> str:
    """outer optimised with leaf inlined, as V8 logs it with --no-log-source-code."""
    leaf_start, outer_start = SCRIPT.index("(n) {"), SCRIPT.index("(n) {", SCRIPT.index("function outer"))
    hot, call = SCRIPT.index("x = (x"), SCRIPT.index("leaf(n) + 1")
    url = f"file://{script}"
    leaf_line, leaf_column = _line_and_column(SCRIPT, leaf_start)
    outer_line, outer_column = _line_and_column(SCRIPT, outer_start)
    lines = [
        "v8-version,13,6,233,17,-node.53,0",
        f"code-creation,JS,9,100,{LEAF:#x},64,leaf {url}:{leaf_line}:{leaf_column},0xbb0,~",
        f"code-creation,JS,9,101,{OUTER:#x},128,outer {url}:{outer_line}:{outer_column},0xaa0,*",
        f"code-source-info,{OUTER:#x},7,{outer_start},{len(SCRIPT) - 2},C0O{outer_start}C10O{call}C20O{hot}I0C40O{call},F0O{call},S0xbb0",
    ]
    if with_leaf_source:
        lines.insert(2, f"code-source-info,{LEAF:#x},7,{leaf_start},{hot + 40},,,")
    return "\n".join(lines) + "\n"


def _frames(tmp_path: Path, script_text: str, with_leaf_source: bool = True, link: bool = False) -> list[tuple[str, int, bool]]:
    script = tmp_path / "app.js"
    if link:
        (tmp_path / "real.js").write_text(script_text)
        script.symlink_to(tmp_path / "real.js")
    else:
        script.write_text(script_text)
    log = tmp_path / "isolate-0x1234-99-v8.log"
    log.write_text(_log(script, with_leaf_source))
    with open(log, "rb"):  # held open, as V8 does: found through /proc/PID/fd
        symbols = V8LogSymbols()
        try:
            frames = symbols.expand(os.getpid(), 10**18, OUTER + 25)
        finally:
            symbols.close()
    assert frames is not None
    return [(frame.name.split(" ")[0], frame.line, frame.line_exact) for frame in frames]


def _line_of(marker: str) -> int:
    return SCRIPT[: SCRIPT.index(marker)].count("\n") + 1


def test_lines_come_from_the_script_s_file_when_the_log_has_no_source(tmp_path):
    assert _frames(tmp_path, SCRIPT) == [("outer", _line_of("// CALL"), True), ("leaf", _line_of("// HOT"), True)]


def test_a_file_edited_since_v8_read_it_gives_only_the_declared_lines(tmp_path):
    edited = "// one line more\n" + SCRIPT
    assert _frames(tmp_path, edited) == [("outer", _line_of("function outer"), False), ("leaf", _line_of("function leaf"), False)]


def test_a_function_whose_own_position_was_not_logged_keeps_its_declared_line(tmp_path):
    frames = _frames(tmp_path, SCRIPT, with_leaf_source=False)
    assert frames == [("outer", _line_of("// CALL"), True), ("leaf", _line_of("function leaf"), False)]


def test_a_script_reached_through_a_symbolic_link_is_not_read(tmp_path):
    assert [exact for _, _, exact in _frames(tmp_path, SCRIPT, link=True)] == [False, False]


def test_line_starts_count_utf16_units_as_v8_does():
    assert list(file_line_starts("é\n\U0001d4b3\nx".encode())) == [0, 2, 5]
    assert list(file_line_starts(b"a\r\nb\n")) == [0, 3, 5]
    assert list(file_line_starts(b"\xff\xfe\n")) == [0, 3]  # invalid UTF-8: one replacement character each


def test_a_builtin_mapped_again_from_a_stripped_binary_is_named_by_the_log(tmp_path):
    """V8 maps its embedded builtins again from deno's binary: with no perf
    map, the log's Builtin record names code there; its JS code never."""
    log = tmp_path / "isolate-0x1234-99-v8.log"
    log.write_text(
        "v8-version,13,6,233,17,-node.53,0\n"
        "code-creation,Builtin,2,50,0x7000,64,GeneratorPrototypeNext\n"
        f"code-creation,JS,9,101,{OUTER:#x},128,outer file:///app.js:8:15,0xaa0,*\n"
    )
    binary = KnownMapping(MapEntry(0x7000, 0x8000, True, False, True, 0, "fd:01", 7, "/usr/bin/deno"), [], None)
    with open(log, "rb"):
        symbols = V8LogSymbols()
        try:
            builtin = symbols.resolve_file_code(os.getpid(), binary, 0x7010)
            assert builtin is not None and builtin.name == "[builtin] GeneratorPrototypeNext"
            assert symbols.resolve_file_code(os.getpid(), binary, OUTER + 4) is None
            assert symbols.resolve_file_code(os.getpid(), binary, 0x7800) is None
        finally:
            symbols.close()


def test_a_script_its_user_may_not_read_is_not_read_for_it(tmp_path):
    """root reads a script's lines for a target only as the target could:
    not a file of another user's that is closed to it."""
    directory = Path(tempfile.mkdtemp(prefix="jitprof-scripts-"))
    try:
        os.chmod(directory, 0o755)
        script = directory / "app.js"
        script.write_text(SCRIPT)
        os.chmod(script, 0o600)
        stranger = TargetUser(os.getuid() + 4242, frozenset([os.getgid() + 4242]))
        reader = ScriptFileReader(os.open("/", os.O_PATH | os.O_DIRECTORY), stranger)
        try:
            assert reader.line_starts(f"file://{script}") is None
            os.chmod(script, 0o644)
            assert reader.line_starts(f"file://{script}") == file_line_starts(SCRIPT.encode())
            assert reader.line_starts("node:internal/main") is None  # not a file
        finally:
            reader.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
