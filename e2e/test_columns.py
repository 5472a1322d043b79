"""Columns: functions that begin on one line stay apart, and a .cpuprofile
says where each begins as node's own profiler does, from each source that
names JS frames (V8's objects attached and spawned, the code log)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e.conftest import read_folded, wait_for_cpu
from e2e.test_node import JS, node_binary
from e2e.test_v8_heap import MAJORS, flagless

SCRIPT = JS / "columns.js"


def call_frames(path: Path) -> set[tuple[str, str, int, int]]:
    """(name, url, line, column) of every node of columns.js."""
    nodes = json.loads(path.read_text())["nodes"]
    found = set()
    for node in nodes:
        frame = node["callFrame"]
        if frame["url"].endswith("/columns.js"):
            found.add((frame["functionName"], frame["url"], frame["lineNumber"], frame["columnNumber"]))
    return found


def theirs(directory: Path) -> set[tuple[str, str, int, int]]:
    (profile,) = [path for path in directory.glob("*.cpuprofile") if path.name != "ours.cpuprofile"]
    return call_frames(profile)


def assert_same_functions(tmp_path: Path) -> None:
    ours, node_says = call_frames(tmp_path / "ours.cpuprofile"), theirs(tmp_path)
    # Every function on line 6 (0-based 5) is sampled: three side by side.
    assert len({frame for frame in node_says if frame[2] == 5}) == 3, node_says
    assert ours == node_says, (sorted(ours - node_says), sorted(node_says - ours))
    # In the folded output, the two named alike keep apart by their columns.
    names = {frame for line in read_folded(tmp_path / "ours.folded") for frame in line.frames if "columns.js:6" in frame}
    assert {"fns columns.js:6:23_[j]", "fns columns.js:6:90_[j]"} <= names, names


@pytest.mark.parametrize("major", MAJORS)
def test_attached_columns_are_cpu_profs(jitprof, tmp_path, background, major):
    target = flagless(background, node_binary(major), "--cpu-prof", f"--cpu-prof-dir={tmp_path}", str(SCRIPT), "5", cwd=tmp_path)
    wait_for_cpu(target.pid, 0.8)
    run = jitprof("-F", "499", "--pid", str(target.pid), "-d", "3", "-o", "ours.cpuprofile", "-o", "ours.folded")
    target.wait(timeout=60)
    assert run.returncode == 0, run.stderr
    assert_same_functions(tmp_path)


# node --cpu-prof is not given --interpreted-frames-native-stack (V8's
# sampler can deadlock with it): from the code log alone, without V8's
# objects, an interpreted frame has no code of its own to be named by.
@pytest.mark.parametrize("source", ["V8's objects", "the code log"])
def test_spawned_columns_are_cpu_profs(jitprof, tmp_path, source):
    flags = ["--no-v8-heap"] if source == "the code log" else []
    run = jitprof(
        "-F", "499", *flags, "-o", "ours.cpuprofile", "-o", "ours.folded",
        "--", "node", "--cpu-prof", f"--cpu-prof-dir={tmp_path}", str(SCRIPT), "3",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    if source == "V8's objects":
        assert_same_functions(tmp_path)
        return
    # From the code log alone, a function is named where it ran compiled:
    # which of its samples fell in the interpreter depends on V8's tiering.
    ours, node_says = call_frames(tmp_path / "ours.cpuprofile"), theirs(tmp_path)
    assert ours <= node_says, sorted(ours - node_says)
    assert {name for name, _url, _line, _column in ours} >= {"spin", "run"}, sorted(ours)
