"""--off-cpu in every output: a profile of CPU samples and waits, written in
each format and read back the way its users' tools read it."""

from __future__ import annotations

import gzip
import io
import json
import re

import pytest

from profiler.kernel.events import WalkEnd
from profiler.model.profile import Frame, FrameKind, Profile, RunInfo, Sample
from profiler.model.raw import RawProfileError, read_raw, write_raw
from profiler.output.callgrind import write_callgrind
from profiler.output.cpuprofile import write_cpuprofile
from profiler.output.folded import fold
from profiler.output.pprof import write_pprof
from profiler.output.report import write_diff_folded
from profiler.output.speedscope import write_speedscope
from profiler.output.svg import OFF_CPU_TITLE, write_svg
from profiler.symbolize.waits import IDLE, OFF_CPU
from tests.helpers import native, read_uleb

PERIOD_NS = 1_000_000_000 // 99
MAIN = [native("main"), native("work")]
WAIT = [native("main"), native("wait_here"), native("read")]


def off_cpu_profile(cpu_samples: int = 30, waits: list[int] | None = None, separate_waits: int = 0) -> Profile:
    """cpu_samples CPU samples in work(), and waits (ns each) in wait_here()."""
    profile = Profile(RunInfo(["prog"], [7], 99, off_cpu=True, shortest_wait_ns=1_000_000), separate_waits=separate_waits)
    cpu_ids = tuple(profile.intern(frame) for frame in MAIN)
    wait_ids = tuple(profile.intern(frame) for frame in [*WAIT, OFF_CPU])
    time_ns = 0
    for _ in range(cpu_samples):
        time_ns += PERIOD_NS
        profile.add(Sample(time_ns, 7, 7, "prog", cpu_ids, WalkEnd.COMPLETE))
    for waited in waits if waits is not None else [200_000_000, 100_000_000]:
        time_ns += waited
        profile.add(Sample(time_ns, 7, 7, "prog", wait_ids, WalkEnd.COMPLETE, waited))
    profile.info.started_ns, profile.info.ended_ns = 0, time_ns
    return profile


