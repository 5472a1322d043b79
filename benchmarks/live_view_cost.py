"""The live view's CPU cost on a terminal."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from benchmarks.harness import JS_WORKLOAD, STEADY_AFTER_S, DaemonCpu, daemon_cpu_on_a_terminal


def live_view_cost(repeats: int, workdir: Path) -> list[str]:
    command = ["--", "node", str(JS_WORKLOAD), "400"]
    setups = {
        "live view": ["-F", "99", "-o", "view.folded", *command],
        "--no-tui": ["-F", "99", "--no-tui", "-o", "plain.folded", *command],
    }
    results: dict[str, list[DaemonCpu]] = {name: [] for name in setups}
    for round_index in range(repeats):
        print(f"bench: live view cost, round {round_index + 1}/{repeats}", file=sys.stderr)
        for name, args in setups.items():
            results[name].append(daemon_cpu_on_a_terminal(args, workdir))
    shares = {name: statistics.median(run.share_of_core for run in runs) for name, runs in results.items()}
    steady = {name: statistics.median(run.steady_share for run in runs) for name, runs in results.items()}
    target_s = statistics.median(run.target_s for runs in results.values() for run in runs)
    return [
        "## Cost of the live view",
        "",
        f"jitprof's own CPU time (its process, not the program's) while `node fixtures/js/workload.js 400` runs "
        f"(≈ {target_s:.0f} s, one busy CPU, 99 Hz) on a pseudo-terminal, medians of {repeats} interleaved runs.",
        "",
        f"| setup | jitprof CPU, share of one core, whole run | steady state (after the first {STEADY_AFTER_S:g} s) |",
        "| --- | --- | --- |",
        *(f"| {name} | {100 * share:.2f} % | {100 * steady[name]:.2f} % |" for name, share in shares.items()),
        "",
        f"The view's own cost: {100 * (shares['live view'] - shares['--no-tui']):+.2f} % of one core (target < 5 %). "
        "Target for jitprof without the view in steady state: ≤ 2 % of one core.",
        "",
    ]
