"""Faults and load: storms of processes and mappings, a target killed with
SIGKILL. jitprof must keep up or count what it dropped, end on time and
write its outputs; the events per second it took are reported."""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness import FIXTURES, JITPROF, JS_WORKLOAD, NODE
from profiler.model.raw import read_raw

CASES = {
    "exec storm: a shell loop of 1,000 short processes": (
        ["sh", "-c", "i=0; while [ $i -lt 1000 ]; do /bin/true; i=$((i+1)); done"],
        None,
    ),
    "500 forked children at once": (["sh", "-c", "i=0; while [ $i -lt 500 ]; do (sleep 0.2) & i=$((i+1)); done; wait"], None),
    "executable memory mapped and unmapped in a tight loop (4 processes), -d 5": ([str(FIXTURES / "mapstorm"), "4"], 5.0),
}


@dataclass(frozen=True)
class LoadOutcome:
    wall_s: float
    events: int  # process events taken from the ring buffer (forks, execs, exits, mappings)
    events_lost: int
    samples: int
    samples_lost: int
    written: bool


def _run(command: list[str], duration_s: float | None, workdir: Path) -> LoadOutcome:
    output = workdir / "load.jitprof"
    output.unlink(missing_ok=True)
    flags = ["-d", str(duration_s)] if duration_s else []
    started = time.monotonic()
    subprocess.run(
        [*JITPROF, "--no-tui", *flags, "-o", str(output), "--", *command], cwd=workdir, capture_output=True, timeout=600
    )
    wall = time.monotonic() - started
    if not output.exists():
        return LoadOutcome(wall, 0, 0, 0, 0, False)
    profile = read_raw(output)
    traffic = profile.traffic
    return LoadOutcome(
        wall,
        traffic.records - traffic.samples,
        profile.losses.process_events_lost,
        len(profile.samples),
        profile.losses.lost_samples,
        True,
    )


def _killed_target(workdir: Path) -> tuple[float, int, bool]:
    """SIGKILL the program 2 s into the run: (how long jitprof took to end after, samples written, outputs there)."""
    output = workdir / "killed.folded"
    output.unlink(missing_ok=True)
    run = subprocess.Popen(
        [*JITPROF, "--no-tui", "-o", str(output), "--", str(NODE), str(JS_WORKLOAD), "400"],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(2.0)
    target = subprocess.run(["pgrep", "-P", str(run.pid), "-x", "node"], capture_output=True, text=True).stdout.split()
    killed = time.monotonic()
    for pid in target:
        subprocess.run(["kill", f"-{signal.SIGKILL.value}", pid], check=False)
    run.wait(timeout=120)
    ended = time.monotonic() - killed
    samples = sum(int(line.rsplit(" ", 1)[1]) for line in output.read_text().splitlines()) if output.exists() else 0
    return ended, samples, output.exists() and bool(target)


def load(workdir: Path) -> list[str]:
    lines = [
        "## Faults and load",
        "",
        "Each case once, at 99 Hz, with `--no-tui -o load.jitprof`. Events: forks, execs and exits jitprof took from",
        "the ring buffer (and new executable mappings, where the kernel's mapping records cannot be had); lost: what",
        "the kernel could not queue (counted, never silent).",
        "",
        "| case | whole run (s) | process events | per second | events lost | samples | samples lost | outputs written |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, (command, duration) in CASES.items():
        outcome = _run(command, duration, workdir)
        lines.append(
            f"| {label} | {outcome.wall_s:.1f} | {outcome.events:,} | {outcome.events / outcome.wall_s:,.0f} | "
            f"{outcome.events_lost:,} | {outcome.samples:,} | {outcome.samples_lost:,} | {'yes' if outcome.written else 'NO'} |"
        )
    ended, samples, written = _killed_target(workdir)
    lines += [
        "",
        f"A node program killed with SIGKILL 2 s into its run: jitprof ended {ended:.2f} s later, "
        f"with {samples:,} samples written ({'outputs written' if written else 'NO OUTPUT'}).",
        "",
    ]
    return lines
