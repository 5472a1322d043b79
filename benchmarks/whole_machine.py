"""The whole machine as an agent watches it: `jitprof --all` and `perf record
-a -g` at 99 Hz, side by side over the same steady workload (one node
process keeping one CPU busy), for the same span. Each tool's own CPU (its
process, every thread, user and system) in 30 s windows after a minute of
start-up, and its resident memory every 5 s; medians over the span.

Both run at once, so the workload and the machine are the same for both;
each samples the other too (a process among the machine's others)."""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness import JITPROF, NODE, ROOT, _cpu_seconds, rss_kib

BUSY_SCRIPT = "function spin(n){let x=0;for(let i=0;i<n;i++)x=(x*31+i)%1000003;return x}\n" + (
    "const end=Date.now()+Number(process.argv[2])*1000;let s=0;while(Date.now()<end)s+=spin(100000);\n"
)
WARM_UP_S = 60.0
WINDOW_S = 30.0
RSS_EVERY_S = 5.0


@dataclass(frozen=True)
class AgentCost:
    cpu_share_median: float  # of one core, per window
    cpu_share_max: float
    rss_median_kib: int
    rss_max_kib: int


def _watch(pids: dict[str, int], span_s: float) -> dict[str, AgentCost]:
    """CPU per window and RSS of each process until span_s has passed."""
    started = time.monotonic()
    windows: dict[str, list[float]] = {name: [] for name in pids}
    rss: dict[str, list[int]] = {name: [] for name in pids}
    window_start: dict[str, tuple[float, float]] = {}
    next_window = started + WARM_UP_S
    while time.monotonic() - started < span_s:
        time.sleep(RSS_EVERY_S)
        now = time.monotonic()
        for name, pid in pids.items():
            resident = rss_kib(pid)
            if resident and now - started >= WARM_UP_S:
                rss[name].append(resident)
        if now >= next_window:
            for name, pid in pids.items():
                cpu = _cpu_seconds(pid)
                if cpu is None:
                    continue
                if name in window_start:
                    then, cpu_then = window_start[name]
                    windows[name].append((cpu - cpu_then) / (now - then))
                window_start[name] = (now, cpu)
            next_window = now + WINDOW_S
    return {
        name: AgentCost(
            statistics.median(windows[name]) if windows[name] else float("nan"),
            max(windows[name], default=float("nan")),
            int(statistics.median(rss[name])) if rss[name] else 0,
            max(rss[name], default=0),
        )
        for name in pids
    }


def whole_machine(span_s: float = 600.0) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="jitprof-bench-whole-") as scratch:
        workdir = Path(scratch)
        script = workdir / "busy.js"
        script.write_text(BUSY_SCRIPT)
        busy = subprocess.Popen([str(NODE), str(script), str(span_s + 30)], cwd=workdir)
        time.sleep(1.0)
        environment = dict(os.environ, JITPROF_CACHE_DIR=str(workdir / "cache"))
        jitprof = subprocess.Popen(
            [*JITPROF, "--all", "-F", "99", "-d", str(span_s + 5), "--no-tui", "-o", str(workdir / "all.folded")],
            cwd=ROOT,
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        perf = subprocess.Popen(
            ["perf", "record", "-a", "-g", "-F", "99", "-o", str(workdir / "perf.data"), "--", "sleep", str(span_s + 5)],
            cwd=workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            costs = _watch({"jitprof --all": jitprof.pid, "perf record -a -g": perf.pid}, span_s)
            _, errors = jitprof.communicate(timeout=120)
            perf.wait(timeout=120)
        finally:
            for process in (busy, jitprof, perf):
                if process.poll() is None:
                    process.kill()
                    process.wait()
        summary = next((line for line in errors.splitlines() if " samples from " in line), "")
    lines = [
        "## Whole machine: jitprof --all beside perf record -a -g",
        "",
        f"One node process keeping one of the 2 CPUs busy; `jitprof --all -F 99 --no-tui -o all.folded` and "
        f"`perf record -a -g -F 99` side by side for {span_s / 60:g} minutes (cold: an empty `JITPROF_CACHE_DIR`). "
        f"CPU: each tool's process (all threads, user + system) per {WINDOW_S:g} s window after the first "
        f"{WARM_UP_S:g} s; RSS every {RSS_EVERY_S:g} s after it. Medians over the span. "
        "(`python -m benchmarks.run --only whole_machine`.)",
        "",
        "| tool | CPU, median of windows | CPU, worst window | RSS median | RSS max |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, cost in costs.items():
        lines.append(
            f"| {name} | {cost.cpu_share_median:.2%} | {cost.cpu_share_max:.2%} | "
            f"{cost.rss_median_kib / 1024:.0f} MiB | {cost.rss_max_kib / 1024:.0f} MiB |"
        )
    lines += ["", f"jitprof's summary: `{summary.removeprefix('jitprof: ')}`", ""]
    lines.append("Target (an agent's): ≤ 1 % of a core and ≤ 100 MiB RSS in steady state.")
    return lines + [""]
