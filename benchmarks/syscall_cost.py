"""Other processes' system calls while jitprof runs: `perf bench syscall
basic` (a loop of getppid) pinned to a CPU, alone and while jitprof samples
another (sleeping) process, in interleaved rounds. Whatever jitprof
attaches to system calls (their tracepoints route every process's calls
through the tracepoint path while attached) shows here."""

from __future__ import annotations

import re
import statistics
import subprocess
from pathlib import Path

from benchmarks import goals
from benchmarks.harness import JITPROF
from benchmarks.off_cpu_cost import _attached, _pinned

LOOPS = 2_000_000
TRIES = 3  # per setup and round: the best, as interrupts only ever add
GOAL = 1.02
_PER_CALL = re.compile(r"([0-9.]+) usecs/op")


def _per_call_ns(perf: str) -> float:
    """The best of TRIES loops: nanoseconds per getppid."""
    best = float("inf")
    for _try in range(TRIES):
        output = subprocess.run(
            [*_pinned(1), perf, "bench", "syscall", "basic", "--loop", str(LOOPS)], capture_output=True, text=True, check=True
        ).stdout
        found = _PER_CALL.search(output)
        if found is None:
            raise RuntimeError(f"perf bench printed no time per call: {output[-200:]}")
        best = min(best, 1000 * float(found.group(1)))
    return best


def syscall_cost(repeats: int, perf: str | None, workdir: Path) -> list[str]:
    title = "## Other processes' system calls"
    if perf is None:
        return [title, "", "(perf not found: `perf bench syscall basic` is the loop measured)", ""]
    alone: list[float] = []
    beside: list[float] = []
    for round_index in range(repeats):
        for with_jitprof in (False, True) if round_index % 2 == 0 else (True, False):
            if not with_jitprof:
                alone.append(_per_call_ns(perf))
                continue
            sleeper = subprocess.Popen(["sleep", "600"])
            try:
                jitprof = _attached([*JITPROF, "--no-tui", "-o", "sleep.folded", "--pid", str(sleeper.pid)], workdir)
                try:
                    beside.append(_per_call_ns(perf))
                finally:
                    jitprof.send_signal(2)
                    jitprof.wait(timeout=120)
            finally:
                sleeper.kill()
                sleeper.wait()
    ratio = statistics.median(with_ / without for with_, without in zip(beside, alone, strict=True))
    details = "Other processes' system calls"
    goals.record(goals.ratio_row("another process's system calls (getppid) while jitprof samples", GOAL, ratio, details))
    return [
        title,
        "",
        f"`perf bench syscall basic --loop {LOOPS:,}` (getppid) pinned to CPU 1, the best of {TRIES} loops, alone and "
        f"while `jitprof --pid` samples a sleeping process (CPU only, 99 Hz), {repeats} interleaved rounds; *vs alone*: the median "
        "of each round's ratio.",
        "",
        "| setup | ns per call (median of rounds) | vs alone |",
        "| --- | --- | --- |",
        f"| alone | {statistics.median(alone):.1f} | +0.0 % |",
        f"| jitprof sampling | {statistics.median(beside):.1f} | {goals.percent(ratio)} |",
        "",
        f"Target: no cost, within {goals.percent(GOAL)}.",
        "",
    ]
