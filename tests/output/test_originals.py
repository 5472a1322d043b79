"""Source-mapped frames in the outputs: every format shows the original,
the raw profile keeps both, and `report` and `diff` show a saved run as
written unless --no-source-maps."""

from __future__ import annotations

import dataclasses
import json

from profiler.cli import run_diff, run_report
from profiler.jit import registry
from profiler.kernel.events import WalkEnd
from profiler.model.profile import Frame, FrameKind, Profile, RunInfo, Sample
from profiler.model.raw import read_raw, write_raw
from profiler.output import render
from profiler.output.originals import OriginalFrameTable, with_originals

MAIN = Frame("node::Start", "/usr/bin/node", FrameKind.NATIVE)
MINIFIED = Frame(
    "a app.min.js:1", "[jit]", FrameKind.JIT, "/srv/dist/app.min.js", 1, 24, "turbofan", function_line=1, function_column=24
)
INLINED = Frame(
    "b app.min.js:1",
    "[jit]",
    FrameKind.JIT,
    "/srv/dist/app.min.js",
    1,
    90,
    "turbofan",
    inlined=True,
    line_exact=True,
    function_line=1,
    function_column=80,
)
ORIGINAL = dataclasses.replace(
    MINIFIED, name="parseRecords parse.ts:12", file="/srv/src/parse.ts", line=12, column=30, function_line=12, function_column=30
)
INLINED_ORIGINAL = dataclasses.replace(
    INLINED, name="readField parse.ts:40", file="/srv/src/parse.ts", line=44, column=9, function_line=40, function_column=19
)


def _profile() -> Profile:
    profile = Profile(RunInfo(["node", "dist/app.min.js"], [100], 99))
    ids = tuple(profile.intern(frame) for frame in (MAIN, MINIFIED, INLINED))
    for index in range(10):
        profile.add(Sample(index * 10_000_000, 100, 100, "node", ids, WalkEnd.COMPLETE))
    profile.originals[MINIFIED] = ORIGINAL
    profile.originals[INLINED] = INLINED_ORIGINAL
    return profile


def test_every_format_shows_the_originals():
    shown = with_originals(_profile())
    assert render(shown, "folded").decode() == "node;node::Start;parseRecords parse.ts:12_[j];readField parse.ts:40_[i] 10\n"
    nodes = json.loads(render(shown, "cpuprofile"))["nodes"]
    frames = {node["callFrame"]["functionName"]: node["callFrame"] for node in nodes}
    assert frames["parseRecords"]["url"] == "file:///srv/src/parse.ts"
    assert (frames["parseRecords"]["lineNumber"], frames["parseRecords"]["columnNumber"]) == (11, 29)
    assert "readField" in frames


def test_the_js_view_of_the_originals_keeps_them():
    view = registry.language_view(with_originals(_profile()))
    assert "parseRecords parse.ts:12" in render(view, "folded").decode()


def test_the_live_view_reads_frames_through_the_originals_known_so_far():
    profile = _profile()
    table = OriginalFrameTable(profile.frames, profile.originals)
    assert [table[index] for index in range(len(table))] == [MAIN, ORIGINAL, INLINED_ORIGINAL]
    assert list(table[1:]) == [ORIGINAL, INLINED_ORIGINAL]


def test_the_raw_profile_keeps_both_and_report_maps_it_later(tmp_path, capsys):
    path = tmp_path / "run.jitprof"
    with open(path, "wb") as stream:
        write_raw(_profile(), stream)
    loaded = read_raw(path)
    assert loaded.frames[1] == MINIFIED  # as generated
    assert loaded.originals == {MINIFIED: ORIGINAL, INLINED: INLINED_ORIGINAL}
    assert run_report([str(path)]) == 0
    assert "parseRecords parse.ts:12_[j];readField parse.ts:40_[i] 10" in capsys.readouterr().out
    assert run_report([str(path), "--no-source-maps"]) == 0
    assert "a app.min.js:1_[j];b app.min.js:1_[i] 10" in capsys.readouterr().out


def test_a_diff_compares_the_originals(tmp_path, capsys):
    base, new = tmp_path / "base.jitprof", tmp_path / "new.jitprof"
    for path in (base, new):
        with open(path, "wb") as stream:
            write_raw(_profile(), stream)
    assert run_diff([str(base), str(new)]) == 0
    assert capsys.readouterr().out.strip().endswith("parseRecords parse.ts:12_[j];readField parse.ts:40_[i] 10 10")
    assert run_diff([str(base), str(new), "--no-source-maps"]) == 0
    assert "a app.min.js:1_[j]" in capsys.readouterr().out


def test_a_profile_without_originals_is_shown_as_it_is():
    profile = _profile()
    profile.originals.clear()
    assert with_originals(profile) is profile
