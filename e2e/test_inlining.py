"""Inlined JS functions restored from V8's code log, with source lines."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import pytest

from e2e.conftest import FoldedLine, read_folded, total, wait_for_cpu
from e2e.test_node import JS, no_stray_perf_maps, node_binary


def function_name(label: str) -> str:
    return label.split(" ", 1)[0]


def inclusive_share(lines: list[FoldedLine], name: str) -> float:
    hits = sum(line.count for line in lines if any(function_name(frame) == name for frame in line.frames))
    return hits / total(lines)


def own_share(lines: list[FoldedLine], name: str) -> float:
    return sum(line.count for line in lines if function_name(line.frames[-1]) == name) / total(lines)


def chain_share(lines: list[FoldedLine], chain: list[str]) -> tuple[float, float]:
    """Share of samples with chain contiguous, and of those whose last link is inlined."""
    found = inlined = 0
    for line in lines:
        names = [function_name(frame) for frame in line.frames]
        for start in range(len(names) - len(chain) + 1):
            if names[start : start + len(chain)] == chain:
                found += line.count
                if line.frames[start + len(chain) - 1].endswith("_[i]"):
                    inlined += line.count
                break
    return found / total(lines), inlined / max(found, 1)


def phase_ms(stdout: str) -> tuple[int, int]:
    """The two phases' main-thread CPU time, as identical.js measured it."""
    match = re.search(r"a: (\d+) ms, b: (\d+) ms", stdout)
    assert match, stdout
    return int(match.group(1)), int(match.group(2))


def phase_share(stdout: str) -> float:
    """a's share of the two phases' main-thread CPU time."""
    a_ms, b_ms = phase_ms(stdout)
    return a_ms / (a_ms + b_ms)


@pytest.mark.parametrize("major", ["20", "22", "24", "26"])
def test_identical_functions_get_their_true_shares(jitprof, tmp_path, major):
    """a and b do the same work; where V8 happens to run them equally fast they
    get equal shares. V8 does not always (inlined or called, OSR or not, the
    phases differ by up to 30 % run to run), so the truth the profile must
    match is the main thread's CPU time in each phase, which the fixture
    measures itself."""
    node = node_binary(major)
    run = jitprof("-F", "499", "--by-pid", "-o", "out.folded", "--", str(node), str(JS / "identical.js"), "1")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    # As many samples as the phases' CPU time makes at 499 Hz (a faster CPU ends them sooner).
    assert total(lines) >= 0.8 * 499 * sum(phase_ms(run.stdout)) / 1000, run.stdout
    a, b = inclusive_share(lines, "a"), inclusive_share(lines, "b")
    truth = phase_share(run.stdout)
    assert a + b > 0.85, (a, b)
    assert abs(a / (a + b) - truth) <= 0.05, (a, b, run.stdout)
    if 0.4875 <= truth <= 0.5125:  # the phases took the same time (within 5 %): the shares are within 10 % of each other
        assert abs(a - b) / max(a, b) <= 0.10, (a, b, run.stdout)
    assert own_share(lines, "test") < 0.05
    # The frames that make it right are marked inlined.
    inlined = sum(line.count for line in lines if any(frame.endswith("_[i]") for frame in line.frames))
    assert inlined / total(lines) > 0.3
    # The code logs and perf maps the injected flags made are gone.
    assert not list(tmp_path.glob("isolate-*.log"))
    no_stray_perf_maps({line.frames[0].rsplit("-", 1)[1] for line in lines})


@pytest.mark.parametrize("major", ["20", "24"])
def test_no_inline_shows_the_skew(jitprof, tmp_path, major):
    """Without inline recovery the profile is as wrong as perf's: proof that
    the recovery is what fixes it."""
    node = node_binary(major)
    run = jitprof("-F", "499", "--no-inline", "-o", "out.folded", "--", str(node), str(JS / "identical.js"), "1")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    a, b = inclusive_share(lines, "a"), inclusive_share(lines, "b")
    wrong_by = abs(a / max(a + b, 1e-9) - phase_share(run.stdout))
    assert own_share(lines, "test") > 0.2 or wrong_by > 0.15, (a, b, run.stdout)
    assert not any(frame.endswith("_[i]") for line in lines for frame in line.frames)


def svg_titles(path: Path, name: str) -> list[str]:
    return [unescape(title) for title in re.findall(r"<title>([^<]*)</title>", path.read_text()) if title.startswith(name + " ")]


