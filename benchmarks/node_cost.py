"""Node.js under jitprof against the program alone, with the flags, and under perf."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from benchmarks.harness import JITPROF, JS_ROUNDS, JS_WORKLOAD, Setup, runtime_runs, slowdown_table
from profiler.jit.options import merge_options
from profiler.jit.v8 import preload
from profiler.jit.v8.runtime import NODE_FLAGS, node_flags


def node_cost(repeats: int, perf: str | None, workdir: Path) -> list[str]:
    command = ["node", str(JS_WORKLOAD), JS_ROUNDS]
    plain = {key: value for key, value in os.environ.items() if key != "NODE_OPTIONS"}
    flagged = dict(plain, NODE_OPTIONS=merge_options(None, NODE_FLAGS))
    with_code_log = dict(plain, NODE_OPTIONS=merge_options(None, node_flags(preload.install())))
    setups = {
        "node alone": Setup([], plain),
        "node with the perf-map flags": Setup([], flagged),
        "node with the perf-map flags and the code log": Setup([], with_code_log),
        "jitprof -F 99 (injects the flags)": Setup([*JITPROF, "-F", "99", "-o", "bench.folded", "--"], plain),
    }
    if perf:
        setups["perf record -F 99 -g, with the flags"] = Setup(
            [perf, "record", "-q", "-F", "99", "-g", "-o", "perf.data", "--"], flagged
        )
    results = runtime_runs(setups, "jitprof -F 99 (injects the flags)", command, repeats, workdir, "node cost")
    for leftover in workdir.glob("isolate-*-v8.log"):
        leftover.unlink()
    return [
        "## Cost of profiling a CPU-bound Node.js program",
        "",
        f"`node fixtures/js/workload.js {JS_ROUNDS}` (system Node, {subprocess.run(['node', '--version'], capture_output=True, text=True).stdout.strip()}); "
        f"the flags' own cost is separate from sampling's. Medians of {repeats} interleaved runs.",
        "",
        *slowdown_table(results, "node alone"),
        "",
        "Target: ≤ 3 % in total at 99 Hz.",
        "",
    ]
