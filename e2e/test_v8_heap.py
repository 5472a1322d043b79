"""JavaScript named from V8's own objects, in node processes started
without any flag: attached with --pid and seen under --all, on Node 20, 22,
24 and 26. What the frames must say is what the code log says (the tests
compare the two), what `node --cpu-prof` says, and where the time goes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from e2e.conftest import Run, attached_floor, cpu_seconds_of, jitprof_sampling, read_folded, total, wait_for_cpu
from e2e.test_inlining import chain_share, inclusive_share, own_share, phase_share, svg_titles
from e2e.test_node import JS, js_chain, node_binary
from profiler.model.profile import Frame, Profile
from profiler.model.raw import read_raw

MAJORS = ["20", "22", "24", "26"]
HOT_LINE = next(number for number, text in enumerate((JS / "inline_chain.js").read_text().splitlines(), 1) if "// HOT" in text)


def flagless(background, node: Path, *arguments: str, cwd: Path, stdout=subprocess.DEVNULL) -> subprocess.Popen:  # noqa: ANN001
    """node with no flag of jitprof's (nor NODE_OPTIONS): as services run.
    Its temporary files (tsc's compile cache) go to cwd, not /tmp."""
    environment = {key: value for key, value in os.environ.items() if key != "NODE_OPTIONS"}
    environment["TMPDIR"] = str(cwd)
    return background(str(node), *arguments, env=environment, cwd=cwd, stdout=stdout)


def unnamed_js_share(lines) -> float:  # noqa: ANN001
    unnamed = sum(line.count for line in lines if any(frame.startswith("[unknown] ([jit])") for frame in line.frames))
    return unnamed / total(lines)


def hottest_line(svg: Path, function: str) -> int:
    titles = svg_titles(svg, function)
    biggest = max(titles, key=lambda title: int(re.search(r"\(([\d,]+) samples", title).group(1).replace(",", "")))
    found = re.search(r"hottest line (\d+)", biggest)
    assert found is not None, biggest
    return int(found.group(1))


@pytest.mark.parametrize("major", MAJORS)
def test_attach_names_inlined_chain_without_flags(jitprof, tmp_path, background, major):
    node = node_binary(major)
    target = flagless(background, node, str(JS / "inline_chain.js"), "30", cwd=tmp_path)
    wait_for_cpu(target.pid, 1.2)  # past start-up: top is optimized with mid and leaf inlined
    before = cpu_seconds_of(target.pid, main_thread=False)
    run = jitprof("-F", "499", "--pid", str(target.pid), "-d", "3", "-o", "out.folded", "-o", "out.svg")
    assert run.returncode == 0, run.stderr
    ran = cpu_seconds_of(target.pid, main_thread=False) - before
    assert "perf map" not in run.stderr and "restart" not in run.stderr, run.stderr  # nothing to fix
    lines = read_folded(tmp_path / "out.folded")
    assert total(lines) >= attached_floor(499, 3, ran), (total(lines), ran)
    assert unnamed_js_share(lines) <= 0.05
    share, inlined = chain_share(lines, ["top", "mid", "leaf"])
    assert share >= 0.9 and inlined >= 0.9, (share, inlined)
    assert hottest_line(tmp_path / "out.svg", "leaf") == HOT_LINE
    assert not list(tmp_path.glob("*.log")) and not Path(f"/tmp/perf-{target.pid}.map").exists()  # nothing written


@pytest.mark.parametrize("major", MAJORS)
def test_all_processes_names_nodes_started_without_flags(symbol_cache, tmp_path, background, major):
    """--all, with two flagless nodes: the inlined chain, and the a/b case
    (its phases begin once jitprof samples, and it stops once they end: the
    profile covers what the fixture measured, on a CPU of any speed)."""
    node = node_binary(major)
    chain = flagless(background, node, str(JS / "inline_chain.js"), "60", cwd=tmp_path)
    output = tmp_path / "phases.txt"
    go = tmp_path / "go"
    with output.open("w") as stdout:
        done = tmp_path / "done"
        phases = flagless(background, node, str(JS / "identical.js"), "1", str(go), str(done), cwd=tmp_path, stdout=stdout)
        jitprof_run = jitprof_sampling(symbol_cache, tmp_path, "--all", "--by-pid", "-F", "499", "-o", "out.folded")
        chain_cpu = cpu_seconds_of(chain.pid)
        go.touch()
        deadline = time.monotonic() + 120
        while "main-thread CPU" not in output.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        # Stopped while node is there: its last samples are named from its memory.
        jitprof_run.send_signal(signal.SIGINT)
        chain_cpu = cpu_seconds_of(chain.pid) - chain_cpu  # at least what jitprof sampled of it
        _stdout, stderr = jitprof_run.communicate(timeout=120)
        done.touch()
        phases.wait(timeout=60)
    run = Run(jitprof_run.returncode, "", stderr)
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    of_chain = [line for line in lines if line.frames[0].endswith(f"-{chain.pid}")]
    # Its main thread's samples, against the CPU time it ran meanwhile (on a
    # half-speed CPU it shares one core with the other node: 913 samples).
    assert total(of_chain) >= 0.8 * 499 * chain_cpu and chain_cpu >= 0.5, (total(of_chain), chain_cpu)
    share, inlined = chain_share(of_chain, ["top", "mid", "leaf"])
    assert share >= 0.9 and inlined >= 0.9, (share, inlined)
    assert unnamed_js_share(of_chain) <= 0.05
    of_phases = [line for line in lines if line.frames[0].endswith(f"-{phases.pid}")]
    a, b = inclusive_share(of_phases, "a"), inclusive_share(of_phases, "b")
    truth = phase_share(output.read_text())
    assert abs(a / (a + b) - truth) <= 0.05, (a, b, truth)


@pytest.mark.parametrize("major", MAJORS)
def test_identical_functions_attached(jitprof, tmp_path, background, major):
    """CPUpro's a/b case, attached: the shares follow the main thread's CPU
    time in each phase, which the fixture measures itself."""
    node = node_binary(major)
    output = tmp_path / "phases.txt"
    with output.open("w") as stdout:
        target = flagless(background, node, str(JS / "identical.js"), "1", "2", cwd=tmp_path, stdout=stdout)
        run = jitprof("-F", "499", "--pid", str(target.pid), "-o", "out.folded")  # until it exits
        target.wait(timeout=60)
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    a, b = inclusive_share(lines, "a"), inclusive_share(lines, "b")
    truth = phase_share(output.read_text())
    assert a + b > 0.85, (a, b)
    assert abs(a / (a + b) - truth) <= 0.05, (a, b, truth)
    if 0.4875 <= truth <= 0.5125:
        assert abs(a - b) / max(a, b) <= 0.10, (a, b, truth)
    assert own_share(lines, "test") < 0.05


def js_frames(profile: Profile, script: str) -> list[Frame]:
    return [frame for frame in profile.frames if frame.file.endswith(script)]


@pytest.mark.parametrize("major", MAJORS)
def test_function_lines_are_cpu_profs(jitprof, tmp_path, background, major):
    """The line each function begins on and the line it spends most time on
    are what node's own profiler says."""
    target = flagless(
        background, node_binary(major), "--cpu-prof", f"--cpu-prof-dir={tmp_path}", str(JS / "chain.js"), "4", cwd=tmp_path
    )
    wait_for_cpu(target.pid, 0.8)
    run = jitprof("-F", "499", "--pid", str(target.pid), "-o", "out.jitprof", "-o", "out.svg")
    target.wait(timeout=60)
    assert run.returncode == 0, run.stderr
    (cpu_profile,) = tmp_path.glob("*.cpuprofile")
    nodes = json.loads(cpu_profile.read_text())["nodes"]
    theirs: dict[str, int] = {}
    hot_lines: dict[str, dict[int, int]] = {}
    for node in nodes:
        frame = node["callFrame"]
        if frame["url"].endswith("chain.js") and frame["functionName"] in ("outer", "middle", "inner"):
            theirs[frame["functionName"]] = frame["lineNumber"] + 1
            for tick in node.get("positionTicks", []):
                lines = hot_lines.setdefault(frame["functionName"], {})
                lines[tick["line"]] = lines.get(tick["line"], 0) + tick["ticks"]
    ours = {frame.name.split(" ")[0]: frame.function_line for frame in js_frames(read_raw(tmp_path / "out.jitprof"), "chain.js")}
    assert theirs and all(ours.get(name) == line for name, line in theirs.items()), (ours, theirs)
    assert hottest_line(tmp_path / "out.svg", "inner") == max(hot_lines["inner"].items(), key=lambda item: item[1])[0]


@pytest.mark.parametrize("major", MAJORS)
def test_jitless_interpreter_frames_named_with_lines(jitprof, tmp_path, background, major):
    target = flagless(background, node_binary(major), "--jitless", str(JS / "chain.js"), "30", cwd=tmp_path)
    wait_for_cpu(target.pid, 0.8)
    run = jitprof("-F", "499", "--pid", str(target.pid), "-d", "3", "-o", "out.folded", "-o", "out.jitprof")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    assert sum(line.count for line in lines if js_chain(line.frames)) / total(lines) >= 0.95
    frames = js_frames(read_raw(tmp_path / "out.jitprof"), "chain.js")
    assert frames and all(frame.tier == "interpreted" for frame in frames)
    assert sum(frame.line_exact for frame in frames) / len(frames) >= 0.95
    # The interpreter's bytecode handlers, named as V8's code log names them
    # (in node's own text on Node 20, `Builtins_ReturnHandler` there).
    leaves = {line.frames[-1] for line in lines}
    assert any(leaf.startswith("[bytecode] ") for leaf in leaves), sorted(leaves)[:20]
    assert not [leaf for leaf in leaves if re.fullmatch(r"\[builtin\] \w+Handler", leaf)]


def stacks_with_lines(path: Path, script: str) -> dict[tuple[tuple[str, int, int, bool], ...], int]:
    """Each stack's compiled frames of script (interpreted ones the code log
    cannot name without --interpreted-frames-native-stack): (function, its
    line, the line, inlined), with sample counts."""
    profile = read_raw(path)
    counts: dict[tuple[tuple[str, int, int, bool], ...], int] = {}
    for sample in profile.samples:
        frames = [
            profile.frames[index]
            for index in sample.frame_ids
            if profile.frames[index].file.endswith(script) and profile.frames[index].tier != "interpreted"
        ]
        key = tuple((frame.name.split(" ")[0], frame.function_line, frame.line, frame.inlined) for frame in frames)
        counts[key] = counts.get(key, 0) + 1
    return counts


@pytest.mark.parametrize("major", ["20", "24"])
def test_heap_and_code_log_agree(jitprof, tmp_path, background, major):
    """A node that writes V8's code log, named from the log and from its heap:
    the hottest stacks are the same functions, lines and inline chains."""
    target = background(
        str(node_binary(major)),
        "--perf-basic-prof",
        "--log-code",
        "--no-logfile-per-isolate",
        f"--logfile={tmp_path / 'v8.log'}",
        str(JS / "inline_chain.js"),
        "30",
        cwd=tmp_path,
    )
    time.sleep(1.5)
    try:
        from_log = jitprof("-F", "499", "--pid", str(target.pid), "-d", "2", "--no-v8-heap", "-o", "log.jitprof")
        from_heap = jitprof("-F", "499", "--pid", str(target.pid), "-d", "2", "-o", "heap.jitprof")
    finally:
        target.kill()
        target.wait()
        Path(f"/tmp/perf-{target.pid}.map").unlink(missing_ok=True)
    assert from_log.returncode == 0 and from_heap.returncode == 0, from_log.stderr + from_heap.stderr
    log_stacks = stacks_with_lines(tmp_path / "log.jitprof", "inline_chain.js")
    heap_stacks = stacks_with_lines(tmp_path / "heap.jitprof", "inline_chain.js")
    hottest = max(log_stacks, key=log_stacks.get)
    assert [frame[0] for frame in hottest][-3:] == ["top", "mid", "leaf"], hottest
    assert hottest == max(heap_stacks, key=heap_stacks.get)
    # Every stack the heap names that the log names too is the same.
    shared = set(log_stacks) & set(heap_stacks)
    assert sum(heap_stacks[stack] for stack in shared) / sum(heap_stacks.values()) >= 0.9


APPS = Path(__file__).resolve().parent.parent / ".nodes" / "apps" / "node_modules"
V8_LOGGING = re.compile(r"V8FileLogger|LogFile::|EnsureLogScriptSource|PerfBasicLogger|CodeEventLogger|ExistingCodeLogger")


def test_spawned_tsc_pays_little_for_being_profiled(jitprof, tmp_path):
    """What jitprof asks V8 to do for a spawned program (a perf map, for
    processes gone before their heap is read) costs it under 1 % of its
    samples, and its JavaScript is named all the same."""
    tsc = APPS / "typescript" / "bin" / "tsc"
    if not tsc.exists():
        pytest.skip("typescript is not installed (make setup installs it)")
    declarations = APPS / "typescript" / "lib" / "typescript.d.ts"
    run = jitprof("-F", "499", "-o", "out.folded", "--", "node", str(tsc), "--noEmit", "--target", "es2020", str(declarations))
    assert run.returncode == 0, run.stderr + run.stdout
    lines = read_folded(tmp_path / "out.folded")
    assert total(lines) >= 500
    logging = sum(line.count for line in lines if any(V8_LOGGING.search(frame) for frame in line.frames))
    assert logging / total(lines) <= 0.01, logging
    assert unnamed_js_share(lines) <= 0.02
    checker = sum(line.count for line in lines if any(frame.startswith("checkSourceElement ") for frame in line.frames))
    assert checker / total(lines) >= 0.1  # the type checker's work is where it is


def wait_for_text(path: Path, text: str, process: subprocess.Popen, deadline: float = 60.0) -> None:
    """Until the file the process writes as it works holds text."""
    end = time.monotonic() + deadline
    while time.monotonic() < end and process.poll() is None:
        try:
            if text in path.read_text(errors="replace"):
                return
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    pytest.fail(f"{path.name} never said {text} (the process {'exited' if process.poll() is not None else 'ran on'})")


def js_frame_counts(lines) -> tuple[int, int]:  # noqa: ANN001
    """(named, unnamed) JavaScript frames over all samples."""
    named = sum(line.count * sum(1 for frame in line.frames if ".js:" in frame) for line in lines)
    unnamed = sum(line.count * sum(1 for frame in line.frames if frame.startswith("[unknown] ([jit])")) for line in lines)
    return named, unnamed


@pytest.mark.parametrize(("major", "cache"), [("20", "warm"), ("26", "warm"), ("26", "cold")])
def test_attached_real_program_with_deep_stacks_is_named(jitprof, tmp_path, background, major, cache):
    """tsc checking TypeScript's own compiler as JavaScript, started without
    flags and attached while it runs: its checker recurses 60 to 120 JS frames
    deep, every one of them named from V8's objects (an attached node has no
    perf map to fall back on), with jitprof's caches empty or not."""
    tsc = APPS / "typescript" / "bin" / "tsc"
    if not tsc.exists():
        pytest.skip("typescript is not installed (make setup installs it)")
    source = APPS / "typescript" / "lib" / "typescript.js"
    # Its trace (written as it goes) says when the type checker begins: after
    # 2.9 s of CPU on one machine, 4 s on another.
    trace = tmp_path / "trace"
    arguments = ["--noEmit", "--allowJs", "--checkJs", "--target", "es2020", "--skipLibCheck", "--generateTrace", str(trace)]
    target = flagless(background, node_binary(major), str(tsc), *arguments, str(source), cwd=tmp_path)
    wait_for_text(trace / "trace.json", '"name":"checkSourceFile"', target)
    environment = {"JITPROF_CACHE_DIR": str(tmp_path / "empty-cache")} if cache == "cold" else None
    run = jitprof("-F", "499", "--pid", str(target.pid), "-d", "2", "-o", "out.folded", env=environment)
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    assert total(lines) >= 200  # enough for the shares below (their standard error under 1.5 points)
    named, unnamed = js_frame_counts(lines)
    assert unnamed / (named + unnamed) <= 0.04, (named, unnamed)  # measured: 0.0-2.2 %
    deep = [line for line in lines if sum(".js:" in frame for frame in line.frames) >= 80]
    assert total(deep) / total(lines) >= 0.1  # the stacks the test is about (17-40 % of samples)
    deep_named, deep_unnamed = js_frame_counts(deep)
    assert deep_unnamed / (deep_named + deep_unnamed) <= 0.04, (deep_named, deep_unnamed)
    checker = sum(line.count for line in lines if any(frame.startswith("checkSourceElement ") for frame in line.frames))
    assert checker / total(lines) >= 0.3  # where its time goes (the rest: parsing, binding, GC)


@pytest.mark.parametrize("major", ["20", "26"])
def test_code_made_by_new_function_is_named(jitprof, tmp_path, background, major):
    """Its script has no name: the frame says <anonymous> where a file would
    be, as V8's stack traces do, not `anonymous :1`."""
    target = flagless(background, node_binary(major), str(JS / "new_function.js"), "30", cwd=tmp_path)
    time.sleep(1.0)
    run = jitprof("-F", "499", "--pid", str(target.pid), "-d", "2", "-o", "out.folded")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    made = sum(line.count for line in lines if any(" <anonymous>:" in frame for frame in line.frames))
    assert made / total(lines) >= 0.5, (made, total(lines))
    assert not [frame for line in lines for frame in line.frames if re.search(r" :\d+", frame)]


def callers_of(lines, callee: str) -> dict[str, int]:  # noqa: ANN001
    """The frame above each `callee` frame, by name, with its samples."""
    found: dict[str, int] = {}
    for line in lines:
        for above, frame in zip(line.frames, line.frames[1:]):
            if frame.split(" ")[0] == callee:
                name = above.split(" ")[0]
                found[name] = found.get(name, 0) + line.count
    return found


@pytest.mark.parametrize("tier", ["jit", "jitless"])
def test_functions_moved_by_the_scavenger_keep_their_names(jitprof, tmp_path, background, tier):
    """alpha and beta are made anew on every call and scavenged ~50 times a
    second, each reusing the other's addresses: the kernel's table of
    functions read must never name one's frame by the other."""
    flags = ["--jitless"] if tier == "jitless" else []
    target = flagless(background, node_binary("22"), *flags, str(JS / "moving_closures.js"), "30", cwd=tmp_path)
    time.sleep(1.0)
    run = jitprof("-F", "999", "--pid", str(target.pid), "-d", "3", "-o", "out.folded")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    under_alpha, under_beta = callers_of(lines, "innerAlpha"), callers_of(lines, "innerBeta")
    assert under_alpha.get("alpha", 0) / total(lines) >= 0.2, under_alpha
    assert under_beta.get("beta", 0) / total(lines) >= 0.2, under_beta
    assert "beta" not in under_alpha and "alpha" not in under_beta, (under_alpha, under_beta)


def descend_depths(lines) -> list[tuple[int, bool, int]]:  # noqa: ANN001
    """Per folded line with the fixture's recursion: how many descend frames,
    whether it reaches node's entry, and its samples."""
    found = []
    for line in lines:
        depth = sum(frame.startswith("descend deep.js:") for frame in line.frames)
        if depth:
            found.append((depth, "node::Start(int, char**)" in line.frames, line.count))
    return found


@pytest.mark.parametrize(("mode", "depth"), [("attached", 400), ("attached", 1000), ("jitless", 400), ("spawned", 400)])
def test_deep_stacks_reach_their_root(jitprof, tmp_path, background, mode, depth):
    """Past the 127 frames the kernel walks, the rest of the stack is copied
    and walked in user space: a 400- and a 1,000-deep JS recursion keep their
    root, and every descend frame is named."""
    script = [str(JS / "deep.js"), "30", str(depth)]
    if mode in ("attached", "jitless"):
        # --jitless: every frame interpreted, the deep ones named by their bytecode's owner.
        flags = ["--jitless"] if mode == "jitless" else []
        target = flagless(background, node_binary("22"), *flags, *script, cwd=tmp_path)
        time.sleep(1.0)
        run = jitprof("-F", "199", "--pid", str(target.pid), "-d", "3", "-o", "out.folded")
    else:
        script[1] = "3"
        run = jitprof("-F", "199", "-o", "out.folded", "--", "node", *script)
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    found = descend_depths(lines)
    in_recursion = sum(count for _depth, _rooted, count in found)
    assert in_recursion / total(lines) >= 0.5, (in_recursion, total(lines))
    rooted = sum(count for _depth, rooted, count in found if rooted)
    assert rooted / in_recursion >= 0.95, (rooted, in_recursion, sorted({frames for frames, _rooted, _count in found})[:10])
    # At the bottom (in spin), all of the recursion is there and named.
    bottom = [(frames_depth, count) for frames_depth, _rooted, count in found if frames_depth > depth]
    assert sum(count for _frames, count in bottom) / in_recursion >= 0.9, sorted({frames for frames, _count in bottom})[:5]
