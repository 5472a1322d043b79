"""What node's async callers cost: an async node HTTP server
(fixtures/js/async_server.js: each request's handler awaits loadUser awaits
parseRow) under a bounded load on 127.0.0.1, jitprof attached at 999 Hz
with its async callers (the kernel reads each sample's promise chain) and
with --no-async. Requests per second and BPF time per sample, medians of
interleaved rounds measured in the same run."""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path

from benchmarks.harness import ROOT
from benchmarks.labels_cost import NODE_24, _load, _round
from benchmarks.off_cpu_cost import CONNECTIONS, _pinned
from profiler.model.profile import FrameKind
from profiler.model.raw import read_raw

SERVER = ROOT / "fixtures" / "js" / "async_server.js"
LOAD_SECONDS = 5
SETUPS = {"async callers (default)": [], "`--no-async`": ["--no-async"]}


def _async_share(path: Path) -> float:
    """The share of the server's samples in parseRow that show its async callers."""
    profile = read_raw(path)
    in_task = with_callers = 0
    for sample in profile.samples:
        frames = [profile.frames[frame_id] for frame_id in sample.frame_ids]
        if not any(frame.name.startswith("parseRow ") for frame in frames):
            continue
        in_task += 1
        with_callers += any(frame.kind is FrameKind.ASYNC for frame in frames)
    return with_callers / max(in_task, 1)


def async_cost(repeats: int, workdir: Path) -> list[str]:
    if not NODE_24.exists():
        return ["## Async callers in node", "", "(node 24 is not installed: make setup-tests)", ""]
    server = subprocess.Popen([*_pinned(0), str(NODE_24), str(SERVER)], stdout=subprocess.PIPE, text=True)
    results: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in SETUPS}
    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    previous = stats.read_text().strip()
    stats.write_text("1")  # the kernel counts BPF run time only when asked
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().split()[1])
        _load(port, 2)  # warm up V8
        names = list(SETUPS)
        for round_index in range(repeats):
            for name in names if round_index % 2 == 0 else names[::-1]:
                results[name].append(_round(SETUPS[name], server.pid, port, workdir, _async_share))
    finally:
        stats.write_text(previous)
        server.terminate()
        server.wait()
    base = results["`--no-async`"]

    def median(name: str, column: int) -> float:
        return statistics.median(row[column] for row in results[name])

    def paired(name: str, column: int) -> float:
        return statistics.median(row[column] / other[column] for row, other in zip(results[name], base) if other[column])

    lines = [
        "## Async callers in node",
        "",
        f"`node fixtures/js/async_server.js` (node 24: each request's handler awaits loadUser, which awaits parseRow, "
        f"which awaits a turn of the event loop and works 50 µs) on 127.0.0.1, pinned to CPU 0, under "
        f"`fixtures/js/http_load.js` ({CONNECTIONS} connections, {LOAD_SECONDS} s); `jitprof -F 999 --pid` on CPU 1, "
        "with its async callers (the kernel reads each sample's promise chain) and with `--no-async`. BPF time per "
        "sample is the sampler's run time over the load divided by the server's CPU time at 999 Hz. Medians of "
        f"{repeats} interleaved rounds (ratios paired within a round).",
        "",
        "| setup | requests/s | vs `--no-async` | BPF time per sample | vs `--no-async` | server CPU per request (µs) "
        "| parseRow samples with async callers |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in SETUPS:
        lines.append(
            f"| {name} | {median(name, 0):,.0f} | {paired(name, 0):.3f} | {median(name, 1) / 1000:.2f} µs | "
            f"{paired(name, 1):.3f} | {median(name, 3):.0f} | {100 * median(name, 2):.1f} % |"
        )
    lines += ["", "Targets: ≥ 98 % of the requests per second, BPF time per sample within 15 %.", ""]
    return lines
