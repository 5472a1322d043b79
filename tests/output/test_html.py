"""report.html: one page with everything in it: the profile's distinct
stacks per thread, summed as the samples are, its functions with their tiers,
and nothing that could fetch or run what the profile holds."""

from __future__ import annotations

import io
import json
import re

from profiler.kernel.events import WalkEnd
from profiler.model.profile import Frame, FrameKind, Profile, RunInfo, Sample
from profiler.output import render
from profiler.output.html import tier_category, write_diff_html
from tests.output.test_formats import LEAF, MAIN, PERIOD_NS, sample_profile
from tests.output.test_off_cpu_formats import off_cpu_profile


def payload(page: str) -> dict:
    found = re.search(r'<script id="profile" type="application/json">(.*?)</script>', page, re.S)
    assert found is not None
    return json.loads(found.group(1))


def test_the_page_holds_every_sample_once_per_thread_and_stack():
    page = render(sample_profile(), "html").decode()
    data = payload(page)
    assert data["mode"] == "cpu" and data["summary"]["samples"] == 60 and data["summary"]["command"] == "node app.js"
    assert sorted(data["threads"]) == [[100, 100, "node"], [100, 101, "node"], [200, 200, "node"]]
    assert sum(stack[1] for stack in data["stacks"]) == 60
    names = [function[0] for function in data["functions"]]
    # The two lines of leaf are one function, as in the flame graph.
    assert names.count("leaf app.js:7") == 1
    leaf = data["functions"][names.index("leaf app.js:7")]
    assert leaf[1:] == ["/srv/app.js", 7, "[jit]", "inlined", "jit"]
    heaviest = max(data["stacks"], key=lambda stack: stack[1])
    assert heaviest[1] == 50 and [names[index] for index in heaviest[3]][-1] == "leaf app.js:7"


def test_the_page_fetches_nothing_and_runs_none_of_the_profile_s_text():
    profile = Profile(RunInfo(["node", "</title><script>alert(1)</script>"], [1], 99))
    hostile = Frame("</script><script>alert(2)</script><!--", "[jit]", FrameKind.JIT, "x\u2028y.js", 1, 1, "turbofan")
    profile.add(Sample(1, 1, 1, "<b>comm</b>", (profile.intern(MAIN), profile.intern(hostile)), WalkEnd.COMPLETE))
    page = render(profile, "html").decode()
    assert "alert(1)</script>" not in page and "<script>alert(2)" not in page and "<b>comm" not in page
    assert page.count("<script") == 2 and page.count("</script>") == 2  # the data and the page's own
    assert "default-src 'none'" in page
    assert (
        not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page) and "fetch(" not in page and "XMLHttpRequest" not in page
    )
    data = payload(page)
    assert data["functions"][1][0] == hostile.name and data["threads"][0][2] == "<b>comm</b>"


def test_the_run_s_warnings_are_in_the_summary_as_text():
    profile = sample_profile()
    profile.info.warnings = ["warning: <img src=x onerror=alert(3)> was not read"]
    page = render(profile, "html").decode()
    assert payload(page)["summary"]["warnings"] == profile.info.warnings
    assert "<img src=x" not in page  # escaped in the data, and set as text by the page
    assert payload(render(sample_profile(), "html").decode())["summary"]["warnings"] == []


def test_off_cpu_pages_carry_time_on_and_off_the_cpu_in_microseconds():
    profile = off_cpu_profile()
    data = payload(render(profile, "html").decode())
    assert data["mode"] == "offcpu" and data["summary"]["unit"] == "µs"
    cpu = sum(stack[1] for stack in data["stacks"])
    off = sum(stack[2] for stack in data["stacks"])
    cpu_samples = sum(1 for sample in profile.samples if not sample.off_cpu_ns)
    assert cpu == round(cpu_samples * profile.info.sample_period_ns / 1000)
    assert off == round(sum(sample.off_cpu_ns for sample in profile.samples) / 1000)