def test_folded_counts_microseconds_on_and_off_the_cpu():
    stacks = {";".join(stack.frames): stack.count for stack in fold(off_cpu_profile())}
    assert stacks == {"prog;main;work": 30 * PERIOD_NS // 1000, "prog;main;wait_here;read;(off-CPU)": 300_000}


def test_folded_without_off_cpu_counts_samples():
    profile = off_cpu_profile(waits=[])
    profile.info.off_cpu = False
    assert [stack.count for stack in fold(profile)] == [30]


def read_pprof(data: bytes) -> dict[str, object]:
    """The fields of profile.proto these tests need, decoded by hand (the e2e
    tests use an independent reader)."""

    def fields(buffer: bytes) -> list[tuple[int, int | bytes]]:
        found: list[tuple[int, int | bytes]] = []
        position = 0
        while position < len(buffer):
            key, position = read_uleb(buffer, position)
            if key & 7 == 0:
                value, position = read_uleb(buffer, position)
                found.append((key >> 3, value))
            else:
                length, position = read_uleb(buffer, position)
                found.append((key >> 3, buffer[position : position + length]))
                position += length
        return found

    def packed(buffer: bytes) -> list[int]:
        values, position = [], 0
        while position < len(buffer):
            value, position = read_uleb(buffer, position)
            values.append(value)
        return values

    top = fields(gzip.decompress(data))
    strings = [value.decode() for field, value in top if field == 6 and isinstance(value, bytes)]
    sample_types = []
    samples = []
    for field, value in top:
        if field == 1 and isinstance(value, bytes):
            parts = dict(fields(value))
            sample_types.append((strings[int(parts[1])], strings[int(parts[2])]))
        elif field == 2 and isinstance(value, bytes):
            samples.append(packed(next(part for number, part in fields(value) if number == 2)))  # type: ignore[arg-type]
    return {"sample_types": sample_types, "samples": samples}


def test_pprof_has_cpu_and_off_cpu_nanoseconds():
    stream = io.BytesIO()
    write_pprof(off_cpu_profile(), stream)
    decoded = read_pprof(stream.getvalue())
    assert decoded["sample_types"] == [("samples", "count"), ("cpu", "nanoseconds"), ("off_cpu", "nanoseconds")]
    values = sorted(decoded["samples"])  # type: ignore[arg-type]
    assert values == [[2, 0, 300_000_000], [30, 30 * PERIOD_NS, 0]]
    assert all(cpu == 0 or off == 0 for _, cpu, off in values)  # never counted as both


def test_pprof_without_off_cpu_keeps_two_types():
    profile = off_cpu_profile(waits=[])
    profile.info.off_cpu = False
    stream = io.BytesIO()
    write_pprof(profile, stream)
    assert read_pprof(stream.getvalue())["sample_types"] == [("samples", "count"), ("cpu", "nanoseconds")]


def test_svg_title_says_time_and_waits_are_blue():
    text = io.StringIO()
    write_svg(off_cpu_profile(), text)
    svg = text.getvalue()
    assert OFF_CPU_TITLE in svg
    boxes = re.findall(r'<title>([^<]*)</title><rect [^>]*fill="rgb\((\d+),(\d+),(\d+)\)"', svg)
    fills = {title.split(" ")[0]: (int(red), int(green), int(blue)) for title, red, green, blue in boxes}
    for name in ("wait_here", "read", "(off-CPU)"):
        red, green, blue = fills[name]
        assert blue > red and blue > green, (name, fills[name])
    red, green, blue = fills["work"]
    assert red > blue  # CPU time stays warm
    assert "µs" in svg and "100% off-CPU" in svg


def test_speedscope_weights_are_each_samples_time():
    stream = io.BytesIO()
    write_speedscope(off_cpu_profile(), stream)
    document = json.loads(stream.getvalue())
    (thread,) = document["profiles"]
    assert thread["unit"] == "nanoseconds"
    assert sorted(set(thread["weights"])) == [PERIOD_NS, 100_000_000, 200_000_000]
    assert thread["endValue"] == sum(thread["weights"]) == 30 * PERIOD_NS + 300_000_000


def test_callgrind_has_two_events():
    stream = io.BytesIO()
    write_callgrind(off_cpu_profile(), stream)
    text = stream.getvalue().decode()
    assert "events: CPU OffCPU" in text
    assert f"summary: {30 * PERIOD_NS // 1000} 300000" in text.replace(",", "")
    names = dict(re.findall(r"fn=\((\d+)\) (\S+)", text))
    own_costs = {names[number]: costs for number, costs in re.findall(r"\nfn=\((\d+)\)[^\n]*\n(0 \d+ \d+)\n", text)}
    assert own_costs["work"] == f"0 {round(30 * PERIOD_NS / 1000)} 0"
    assert own_costs["(off-CPU)"] == "0 0 300000"


def test_cpuprofile_keeps_cpu_samples_only():
    stream = io.BytesIO()
    write_cpuprofile(off_cpu_profile(), stream)
    document = json.loads(stream.getvalue())
    assert len(document["samples"]) == 30
    names = {node["callFrame"]["functionName"] for node in document["nodes"]}
    assert "wait_here" not in names and "(off-CPU)" not in names


def test_jitprof_file_keeps_waits_and_reads_back(tmp_path):
    profile = off_cpu_profile()
    profile.waits.short_ns, profile.waits.short_waits, profile.waits.idle_ns = 5_000_000, 40, 9_000_000_000
    path = tmp_path / "run.jitprof"
    with open(path, "wb") as stream:
        write_raw(profile, stream)
    back = read_raw(path)
    assert back.info.off_cpu and back.info.shortest_wait_ns == 1_000_000
    assert [sample.off_cpu_ns for sample in back.samples] == [sample.off_cpu_ns for sample in profile.samples]
    assert (back.waits.short_ns, back.waits.short_waits, back.waits.idle_ns) == (5_000_000, 40, 9_000_000_000)
    assert fold(back) == fold(profile)
    with gzip.open(path) as stream:
        assert json.loads(stream.readline())["version"] == 2


def test_jitprof_file_refuses_a_wait_in_a_cpu_only_profile(tmp_path):
    profile = off_cpu_profile(cpu_samples=1, waits=[])
    path = tmp_path / "run.jitprof"
    with open(path, "wb") as stream:
        write_raw(profile, stream)
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    header = json.loads(lines[0])
    del header["info"]["off_cpu"]
    lines[0] = json.dumps(header)
    lines[-1] = lines[-1][:-1] + ",5000]"  # a wait's time on a sample of a profile without waits
    path.write_bytes(gzip.compress("\n".join(lines).encode()))
    with pytest.raises(RawProfileError, match="fields it cannot have"):
        read_raw(path)


def test_diff_of_two_off_cpu_profiles_compares_time():
    base = off_cpu_profile(waits=[100_000_000])
    new = off_cpu_profile(waits=[300_000_000])
    stream = io.StringIO()
    write_diff_folded(base, new, stream, normalize=False)
    lines = dict(line.rsplit(" ", 2)[0:1] + [line.rsplit(" ", 2)[1:]] for line in stream.getvalue().splitlines())  # type: ignore[misc]
    assert lines["prog;main;wait_here;read;(off-CPU)"] == ["100000", "300000"]


def test_idle_frame_is_a_wait():
    assert IDLE.kind is FrameKind.WAIT and OFF_CPU.kind is FrameKind.WAIT
    assert Frame("(idle)", "", FrameKind.WAIT) == IDLE


def test_diff_refuses_a_cpu_profile_against_an_off_cpu_one():
    from profiler.errors import JitprofError  # noqa: PLC0415

    cpu_only = off_cpu_profile(waits=[])
    cpu_only.info.off_cpu = False
    with pytest.raises(JitprofError, match="time off the CPU and the other not"):
        write_diff_folded(cpu_only, off_cpu_profile(), io.StringIO(), normalize=False)


def test_a_storm_of_waits_is_summed_past_the_separate_ones():
    """Past MAX_SEPARATE_WAITS, a wait of a thread and stack already seen is
    added into that sample: the time stays whole, the memory bounded."""
    from profiler.run.summary import off_cpu_text

    profile = off_cpu_profile(cpu_samples=2, waits=[], separate_waits=3)
    wait_ids = tuple(profile.intern(frame) for frame in [*WAIT, OFF_CPU])
    for index in range(10):
        profile.add(Sample(index, 7, 7, "prog", wait_ids, WalkEnd.COMPLETE, 5_000_000))
    other_thread = profile.samples[-1]
    profile.add(Sample(other_thread.time_ns, 7, 8, "prog", other_thread.frame_ids, WalkEnd.COMPLETE, 7_000_000))
    waits = [sample for sample in profile.samples if sample.off_cpu_ns]
    assert len(waits) == 5  # three separate, then one for each thread
    assert sum(sample.off_cpu_ns for sample in waits) == 57_000_000
    assert profile.waits_summed == 6
    stacks = {";".join(stack.frames): stack.count for stack in fold(profile)}
    assert stacks["prog;main;wait_here;read;(off-CPU)"] == 57_000
    assert "6 waits past the first 3 added into earlier ones" in off_cpu_text(profile)
    # A view of it (source maps' originals, the JS view, a grouping) keeps the
    # totals it does not hold as samples, and sums nothing more.
    from profiler.jit.v8.js_view import js_only
    from profiler.output.originals import with_originals

    profile.waits.idle_ns = 14_700_000_000
    profile.originals[profile.frames[0]] = native("main_original")
    for view in (with_originals(profile), js_only(profile)):
        assert view.waits.idle_ns == 14_700_000_000 and view.waits_summed == 6
        assert sum(sample.off_cpu_ns for sample in view.samples) == 57_000_000