@pytest.mark.parametrize("major", ["20", "24"])
def test_three_level_chain_and_hot_line(jitprof, tmp_path, major):
    node = node_binary(major)
    script = JS / "inline_chain.js"
    hot_line = next(number for number, text in enumerate(script.read_text().splitlines(), 1) if "// HOT" in text)
    run = jitprof("-F", "499", "-o", "out.folded", "-o", "out.svg", "--", str(node), str(script), "3")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    # Judged over the script's own work (its run loop), not node's start-up,
    # which a slower machine makes a larger part of the 3 s.
    in_run = [line for line in lines if any(function_name(frame) == "run" for frame in line.frames)]
    assert total(in_run) >= 0.5 * total(lines), (total(in_run), total(lines))
    share, inlined = chain_share(in_run, ["top", "mid", "leaf"])
    assert share >= 0.9, share
    assert inlined >= 0.8, inlined  # TurboFan inlined leaf: the stack is restored, not walked
    # The flame graph's leaf box names its hottest line: the HOT one.
    titles = svg_titles(tmp_path / "out.svg", "leaf")
    biggest = max(titles, key=lambda title: int(re.search(r"\(([\d,]+) samples", title).group(1).replace(",", "")))
    hottest = re.search(r"hottest line (\d+) \((\d+)%\)", biggest)
    assert hottest is not None, biggest
    assert int(hottest.group(1)) == hot_line and int(hottest.group(2)) > 50, biggest
    assert "inlined" in biggest and str(script) in biggest


def test_worker_thread_inlined_frames(jitprof, tmp_path):
    run = jitprof("-F", "499", "-o", "out.folded", "--", "node", str(JS / "inline_chain.js"), "3", "--worker")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    in_worker = [line for line in lines if any("node:internal/main/worker_thread" in frame for frame in line.frames)]
    assert total(in_worker) / total(lines) >= 0.8
    share, inlined = chain_share(in_worker, ["top", "mid", "leaf"])
    assert share >= 0.9 and inlined >= 0.8, (share, inlined)
    assert not list(tmp_path.glob("isolate-*.log"))


def test_attach_reads_the_log_of_a_node_started_with_log_code(jitprof, tmp_path, background):
    """--pid: a node the user started with --log-code has its log found
    through its open descriptors, wherever --logfile put it."""
    log = tmp_path / "custom-v8.log"
    target = background(
        "node",
        "--perf-basic-prof",
        "--interpreted-frames-native-stack",
        "--log-code",
        "--no-logfile-per-isolate",
        f"--logfile={log}",
        str(JS / "inline_chain.js"),
        "12",
        cwd=tmp_path,
    )
    wait_for_cpu(target.pid, 1.2)
    try:
        run = jitprof("-F", "499", "--no-v8-heap", "--pid", str(target.pid), "-d", "3", "-o", "out.folded")
    finally:
        target.kill()
        target.wait()
        Path(f"/tmp/perf-{target.pid}.map").unlink(missing_ok=True)
    assert run.returncode == 0, run.stderr
    assert "code log" not in run.stderr  # no "does not write V8's code log" note
    share, inlined = chain_share(read_folded(tmp_path / "out.folded"), ["top", "mid", "leaf"])
    assert share >= 0.9 and inlined >= 0.8, (share, inlined)
    assert log.exists()  # the user's own log is not ours to remove


def test_attach_without_code_log_says_how(jitprof, tmp_path, background):
    target = background(
        "node",
        "--perf-basic-prof",
        "--interpreted-frames-native-stack",
        str(JS / "inline_chain.js"),
        "10",
        cwd=tmp_path,
    )
    wait_for_cpu(target.pid, 0.8)
    # Without V8's heap (read by default, which names inlined frames) the
    # perf map names no inlined functions: the hint says how to get them.
    try:
        run = jitprof("--no-v8-heap", "--pid", str(target.pid), "-d", "1", "-o", "out.folded")
    finally:
        target.kill()
        target.wait()
        Path(f"/tmp/perf-{target.pid}.map").unlink(missing_ok=True)
        for stray in tmp_path.glob("isolate-*.log"):
            stray.unlink()
    assert run.returncode == 0, run.stderr
    assert "does not write V8's code log" in run.stderr and "--log-code" in run.stderr