def test_a_diff_page_has_both_sides_with_the_base_scaled():
    base, new = sample_profile(), sample_profile()
    extra = (new.intern(MAIN), new.intern(LEAF))
    for index in range(20):
        new.add(Sample(10**10 + index * PERIOD_NS, 100, 100, "node", extra, WalkEnd.COMPLETE))
    stream = io.StringIO()
    write_diff_html(base, new, stream, 0.5)
    data = payload(stream.getvalue())
    assert data["mode"] == "diff" and data["summary"]["base_samples"] == 60
    assert sum(stack[1] for stack in data["stacks"]) == 80 and sum(stack[2] for stack in data["stacks"]) == 30


def test_a_diff_page_names_each_side_s_frames_from_its_own_frame_table():
    """The two profiles number their frames apart: base's frame 1 is not new's."""
    base, new = Profile(RunInfo(["a"], [1], 99)), Profile(RunInfo(["a"], [1], 99))
    f, g = (Frame(name, "[jit]", FrameKind.JIT, "/w.js", 1, 1, "turbofan") for name in ("f", "g"))
    base_stack = (base.intern(MAIN), base.intern(f), base.intern(g))  # f is 1 and g is 2 in base
    new_stack = (new.intern(MAIN), new.intern(g), new.intern(f))  # the other way round in new
    for index in range(10):
        base.add(Sample(index, 1, 1, "a", base_stack, WalkEnd.COMPLETE))
        new.add(Sample(index, 1, 1, "a", new_stack, WalkEnd.COMPLETE))
    stream = io.StringIO()
    write_diff_html(base, new, stream, 1.0)
    data = payload(stream.getvalue())
    names = [function[0] for function in data["functions"]]
    by_path = {tuple(names[index] for index in stack[3]): (stack[1], stack[2]) for stack in data["stacks"]}
    assert by_path == {(MAIN.name, "g", "f"): (10, 0), (MAIN.name, "f", "g"): (0, 10)}


def test_tiers_are_told_apart():
    def frame(kind: FrameKind, tier: str = "", inlined: bool = False) -> Frame:
        return Frame("f", "m", kind, tier=tier, inlined=inlined)

    assert tier_category(frame(FrameKind.JIT, "interpreted")) == "interpreted"
    assert tier_category(frame(FrameKind.JIT, "baseline")) == "baseline"
    assert tier_category(frame(FrameKind.JIT, "maglev")) == tier_category(frame(FrameKind.JIT, "ftl")) == "optimized"
    assert tier_category(frame(FrameKind.JIT, "turbofan", inlined=True)) == "inlined"
    assert tier_category(frame(FrameKind.NATIVE, "builtin")) == "runtime"
    assert tier_category(frame(FrameKind.NATIVE)) == "native"
    assert tier_category(frame(FrameKind.KERNEL)) == "kernel"
    assert tier_category(frame(FrameKind.UNKNOWN)) == "unknown"


def test_waits_and_threadpool_work_have_kinds_of_their_own():
    assert tier_category(Frame("(queued)", "", FrameKind.WAIT)) == "wait"
    assert tier_category(Frame("[threadpool] fs.readFile", "", FrameKind.WORK)) == "work"


def test_an_off_cpu_page_says_how_much_idle_time_it_leaves_out():
    profile = off_cpu_profile()
    profile.waits.idle_ns = 50_900_000_000
    assert payload(render(profile, "html").decode())["summary"]["idle_left_out_s"] == 50.9
    profile.info.idle_kept = True  # --idle: in the stacks, nothing left out
    assert payload(render(profile, "html").decode())["summary"]["idle_left_out_s"] == 0


def test_the_page_tells_each_stack_s_request_apart():
    """Samples with request labels: the page lists the requests (route,
    trace id) and each stack names its own, for the page's filters."""
    profile = sample_profile()
    checkout = profile.intern_labels((("trace_id", "ab" * 16), ("span_id", "cd" * 8), ("http.route", "/checkout")))
    for sample in profile.samples[:10]:
        sample.labels = checkout
    data = payload(render(profile, "html").decode())
    assert data["requests"] == [["", ""], ["/checkout", "ab" * 16]]
    assert sum(stack[1] for stack in data["stacks"] if stack[4] == 1) == 10
    assert sum(stack[1] for stack in data["stacks"]) == 60
