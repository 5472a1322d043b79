"""What one profiling run costs, as a user feels it: `jitprof -- node work.js`
against the program alone, `perf record -F 99 -g` and `node --cpu-prof`,
cold (empty cache) and warm: the whole command's wall time and CPU, launch to
the program's first instruction, the end after it exits, the program's own
slowdown, the tool's own CPU and peak memory."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import goals
from benchmarks.harness import JITPROF, JS_WORKLOAD, NODE, rss_kib

ROUNDS = "40"  # about 1.2 s of work: short runs are where start and end show


@dataclass(frozen=True)
class RunCost:
    wall_s: float  # the whole command
    cpu_s: float  # the whole command, every process
    start_s: float  # launch to the program's first instruction
    work_s: float  # the program's own measure of its work
    end_s: float  # the program's last instruction to the command's end (approximate: its exit is a few ms after)
    tool_peak_rss_mib: float  # the tool's own process, not the program


def measure(prefix: list[str], workdir: Path, env: dict[str, str], watch: bool) -> RunCost:
    """prefix: the command up to the script (node itself, or a tool and node)."""
    command = [*prefix, str(JS_WORKLOAD), ROUNDS]
    launched_ns = time.time_ns()
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    peak = [0]
    done = threading.Event()

    def watch_memory() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], rss_kib(process.pid))

    watcher = threading.Thread(target=watch_memory, daemon=True)
    if watch:
        watcher.start()
    output, _ = process.communicate()
    ended_ns = time.time_ns()
    wall = time.monotonic() - started
    done.set()
    fields = dict(item.split("=") for item in output.split() if "=" in item)
    first_ns = int(fields["first_instruction_ns"])
    work_s = int(fields["elapsed_ns"]) / 1e9
    start_s = (first_ns - launched_ns) / 1e9
    return RunCost(wall, 0.0, start_s, work_s, (ended_ns - first_ns) / 1e9 - work_s, peak[0] / 1024)


def _children_cpu() -> float:
    import resource  # noqa: PLC0415

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure_with_cpu(prefix: list[str], workdir: Path, env: dict[str, str], watch: bool = True) -> RunCost:
    before = _children_cpu()
    cost = measure(prefix, workdir, env, watch)
    return RunCost(cost.wall_s, _children_cpu() - before, cost.start_s, cost.work_s, cost.end_s, cost.tool_peak_rss_mib)


def run_cost(repeats: int, perf: str | None, workdir: Path) -> list[str]:
    if not NODE.exists():
        return []
    plain = {key: value for key, value in os.environ.items() if key not in ("NODE_OPTIONS", "JITPROF_CACHE_DIR")}
    cold_cache = workdir / "cold-cache"
    warm_cache = workdir / "warm-cache"
    warm_cache.mkdir(mode=0o700)
    jitprof = [*JITPROF, "--no-tui", "-o", "run.folded", "--", str(NODE)]
    tools: dict[str, tuple[list[str], dict[str, str], bool]] = {
        "node alone": ([str(NODE)], plain, False),
        "jitprof, cold cache": (jitprof, dict(plain, JITPROF_CACHE_DIR=str(cold_cache)), True),
        "jitprof, warm cache": (jitprof, dict(plain, JITPROF_CACHE_DIR=str(warm_cache)), False),
        "node --cpu-prof": ([str(NODE), "--cpu-prof", "--cpu-prof-dir", str(workdir / "cpuprof")], plain, False),
    }
    if perf:
        tools["perf record -F 99 -g"] = (
            [perf, "record", "-q", "-F", "99", "-g", "-o", str(workdir / "perf.data"), "--", str(NODE)],
            plain,
            False,
        )
    measure_with_cpu(jitprof, workdir, tools["jitprof, warm cache"][1])  # fills the warm cache
    results: dict[str, list[RunCost]] = {name: [] for name in tools}
    for round_number in range(repeats):
        for name, (prefix, env, empty_cache) in tools.items():
            if empty_cache:
                shutil.rmtree(cold_cache, ignore_errors=True)
                cold_cache.mkdir(mode=0o700)
            results[name].append(measure_with_cpu(prefix, workdir, env, watch=name != "node alone"))
        print(f"bench: run cost, round {round_number + 1}/{repeats}", file=sys.stderr)
    shutil.rmtree(workdir / "cpuprof", ignore_errors=True)
    alone = results["node alone"]
    alone_wall = statistics.median(run.wall_s for run in alone)
    alone_work = statistics.median(run.work_s for run in alone)
    alone_cpu = statistics.median(run.cpu_s for run in alone)
    lines = [
        "## What a run costs: `jitprof -- node work.js` against the alternatives",
        "",
        f"`node fixtures/js/workload.js {ROUNDS}` (about {alone_work:.1f} s of work), medians of {repeats} interleaved rounds.",
        "Cold: an empty JITPROF_CACHE_DIR before every run (what a new user's first run pays; the BPF sampler",
        "set-up compiled is loaded either way). Warm: the cache of earlier runs.",
        "",
        "| tool | whole command (s) | over node alone | CPU, all processes (s) | tool's CPU over node's | launch to first instruction (s) | end after the work (s) | program's work (s) | vs alone | the command's own process, peak RSS (MiB) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, runs in results.items():
        wall = statistics.median(run.wall_s for run in runs)
        cpu = statistics.median(run.cpu_s for run in runs)
        work = statistics.median(run.work_s for run in runs)
        rss = statistics.median(run.tool_peak_rss_mib for run in runs)
        lines.append(
            f"| {name} | {wall:.2f} | {wall - alone_wall:+.2f} s | {cpu:.2f} | {cpu - alone_cpu:+.2f} s "
            f"| {statistics.median(run.start_s for run in runs):.3f} | {statistics.median(run.end_s for run in runs):.3f} "
            f"| {work:.3f} | {100 * (work / alone_work - 1):+.1f} % | {rss:.0f} |"
        )
    lines += [
        "",
        "Targets: cold ≤ program + 0.8 s, warm ≤ program + 0.3 s, the program's own work within 2 % (at 99 Hz).",
        "",
    ]
    _record_goals(results, perf is not None)
    return lines


WARM_GOAL_S = 0.3
COLD_GOAL_S = 0.8
WORK_GOAL = 1.02


def _record_goals(results: dict[str, list[RunCost]], with_perf: bool) -> None:
    details = "What a run costs"
    wall = {name: statistics.median(run.wall_s for run in runs) for name, runs in results.items()}
    work = {name: statistics.median(run.work_s for run in runs) for name, runs in results.items()}
    over = {name: wall[name] - wall["node alone"] for name in wall}
    slower = {name: work[name] / work["node alone"] for name in work}
    perf = "perf record -F 99 -g"
    for cache, goal in (("warm", WARM_GOAL_S), ("cold", COLD_GOAL_S)):
        name = f"jitprof, {cache} cache"
        goals.record(
            goals.GoalRow(
                f"`jitprof -- node work.js`, {cache} cache: the whole command over node alone",
                f"≤ +{goal:.1f} s",
                f"{over[name]:+.2f} s",
                f"perf record: {over[perf]:+.2f} s" if with_perf else "",
                over[name] <= goal,
                details,
            )
        )
    for cache in ("warm", "cold"):
        anchors = [f"`node --cpu-prof`: {goals.percent(slower['node --cpu-prof'])}"]
        if with_perf:
            anchors.insert(0, f"perf record: {goals.percent(slower[perf])}")
        goals.record(
            goals.ratio_row(
                f"the program's own work at 99 Hz ({cache} cache)",
                WORK_GOAL,
                slower[f"jitprof, {cache} cache"],
                details,
                ", ".join(anchors),
            )
        )
