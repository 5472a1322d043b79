"""Functions that begin on one line keep apart in every output, by their columns."""

from __future__ import annotations

import json

from profiler.cli import run_diff
from profiler.kernel.events import WalkEnd
from profiler.model.profile import Frame, FrameKind, Profile, RunInfo, Sample
from profiler.model.raw import read_raw
from profiler.output import render

MAIN = Frame("main", "/usr/bin/node", FrameKind.NATIVE)
FIRST = Frame(
    "(anonymous) bundle.js:42",
    "[jit]",
    FrameKind.JIT,
    "/srv/bundle.js",
    42,
    700,
    "turbofan",
    function_line=42,
    function_column=629,
)
FIRST_LATER_LINE = Frame(
    "(anonymous) bundle.js:42",
    "[jit]",
    FrameKind.JIT,
    "/srv/bundle.js",
    43,
    9,
    "turbofan",
    line_exact=True,
    function_line=42,
    function_column=629,
)
SECOND = Frame(
    "(anonymous) bundle.js:42",
    "[jit]",
    FrameKind.JIT,
    "/srv/bundle.js",
    42,
    36800,
    "maglev",
    function_line=42,
    function_column=36777,
)
ALONE = Frame("render view.js:7", "[jit]", FrameKind.JIT, "/srv/view.js", 7, 16, "turbofan", function_line=7, function_column=16)


def _profile(stacks: list[tuple[list[Frame], int]]) -> Profile:
    profile = Profile(RunInfo(["node", "app.js"], [100], 99))
    time_ns = 0
    for frames, count in stacks:
        ids = tuple(profile.intern(frame) for frame in frames)
        for _ in range(count):
            time_ns += 10_000_000
            profile.add(Sample(time_ns, 100, 100, "node", ids, WalkEnd.COMPLETE))
    return profile


def test_functions_on_one_line_get_their_columns_and_the_rest_stay_short():
    profile = _profile([([MAIN, FIRST], 3), ([MAIN, FIRST_LATER_LINE], 2), ([MAIN, SECOND], 4), ([MAIN, ALONE], 1)])
    folded = dict(line.rsplit(" ", 1) for line in render(profile, "folded").decode().splitlines())
    assert folded == {
        "node;main;(anonymous) bundle.js:42:629_[j]": "5",  # one function, two lines: one name
        "node;main;(anonymous) bundle.js:42:36777_[j]": "4",
        "node;main;render view.js:7_[j]": "1",
    }


def test_one_function_alone_on_its_line_keeps_the_short_name():
    profile = _profile([([MAIN, FIRST], 3), ([MAIN, FIRST_LATER_LINE], 2)])
    assert render(profile, "folded").decode().splitlines() == ["node;main;(anonymous) bundle.js:42_[j] 5"]


def test_cpuprofile_columns_are_where_each_function_begins():
    profile = _profile([([MAIN, FIRST], 3), ([MAIN, SECOND], 4), ([MAIN, ALONE], 1)])
    nodes = json.loads(render(profile, "cpuprofile"))["nodes"]
    frames = {
        (node["callFrame"]["functionName"], node["callFrame"]["lineNumber"], node["callFrame"]["columnNumber"])
        for node in nodes
        if node["callFrame"]["url"].startswith("file://")
    }
    assert frames == {("", 41, 628), ("", 41, 36776), ("render", 6, 15)}  # 0-based, as V8 writes them


def test_the_raw_profile_keeps_the_columns_and_report_decides_again(tmp_path):
    profile = _profile([([MAIN, FIRST], 3), ([MAIN, SECOND], 4)])
    path = tmp_path / "run.jitprof"
    path.write_bytes(render(profile, "jitprof"))
    loaded = read_raw(path)
    assert loaded.frames == profile.frames  # the names as symbolized, the columns kept
    assert "(anonymous) bundle.js:42:36777" in render(loaded, "folded").decode()


def test_a_diff_names_a_function_alike_on_both_sides(tmp_path, capsys):
    base = _profile([([MAIN, FIRST], 3)])  # alone on its line here
    new = _profile([([MAIN, FIRST], 1), ([MAIN, SECOND], 4)])
    (tmp_path / "base.jitprof").write_bytes(render(base, "jitprof"))
    (tmp_path / "new.jitprof").write_bytes(render(new, "jitprof"))
    assert run_diff([str(tmp_path / "base.jitprof"), str(tmp_path / "new.jitprof")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "node;main;(anonymous) bundle.js:42:36777_[j] 0 4",
        "node;main;(anonymous) bundle.js:42:629_[j] 3 1",
    ]
