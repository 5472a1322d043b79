"""Deno and Bun: what the options jitprof gives them cost the program, and
what profiling it costs, against the program alone; and the same real
programs under node, spawned as jitprof spawns it."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import goals
from benchmarks.harness import JITPROF, JS_ROUNDS, JS_WORKLOAD, ROOT, Setup, runtime_runs, slowdown_table
from profiler.jit.bun.runtime import BUN
from profiler.jit.contract import Runtime
from profiler.jit.deno import DENO
from profiler.jit.jitdump_files import make_spawned_dump_directory
from profiler.jit.v8.runtime import NODE

RUNTIMES = ROOT / ".nodes" / "runtimes" / "node_modules"
BINARIES = {
    "deno": (RUNTIMES / "@deno" / "linux-x64-glibc" / "deno", ["run"], DENO),
    "bun": (RUNTIMES / "@oven" / "bun-linux-x64" / "bin" / "bun", [], BUN),
}
APPS = ROOT / ".nodes" / "apps" / "node_modules"
# Real programs, short as a developer's command is: prettier checking this
# repository's scripts, tsc checking a TypeScript project.
PROGRAMS = {
    "prettier": [str(APPS / "prettier" / "bin" / "prettier.cjs"), "--check", str(ROOT / "fixtures" / "js")],
    "tsc": [str(APPS / "typescript" / "lib" / "tsc.js"), "-p", str(ROOT / "fixtures" / "ts"), "--noEmit"],
}
# deno runs tsc.js (CommonJS in a .js file) only when told to detect it.
PROGRAM_OPTIONS = {"deno": ["run", "-A", "--unstable-detect-cjs"], "bun": [], "node": []}
TIME = "/usr/bin/time"
SPAWNED_GOAL = 1.10  # the program's wall, spawned by jitprof, against alone


def javascript_runtimes_cost(repeats: int, workdir: Path) -> list[str]:
    lines = [
        "## Cost for Deno and Bun",
        "",
        f"`fixtures/js/workload.js {JS_ROUNDS}` (CPU-bound) under each runtime alone, with the options jitprof gives "
        "it when it spawns it (Deno: V8's code log without sources and the interpreter's copies in `DENO_V8_FLAGS`, "
        "each setup with its own code cache in `DENO_DIR`; Bun: JavaScriptCore's jitdump), and under `jitprof -F 99`. "
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
            alone: Setup([], dict(plain)),
            f"{name} with jitprof's options": Setup([], flagged),
            "jitprof -F 99 (gives the options)": Setup([*JITPROF, "-F", "99", "-o", "bench.folded", "--"], dict(plain)),
        }
        if name == "deno":
            _own_code_caches([setup.env for setup in setups.values() if setup.env is not None], workdir)
        results = runtime_runs(setups, "jitprof -F 99 (gives the options)", command, repeats, workdir, f"{name} cost")
        lines += [f"`{name} --version`: {version}", "", *slowdown_table(results, alone), ""]
        lines += programs_cost(name, binary, runtime, repeats, workdir)
    node = shutil.which("node")
    if node is not None:
        # The same programs under node, spawned as jitprof spawns it (its
        # perf-map flags in NODE_OPTIONS): node's CPU-bound workload is in
        # "Cost of profiling a CPU-bound Node.js program".
        version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
        lines += [f"`node --version`: {version}", "", *programs_cost("node", Path(node), NODE, repeats, workdir)]
    return lines


def _own_code_caches(environments: list[dict[str, str]], workdir: Path) -> None:
    """Deno keeps V8's code cache, which V8 refuses under other flags: one
    cache shared by setups of different flags is written again at every run.
    Each setup keeps its own, as a user who runs one way does."""
    for index, environment in enumerate(environments):
        environment["DENO_DIR"] = str(workdir / f"deno-dir-{index}")


def programs_cost(name: str, binary: Path, runtime: Runtime, repeats: int, workdir: Path) -> list[str]:
    """prettier and tsc under the runtime: alone, with jitprof's options, and
    spawned by jitprof with a cold and a warm cache. The program's own wall
    (from its start to its end, as /usr/bin/time in front of it measures it:
    what jitprof makes the program pay) and the whole command's."""
    if not all(Path(program[0]).exists() for program in PROGRAMS.values()) or not Path(TIME).exists():
        return ["(prettier or tsc not installed: `make setup-tests` installs them)", ""]
    plain = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DENO_", "BUN_", "NODE_OPTIONS", "JITPROF_CACHE_DIR"))
    }
    cold, warm = workdir / f"{name}-cold-cache", workdir / f"{name}-warm-cache"
    warm.mkdir(mode=0o700, exist_ok=True)
    timing = workdir / "program.time"
    lines = [
        f"prettier (`--check fixtures/js`) and tsc (`-p fixtures/ts --noEmit`) under {name}: the program's own wall "
        "(`/usr/bin/time` in front of it) and the whole command's, medians of "
        f"{repeats} interleaved rounds; cold: an empty JITPROF_CACHE_DIR before every run.",
        "",
        "| program | setup | program's wall (s) | vs alone | whole command (s) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for program, arguments in PROGRAMS.items():
        command = [TIME, "-f", "%e", "-o", str(timing), str(binary), *PROGRAM_OPTIONS[name], *arguments]
        assert runtime.spawn_environment is not None
        flagged = dict(plain, **runtime.spawn_environment(plain, None, command[5:]))
        dumps = make_spawned_dump_directory(os.getuid(), os.getgid()) or str(workdir)  # where jitprof sends them
        if runtime.jitdump_directory_variable:
            flagged[runtime.jitdump_directory_variable] = dumps
        before = set(Path(dumps).glob("jit-*.dump"))
        profiled = [*JITPROF, "-F", "99", "--no-tui", "-o", str(workdir / "bench.folded"), "--"]
        setups = {
            "alone": ([], dict(plain)),
            "with jitprof's options": ([], flagged),
            "jitprof -F 99, cold cache": (profiled, dict(plain, JITPROF_CACHE_DIR=str(cold))),
            "jitprof -F 99, warm cache": (profiled, dict(plain, JITPROF_CACHE_DIR=str(warm))),
        }
        if name == "deno":
            _own_code_caches([environment for _prefix, environment in setups.values()], workdir)
        for prefix, environment in setups.values():  # the caches' first run (jitprof's, deno's)
            subprocess.run([*prefix, *command], env=environment, cwd=workdir, capture_output=True, check=False)
        walls: dict[str, list[tuple[float, float]]] = {setup: [] for setup in setups}
        for repeat in range(repeats):
            for setup, (prefix, environment) in setups.items():
                if setup.endswith("cold cache"):
                    shutil.rmtree(cold, ignore_errors=True)
                    cold.mkdir(mode=0o700)
                started = time.monotonic()
                subprocess.run([*prefix, *command], env=environment, cwd=workdir, capture_output=True, check=False)
                whole = time.monotonic() - started
                walls[setup].append((float(timing.read_text().split()[-1]), whole))
            print(f"bench: {name} {program}, round {repeat + 1}/{repeats}", file=sys.stderr)
        made = set(Path(dumps).glob("jit-*.dump")) - before
        for leftover in [*workdir.glob("isolate-*-v8.log"), *made, *Path("/tmp").glob("perf-*.map")]:
            leftover.unlink(missing_ok=True)
        alone = statistics.median(own for own, _whole in walls["alone"])
        for setup, runs in walls.items():
            own = statistics.median(own for own, _whole in runs)
            whole = statistics.median(whole for _own, whole in runs)
            lines.append(f"| {program} | {setup} | {own:.2f} | {100 * (own / alone - 1):+.0f} % | {whole:.2f} |")
        options = statistics.median(own for own, _whole in walls["with jitprof's options"]) / alone
        goals.record(
            goals.ratio_row(
                f"{program} spawned under {name}: the program's own wall (warm cache)",
                SPAWNED_GOAL,
                statistics.median(own for own, _whole in walls["jitprof -F 99, warm cache"]) / alone,
                "Cost for Deno and Bun",
                f"jitprof's options alone: {goals.percent(options)}",
            )
        )
    return [*lines, ""]
