"""Every output format, checked by a reader that is not jitprof: speedscope's
published JSON schema, pprof-format (npm) for pprof, callgrind_annotate
(valgrind) for callgrind, and the .cpuprofile invariants Chrome relies on."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import shutil
import subprocess

import pytest

from profiler.kernel.events import WalkEnd
from profiler.model import raw
from profiler.model.profile import MAX_SAMPLE_FRAMES, Frame, FrameKind, ModuleFile, Profile, RunInfo, Sample
from profiler.model.raw import RawProfileError, read_raw
from profiler.output import render
from profiler.output.report import SampleFilter, filtered, write_diff_folded
from tests.helpers import ROOT, TESTS

TOOLS = ROOT / ".nodes" / "tools" / "node_modules"
SPEEDSCOPE_SCHEMA = TOOLS / "speedscope" / "dist" / "release" / "file-format-schema.json"
PERIOD_NS = 10_101_010  # 99 Hz

MAIN = Frame("main", "/usr/bin/node", FrameKind.NATIVE)
TOP = Frame(
    "top app.js:19",
    "[jit]",
    FrameKind.JIT,
    "/srv/app.js",
    21,
    10,
    "turbofan",
    line_exact=True,
    function_line=19,
    function_column=13,
)
MID = Frame("mid app.js:15", "[jit]", FrameKind.JIT, "/srv/app.js", 16, 10, "turbofan", True, True, 15)
LEAF = Frame("leaf app.js:7", "[jit]", FrameKind.JIT, "/srv/app.js", 10, 5, "turbofan", True, True, 7)
LEAF_LOOP = Frame("leaf app.js:7", "[jit]", FrameKind.JIT, "/srv/app.js", 9, 3, "turbofan", True, True, 7)
MEMCPY = Frame("memcpy", "/lib/libc.so.6", FrameKind.NATIVE)
WRITE = Frame("ksys_write", "[kernel]", FrameKind.KERNEL)


def sample_profile() -> Profile:
    profile = Profile(RunInfo(["node", "app.js"], [100], 99, started_ns=1_000_000_000, ended_ns=3_000_000_000))
    plan = [
        (100, 100, [MAIN, TOP, MID, LEAF], 40),
        (100, 100, [MAIN, TOP, MID, LEAF_LOOP], 10),
        (100, 101, [MAIN, MEMCPY], 5),
        (200, 200, [MAIN, TOP, WRITE], 5),
    ]
    time_ns = 1_000_000_000
    for pid, tid, frames, count in plan:
        ids = tuple(profile.intern(frame) for frame in frames)
        for _ in range(count):
            time_ns += PERIOD_NS // 2
            profile.add(Sample(time_ns, pid, tid, "node", ids, WalkEnd.COMPLETE))
    return profile


def test_speedscope_matches_its_published_schema():
    jsonschema = pytest.importorskip("jsonschema")
    if not SPEEDSCOPE_SCHEMA.exists():
        pytest.skip("speedscope's schema is installed by make setup")
    document = json.loads(render(sample_profile(), "speedscope"))
    jsonschema.validate(document, json.loads(SPEEDSCOPE_SCHEMA.read_text()))
    profiles = document["profiles"]
    assert [profile["name"] for profile in profiles] == ["node pid 100 tid 100", "node pid 100 tid 101", "node pid 200 tid 200"]
    assert sum(len(profile["samples"]) for profile in profiles) == 60
    assert all(weight == PERIOD_NS for profile in profiles for weight in profile["weights"])
    frames = document["shared"]["frames"]
    names = [frames[index]["name"] for index in profiles[0]["samples"][0]]
    assert names == ["node", "main", "top app.js:19", "mid app.js:15 [inlined]", "leaf app.js:7 [inlined]"]
    leaf = frames[profiles[0]["samples"][0][-1]]
    assert leaf["file"] == "/srv/app.js" and leaf["line"] == 7
    top = frames[profiles[0]["samples"][0][2]]
    assert top["line"] == 19 and top["col"] == 13  # where the function begins
    # Lines of one function share its frame: boxes do not split by line.
    assert profiles[0]["samples"][0] == profiles[0]["samples"][-1]


@pytest.mark.parametrize("name", ["inner", "lit;name 5\nx", "with space", "(anonymous)"])
def test_cpuprofile_function_names_are_bare_whatever_they_hold(name):
    """V8 writes a JS function's own name; a name holding a newline kept its
    script and line ("lit;name 5\\nx names.js:16")."""
    from profiler.output.cpuprofile import call_frame  # noqa: PLC0415

    frame = Frame(f"{name} /srv/names.js:16", "", FrameKind.JIT, "/srv/names.js", 16, 3, function_line=16)
    expected = "" if name == "(anonymous)" else name
    assert call_frame(frame).function_name == expected
    assert call_frame(dataclasses.replace(frame, name=f"{name} names.js:16:3")).function_name == expected


def test_cpuprofile_invariants():
    document = json.loads(render(sample_profile(), "cpuprofile"))
    nodes = {node["id"]: node for node in document["nodes"]}
    assert len(nodes) == len(document["nodes"])  # ids unique
    children = [child for node in document["nodes"] for child in node.get("children", [])]
    assert sorted(children) == sorted(set(children)) and set(children) <= set(nodes)  # one parent each
    roots = set(nodes) - set(children)
    assert roots == {1} and nodes[1]["callFrame"]["functionName"] == "(root)"
    assert all(sample in nodes for sample in document["samples"])
    assert sum(node["hitCount"] for node in nodes.values()) == len(document["samples"]) == 60
    deltas = document["timeDeltas"]
    assert len(deltas) == 60 and all(delta >= 0 for delta in deltas)
    assert sum(deltas) == document["endTime"] - document["startTime"]
    # As V8 names them: the bare function, its script as a URL, where it begins (0-based).
    leaf = next(node for node in nodes.values() if node["callFrame"]["functionName"] == "leaf")
    assert leaf["callFrame"]["url"] == "file:///srv/app.js" and leaf["callFrame"]["lineNumber"] == 6
    assert leaf["positionTicks"] == [{"line": 9, "ticks": 10}, {"line": 10, "ticks": 40}]
    assert leaf["hitCount"] == 50
    assert leaf["callFrame"]["scriptId"] != "0"
    top = next(node for node in nodes.values() if node["callFrame"]["functionName"] == "top")
    assert (top["callFrame"]["lineNumber"], top["callFrame"]["columnNumber"]) == (18, 12)


def test_pprof_read_by_pprof_format():
    if shutil.which("node") is None or not (TOOLS / "pprof-format").exists():
        pytest.skip("node and the pprof-format package are installed by make setup")
    data = render(sample_profile(), "pprof")
    assert data[:2] == b"\x1f\x8b"  # gzipped, as pprof writes it
    path = TESTS / "readers" / "read_pprof.js"
    completed = subprocess.run(
        ["node", str(path), str(TOOLS / "pprof-format"), "/dev/stdin"], input=data, capture_output=True, check=True
    )
    decoded = json.loads(completed.stdout)
    assert decoded["sampleTypes"] == [["samples", "count"], ["cpu", "nanoseconds"]]
    assert decoded["period"] == PERIOD_NS
    assert sum(sample["values"][0] for sample in decoded["samples"]) == 60
    assert all(sample["values"][1] == sample["values"][0] * PERIOD_NS for sample in decoded["samples"])
    hot = max(decoded["samples"], key=lambda sample: sample["values"][0])
    assert hot["labels"] == {"pid": 100, "tid": 100, "comm": "node"}
    leaf_location = hot["stack"][0]  # leaf first; inline lines callee first
    assert [(line["name"], line["line"]) for line in leaf_location] == [
        ("leaf app.js:7", 10),
        ("mid app.js:15", 16),
        ("top app.js:19", 21),
    ]
    assert leaf_location[0]["file"] == "/srv/app.js" and leaf_location[0]["start"] == 7
    assert [line["name"] for line in hot["stack"][1]] == ["main"]
    assert {"/usr/bin/node", "[jit]", "/lib/libc.so.6", "[kernel]"} <= set(decoded["mappings"])


def test_callgrind_read_by_callgrind_annotate(tmp_path):
    if shutil.which("callgrind_annotate") is None:
        pytest.skip("callgrind_annotate (valgrind) is installed by make setup")
    path = tmp_path / "callgrind.out.1"
    path.write_bytes(render(sample_profile(), "callgrind"))
    text = subprocess.run(["callgrind_annotate", str(path)], capture_output=True, text=True, check=True).stdout
    assert "60 (100.0%)  PROGRAM TOTALS" in text
    assert "50 (83.33%)  /srv/app.js:leaf app.js:7 [inlined]" in text
    inclusive = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", str(path)], capture_output=True, text=True, check=True
    ).stdout
    assert "55 (91.67%)  /srv/app.js:top app.js:19" in inclusive  # 50 through mid, 5 into the kernel


def test_raw_profile_round_trip(tmp_path):
    profile = sample_profile()
    profile.modules["libx.so"] = ModuleFile("/opt/lib/libx.so", "ab" * 20)  # its unnamed frames can be named later
    profile.traffic.samples, profile.traffic.stack_copies = 60, 3
    profile.info.warnings = ["hint: 300 samples of pid 4242 ran JIT code with no symbol source; for Node.js: restart it"]
    path = tmp_path / "run.jitprof"
    path.write_bytes(render(profile, "jitprof"))
    loaded = read_raw(path)
    assert render(loaded, "folded") == render(profile, "folded")
    assert loaded.frames == profile.frames and loaded.samples == profile.samples
    assert loaded.info == profile.info and loaded.walk_ends == profile.walk_ends
    assert loaded.modules == profile.modules and loaded.traffic == profile.traffic


@pytest.mark.parametrize(
    "content, message",
    [
        (b"not gzip", "not a readable .jitprof"),
        (gzip.compress(b'{"format":"other"}\n'), "not a .jitprof file"),
        (gzip.compress(b'{"format":"jitprof","version":99}\n'), "version 99 is newer"),
        (gzip.compress(b""), "empty file"),
    ],
)
def test_raw_profile_errors_name_the_problem(tmp_path, content, message):
    path = tmp_path / "bad.jitprof"
    path.write_bytes(content)
    with pytest.raises(RawProfileError, match=message):
        read_raw(path)


def test_a_file_s_warnings_are_cut_to_size(tmp_path):
    lines = gzip.decompress(render(sample_profile(), "jitprof")).split(b"\n")
    header = json.loads(lines[0])
    header["info"]["warnings"] = ["x" * 10_000] * 1000
    lines[0] = json.dumps(header).encode()
    path = tmp_path / "big.jitprof"
    path.write_bytes(gzip.compress(b"\n".join(lines)))
    warnings = read_raw(path).info.warnings
    assert len(warnings) == raw.MAX_WARNINGS and all(len(line) == raw.MAX_WARNING_CHARS for line in warnings)
    header["info"]["warnings"] = "not a list"
    lines[0] = json.dumps(header).encode()
    path.write_bytes(gzip.compress(b"\n".join(lines)))
    with pytest.raises(RawProfileError, match="warnings is a str"):
        read_raw(path)


def test_raw_profile_bad_record_names_its_line(tmp_path):
    good = render(sample_profile(), "jitprof")
    lines = gzip.decompress(good).split(b"\n")
    lines[8] = b'[1,2,3,"x",[999],"COMPLETE"]'  # a sample naming a frame that does not exist
    path = tmp_path / "bad.jitprof"
    path.write_bytes(gzip.compress(b"\n".join(lines)))
    with pytest.raises(RawProfileError, match=r"bad\.jitprof:9: bad record"):
        read_raw(path)
    path.write_bytes(good[: len(good) // 2])  # truncated
    with pytest.raises(RawProfileError):
        read_raw(path)


def test_a_raw_stack_of_three_million_frames_is_refused_small(tmp_path):
    """A 9 KB .jitprof whose one sample names frame 0 three million times
    (6 MB unpacked, under the ratio check's floor) took `report` to 3.9 GB
    and 54 s. A stack longer than any jitprof writes is refused at once."""
    good = render(sample_profile(), "jitprof")
    lines = gzip.decompress(good).split(b"\n")
    lines[8] = b'[1,2,3,"x",[' + b",".join([b"0"] * 3_000_000) + b'],"COMPLETE"]'
    path = tmp_path / "deep.jitprof"
    path.write_bytes(gzip.compress(b"\n".join(lines), 9))
    assert path.stat().st_size < 64 << 10
    with pytest.raises(RawProfileError, match=r"deep\.jitprof:9: bad record \(a stack of 3,000,000 frames"):
        read_raw(path)
    lines[8] = b'[1,2,3,"x",[' + b",".join([b"0"] * MAX_SAMPLE_FRAMES) + b'],"COMPLETE"]'  # as long as jitprof writes
    path.write_bytes(gzip.compress(b"\n".join(lines), 9))
    assert max(len(sample.frame_ids) for sample in read_raw(path).samples) == MAX_SAMPLE_FRAMES


def test_filters_by_pid_tid_and_time():
    profile = sample_profile()
    assert len(filtered(profile, SampleFilter(pids=frozenset({200}))).samples) == 5
    assert len(filtered(profile, SampleFilter(tids=frozenset({101}))).samples) == 5
    first = profile.samples[0].time_ns
    since = (profile.samples[50].time_ns - first) / 1e9
    assert len(filtered(profile, SampleFilter(since_s=since)).samples) == 10
    assert len(filtered(profile, SampleFilter(until_s=since)).samples) == 50


def test_diff_folded_scales_the_base():
    base, new = sample_profile(), sample_profile()
    new.info.frequency_hz = 198  # twice the rate: each base sample is worth two
    stream = io.StringIO()
    write_diff_folded(base, new, stream, normalize=False)
    lines = dict(line.rsplit(" ", 2)[0:1] + [line.rsplit(" ", 2)[1:]] for line in stream.getvalue().splitlines())
    assert lines["node;main;memcpy"] == ["10", "5"]
    stream = io.StringIO()
    write_diff_folded(base, new, stream, normalize=True)
    assert "node;main;memcpy 5 5" in stream.getvalue().splitlines()


def test_stack_counts_add_up_equal_stacks_and_follow_new_samples():
    """Counted once per distinct stack tuple and remembered: equal stacks in
    distinct tuples still add up, and a sample added after a count (or the
    samples taken by --push) is seen by the next one."""
    profile = Profile(RunInfo(["node"], [1], 99))
    main, leaf = profile.intern(MAIN), profile.intern(LEAF)
    for index in range(5):
        profile.add(Sample(index, 1, 1, "node", (main, leaf), WalkEnd.COMPLETE))  # a new tuple each time
    assert profile.stack_counts() == {("node", (main, leaf)): 5}
    counted = profile.stack_counts()
    counted[("node", (main,))] = 99  # a caller's changes stay its own
    profile.add(Sample(9, 1, 2, "node", (main,), WalkEnd.COMPLETE))
    assert profile.stack_counts() == {("node", (main, leaf)): 5, ("node", (main,)): 1}
    profile.take_samples()
    profile.add(Sample(10, 1, 2, "node", (main,), WalkEnd.COMPLETE))
    assert profile.stack_counts() == {("node", (main,)): 1}


ASYNC_HANDLER = Frame("[async] handler app.js:41", "[jit]", FrameKind.ASYNC, "/srv/app.js", 43, 28, "", False, True, 41, 3)


def test_async_callers_are_frames_in_every_format_but_cpuprofile(tmp_path):
    """An [async] frame is named in each format, drawn apart in the SVG and
    the page, kept by .jitprof, and left out of .cpuprofile (its tree is the stack)."""
    profile = Profile(RunInfo(["node", "app.js"], [100], 99, started_ns=1_000_000_000, ended_ns=2_000_000_000))
    ids = tuple(profile.intern(frame) for frame in [MAIN, ASYNC_HANDLER, MID, LEAF])
    for index in range(10):
        profile.add(Sample(1_000_000_000 + index * PERIOD_NS, 100, 100, "node", ids, WalkEnd.COMPLETE))
    folded = render(profile, "folded").decode()
    assert "node;main;[async] handler app.js:41;mid app.js:15_[i];leaf app.js:7_[i] 10" in folded
    svg = render(profile, "svg").decode()
    assert "[async] handler app.js:41" in svg
    for format_name in ("speedscope", "callgrind", "html"):
        assert b"[async] handler app.js:41" in render(profile, format_name), format_name
    assert b'"async"' in render(profile, "html")  # its own kind on the page
    assert b"[async] handler" in gzip.decompress(render(profile, "pprof"))
    cpuprofile = json.loads(render(profile, "cpuprofile"))
    names = [node["callFrame"]["functionName"] for node in cpuprofile["nodes"]]
    assert "mid" in names and not any("async" in name for name in names)
    path = tmp_path / "out.jitprof"
    path.write_bytes(render(profile, "jitprof"))
    again = read_raw(path)
    assert ASYNC_HANDLER in again.frames
