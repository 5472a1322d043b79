"""Deno and Bun: what the options jitprof gives them cost the program, and
what profiling it costs, against the program alone."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from benchmarks.harness import JITPROF, JS_ROUNDS, JS_WORKLOAD, ROOT, Setup, runtime_runs, slowdown_table
from profiler.jit.bun.runtime import BUN
from profiler.jit.deno import DENO

RUNTIMES = ROOT / ".nodes" / "runtimes" / "node_modules"
BINARIES = {
    "deno": (RUNTIMES / "@deno" / "linux-x64-glibc" / "deno", ["run"], DENO),
    "bun": (RUNTIMES / "@oven" / "bun-linux-x64" / "bin" / "bun", [], BUN),
}


def javascript_runtimes_cost(repeats: int, workdir: Path) -> list[str]:
    lines = [
        "## Cost for Deno and Bun",
        "",
        f"`fixtures/js/workload.js {JS_ROUNDS}` (CPU-bound) under each runtime alone, with the options jitprof gives "
        "it when it spawns it (Deno: V8's perf-map flags and code log in `DENO_V8_FLAGS`; Bun: JavaScriptCore's "
        "jitdump), and under `jitprof -F 99`. "
        f"Medians of {repeats} interleaved runs. Target: ≤ 3 % in total at 99 Hz, as for node.",
        "",
    ]
    for name, (binary, subcommand, runtime) in BINARIES.items():
        if not binary.exists():
            lines += [f"({name} not installed: `make setup-tests` installs it)", ""]
            continue
        command = [str(binary), *subcommand, str(JS_WORKLOAD), JS_ROUNDS]
        plain = {key: value for key, value in os.environ.items() if not key.startswith(("DENO_", "BUN_"))}
        assert runtime.spawn_environment is not None
        flagged = dict(plain, **runtime.spawn_environment(plain, None, command))
        version = subprocess.run([str(binary), "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        alone = f"{name} alone"
        setups = {
            alone: Setup([], plain),
            f"{name} with jitprof's options": Setup([], flagged),
            "jitprof -F 99 (gives the options)": Setup([*JITPROF, "-F", "99", "-o", "bench.folded", "--"], plain),
        }
        results = runtime_runs(setups, "jitprof -F 99 (gives the options)", command, repeats, workdir, f"{name} cost")
        lines += [f"`{name} --version`: {version}", "", *slowdown_table(results, alone), ""]
    return lines
