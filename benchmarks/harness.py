"""What every benchmark shares: the fixtures, running a workload, interleaved runs, tables."""

from __future__ import annotations

import os
import pty
import select
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


FIXTURES = ROOT / "fixtures" / "build"


WORKLOAD = FIXTURES / "workload"


DWARF_CASES = FIXTURES / "dwarf_cases"


ROUNDS = "800"


JITPROF = [sys.executable, "-m", "profiler"]


NODE = Path("/usr/bin/node")


JS_WORKLOAD = ROOT / "fixtures" / "js" / "workload.js"


JS_ROUNDS = "150"


JAVA_COMMAND = [
    "java",
    "-XX:CompileCommand=quiet",
    "-XX:CompileCommand=dontinline,Hot::*",
    "-cp",
    str(ROOT / "fixtures" / "build" / "java"),
    "Hot",
    "--rounds",
    "4000000",
]


JS_CODEGEN = ROOT / "fixtures" / "js" / "codegen.js"


@dataclass(frozen=True)
class WorkloadRun:
    elapsed_s: float  # the workload's own measure of its work
    start_delay_s: float  # from launching the command to main's first instruction
    wall_s: float  # the whole command, tool start-up and end work included


def run_workload(
    prefix: list[str], workdir: Path, command: list[str] | None = None, env: dict[str, str] | None = None
) -> WorkloadRun:
    launched_ns = time.time_ns()
    started = time.monotonic()
    completed = subprocess.run(
        [*prefix, *(command or [str(WORKLOAD), ROUNDS])], cwd=workdir, capture_output=True, text=True, check=True, env=env
    )
    wall = time.monotonic() - started
    fields = dict(item.split("=") for item in completed.stdout.split())
    return WorkloadRun(
        elapsed_s=int(fields["elapsed_ns"]) / 1e9,
        start_delay_s=(int(fields["first_instruction_ns"]) - launched_ns) / 1e9,
        wall_s=wall,
    )


@dataclass(frozen=True)
class Setup:
    prefix: list[str]  # the tool in front of the workload; [] for the workload alone
    env: dict[str, str] | None = None


def interleaved_runs(
    setups: dict[str, Setup], repeats: int, workdir: Path, command: list[str] | None, label: str
) -> dict[str, list[WorkloadRun]]:
    """Each setup once per round, rounds repeated: drift hits all setups alike."""
    results: dict[str, list[WorkloadRun]] = {name: [] for name in setups}
    for repeat in range(repeats):
        for name, setup in setups.items():
            results[name].append(run_workload(setup.prefix, workdir, command, setup.env))
        print(f"bench: {label}, round {repeat + 1}/{repeats}", file=sys.stderr)
    return results


def runtime_runs(
    setups: dict[str, Setup], warm: str, command: list[str], repeats: int, workdir: Path, label: str
) -> dict[str, list[WorkloadRun]]:
    """Interleaved runs after one run of `warm` (caches); removes the perf
    maps, jitdumps and V8 logs the runs without jitprof left (the runtime's
    own flags write them)."""
    before = set(_jit_files(workdir))
    run_workload(setups[warm].prefix, workdir, command, setups[warm].env)
    results = interleaved_runs(setups, repeats, workdir, command, label)
    for leftover in set(_jit_files(workdir)) - before:
        leftover.unlink()
    return results


def _jit_files(workdir: Path) -> list[Path]:
    return [*Path("/tmp").glob("perf-*.map"), *Path("/tmp").glob("jit-*.dump"), *workdir.glob("isolate-*-v8.log")]


def slowdown_table(results: dict[str, list[WorkloadRun]], baseline: str) -> list[str]:
    alone = statistics.median(run.elapsed_s for run in results[baseline])
    lines = [f"| setup | workload time (s) | vs {baseline} |", "| --- | --- | --- |"]
    for name, runs in results.items():
        elapsed = statistics.median(run.elapsed_s for run in runs)
        lines.append(f"| {name} | {elapsed:.3f} | {100 * (elapsed / alone - 1):+.2f} % |")
    return lines


@dataclass(frozen=True)
class DaemonCpu:
    share_of_core: float  # jitprof's own CPU time over the target's lifetime, as a share of one core
    target_s: float
    steady_share: float  # the same from STEADY_AFTER_S on: start-up (imports, symbol tables) left out


STEADY_AFTER_S = 3.0


def _cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime, not children's


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def daemon_cpu_on_a_terminal(args: list[str], workdir: Path) -> DaemonCpu:
    """Run jitprof on a pseudo-terminal (so the live view is on unless told
    otherwise) and measure its own CPU while its command runs."""
    environment = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    environment["TERM"] = "xterm-256color"
    pid, master = pty.fork()
    if pid == 0:
        os.chdir(workdir)
        os.execve(sys.executable, [sys.executable, "-m", "profiler", *args], environment)
    started = first_cpu = last_cpu = None
    steady: tuple[float, float] | None = None  # (time, cpu) once start-up is over
    last_seen = 0.0
    output_open = True
    while True:
        ready, _, _ = select.select([master] if output_open else [], [], [], 0.05)
        if ready:
            try:
                output_open = bool(os.read(master, 65536))  # drained, so the view never blocks
            except OSError:
                output_open = False
        cpu = _cpu_seconds(pid)
        if _children(pid):
            now = time.monotonic()
            if started is None:
                started, first_cpu = now, cpu
            if steady is None and cpu is not None and now - started >= STEADY_AFTER_S:
                steady = (now, cpu)
            last_seen, last_cpu = now, cpu
        if os.waitpid(pid, os.WNOHANG)[0]:
            break
    os.close(master)
    if started is None or first_cpu is None or last_cpu is None:
        raise RuntimeError("the command never ran under jitprof")
    steady_share = (
        (last_cpu - steady[1]) / (last_seen - steady[0]) if steady is not None and last_seen > steady[0] else float("nan")
    )
    return DaemonCpu((last_cpu - first_cpu) / (last_seen - started), last_seen - started, steady_share)


def rss_kib(pid: int) -> int:
    """A process's resident memory now, 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0
