"""The cost of sampling a native program: the workload alone, under jitprof, under perf."""

from __future__ import annotations

import statistics
from pathlib import Path

from benchmarks.harness import JITPROF, ROUNDS, Setup, interleaved_runs, run_workload


def sampling_cost(repeats: int, perf: str | None, workdir: Path) -> list[str]:
    setups = {
        "alone": Setup([]),
        "jitprof -F 99": Setup([*JITPROF, "-F", "99", "-o", "bench.folded", "--"]),
        "jitprof -F 99 --no-dwarf": Setup([*JITPROF, "-F", "99", "--no-dwarf", "-o", "bench.folded", "--"]),
    }
    if perf:
        setups["perf record -F 99 -g"] = Setup([perf, "record", "-q", "-F", "99", "-g", "-o", "perf.data", "--"])
    run_workload(setups["jitprof -F 99"].prefix, workdir)  # warm the symbol and unwind caches
    results = interleaved_runs(setups, repeats, workdir, None, "sampling cost")
    alone = statistics.median(run.elapsed_s for run in results["alone"])
    lines = [
        "## Cost of sampling a CPU-bound program",
        "",
        f"`fixtures/build/workload {ROUNDS}`: a CPU-bound native program (main → outer → middle → inner). "
        f"Medians of {repeats} interleaved runs.",
        "",
        "| setup | workload time (s) | slowdown vs alone | launch → first instruction (s) | whole command (s) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, runs in results.items():
        elapsed = statistics.median(run.elapsed_s for run in runs)
        lines.append(
            f"| {name} | {elapsed:.3f} | {100 * (elapsed / alone - 1):+.2f} % | "
            f"{statistics.median(run.start_delay_s for run in runs):.3f} | "
            f"{statistics.median(run.wall_s for run in runs):.3f} |"
        )
    alone_runs = [run.elapsed_s for run in results["alone"]]
    lines += [
        "",
        f"Noise floor: the workload alone took {min(alone_runs):.3f} s to {max(alone_runs):.3f} s "
        f"({100 * (max(alone_runs) / min(alone_runs) - 1):.1f} % apart); slowdowns below that are within noise.",
        "",
        "- *workload time* is measured by the workload itself around its loop, so the slowdown is the",
        "  cost of sampling while it runs (target ≤ 1 % at 99 Hz).",
        "- *launch → first instruction*: for jitprof, Python start-up and loading the BPF sampler set-up compiled (no BCC compile).",
        "- *whole command* includes start-up and the work after the program ends (symbolising and",
        "  writing; perf: writing perf.data).",
        "",
    ]
    return lines
