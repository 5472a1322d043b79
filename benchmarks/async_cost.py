"""What node's async callers cost: an async node HTTP server
(fixtures/js/async_server.js: each request's handler awaits loadUser awaits
parseRow) under a bounded load on 127.0.0.1, jitprof attached at 999 Hz
with its async callers (the kernel reads each sample's promise chain) and
with --no-async. Requests per second and BPF time per sample, medians of
interleaved rounds measured in the same run."""

from __future__ import annotations

from pathlib import Path

from benchmarks.harness import ROOT
from benchmarks.labels_cost import NEITHER, NODE_24, interleaved_rounds, readers_lines, table_rows
from benchmarks.off_cpu_cost import CONNECTIONS
from profiler.model.profile import FrameKind
from profiler.model.raw import read_raw

SERVER = ROOT / "fixtures" / "js" / "async_server.js"
LOAD_SECONDS = 5
SETUPS = {"async callers (default)": [], "`--no-async`": ["--no-async"], NEITHER: ["--no-labels", "--no-async"]}


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
    results, earlier_ns = interleaved_rounds([str(NODE_24), str(SERVER)], SETUPS, repeats, workdir, _async_share)
    lines = [
        "## Async callers in node",
        "",
        f"`node fixtures/js/async_server.js` (node 24: each request's handler awaits loadUser, which awaits parseRow, "
        f"which awaits a turn of the event loop and works 50 µs) on 127.0.0.1, pinned to CPU 0, under "
        f"`fixtures/build/http_load` ({CONNECTIONS} connections, {LOAD_SECONDS} s); `jitprof -F 999 --pid` on CPU 1, "
        "with its async callers (the kernel reads each sample's promise chain), with `--no-async`, and with neither "
        "async callers nor labels. BPF time per "
        "sample is the sampler's run time over the load divided by the server's CPU time at 999 Hz, the setups "
        "attached at once over one more load each round (their ratio free of this machine's drift in speed). Medians of "
        f"{repeats} interleaved rounds (ratios paired within a round).",
        "",
        "| setup | requests/s | vs `--no-async` | BPF time per sample | vs `--no-async` | server CPU per request (µs) "
        "| parseRow samples with async callers |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *table_rows(results, "`--no-async`"),
    ]
    return lines + readers_lines(results, earlier_ns, "async callers (default)", "async callers and labels", 15)
