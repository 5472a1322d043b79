"""Short processes from their first sample: how many walks are whole, and
what the ring buffer carries for it, against perf --call-graph dwarf (which
copies 8 KiB of stack with every sample)."""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness import DWARF_CASES, JITPROF, JS_WORKLOAD, NODE
from profiler.kernel.events import WalkEnd
from profiler.model.raw import read_raw

FREQUENCY = "199"
SHORT_PROCESSES = (
    f"for i in 1 2 3 4 5 6 7 8 9 10; do {NODE} {JS_WORKLOAD} 5 >/dev/null; done; "
    f"for i in 1 2 3 4 5 6 7 8 9 10; do {DWARF_CASES} recursion 0.15 now; done"
)
# Every sample in a process a few milliseconds old: the kernel can walk
# almost none of them itself.
EXEC_STORM = f"i=0; while [ $i -lt 300 ]; do {DWARF_CASES} recursion 0.004 now; i=$((i+1)); done"
STEADY = f"{NODE} {JS_WORKLOAD} 60 >/dev/null"
SCENARIOS = {
    "10 node + 10 native short processes": SHORT_PROCESSES,
    "exec storm: 300 processes of 4 ms": EXEC_STORM,
    "steady: one node process, 1.6 s": STEADY,
}


@dataclass(frozen=True)
class Outcome:
    samples: int
    whole: float  # walks not cut short
    native_main: float  # native samples with a user stack that reach main (nan: none)
    bytes_per_sample: float
    copied_share: float  # samples that came up with a stack copy
    copy_bytes: float  # per copied sample


def _jitprof(command: str, workdir: Path, cache: Path) -> Outcome:
    subprocess.run(
        [*JITPROF, "-F", FREQUENCY, "--no-tui", "-o", "out.jitprof", "--", "sh", "-c", command],
        cwd=workdir,
        capture_output=True,
        check=True,
        env={"JITPROF_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin"},
    )
    profile = read_raw(workdir / "out.jitprof")
    samples = [sample for sample in profile.samples if sample.comm != "sh"]
    native = [sample for sample in samples if sample.comm == "dwarf_cases" and sample.walk_end is not WalkEnd.THREAD_EXITING]
    reach = sum(1 for sample in native if any(profile.frames[frame].name == "main" for frame in sample.frame_ids))
    traffic = profile.traffic
    return Outcome(
        samples=len(samples),
        whole=sum(1 for sample in samples if not sample.walk_end.cut_short) / max(len(samples), 1),
        native_main=reach / len(native) if native else float("nan"),
        bytes_per_sample=traffic.sample_bytes / max(traffic.samples, 1),
        copied_share=traffic.stack_copies / max(traffic.samples, 1),
        copy_bytes=traffic.stack_copy_bytes / max(traffic.stack_copies, 1),
    )


def _perf(perf: str, command: str, workdir: Path) -> Outcome:
    data = workdir / "perf.data"
    subprocess.run(
        [perf, "record", "-q", "-F", FREQUENCY, "--call-graph", "dwarf", "-o", str(data), "--", "sh", "-c", command],
        cwd=workdir,
        capture_output=True,
        check=True,
    )
    script = subprocess.run([perf, "script", "-i", str(data), "-F", "comm,ip,sym"], capture_output=True, text=True).stdout
    blocks = [block for block in script.split("\n\n") if block.strip() and not block.lstrip().startswith("sh ")]
    native = [block for block in blocks if block.lstrip().startswith("dwarf_cases")]
    reach = sum(1 for block in native if re.search(r"^\s*[0-9a-f]+ main$", block, re.MULTILINE))
    return Outcome(
        samples=len(blocks),
        whole=float("nan"),
        native_main=reach / len(native) if native else float("nan"),
        bytes_per_sample=data.stat().st_size / max(len(blocks), 1),
        copied_share=1.0,
        copy_bytes=8192.0,
    )


def _median(outcomes: list[Outcome]) -> Outcome:
    def middle(values: list[float]) -> float:
        real = [value for value in values if value == value]
        return statistics.median(real) if real else float("nan")

    return Outcome(*(middle([getattr(outcome, name) for outcome in outcomes]) for name in Outcome.__dataclass_fields__))  # type: ignore[arg-type]


def _percent(value: float) -> str:
    return "–" if value != value else f"{100 * value:.1f} %"


def first_samples(repeats: int, perf: str | None, workdir: Path) -> list[str]:
    lines = [
        "## First samples: short processes and what their walks cost",
        "",
        f"At {FREQUENCY} Hz, medians of {repeats} runs. *Cold*: an empty cache before every run (every table",
        "is built while the processes run); *warm*: the cache a previous run left. *Whole*: walks not cut",
        "short (a thread sampled in `_exit`, after its memory went, has no user stack to walk). Bytes per",
        "sample: what came up the ring buffer (jitprof) or was written to perf.data (perf), per sample.",
        "",
        "| workload | tool | samples | whole | native reach main | bytes per sample | samples with a stack copy | copy per copied sample |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    warm_cache = workdir / "first-samples-cache"
    cold_cache = workdir / "first-samples-cold"
    for label, command in SCENARIOS.items():
        _jitprof(command, workdir, warm_cache)  # fills the warm cache
        rows: dict[str, list[Outcome]] = {"jitprof, cold": [], "jitprof, warm": [], "perf --call-graph dwarf": []}
        for _ in range(repeats):
            shutil.rmtree(cold_cache, ignore_errors=True)
            rows["jitprof, cold"].append(_jitprof(command, workdir, cold_cache))
            rows["jitprof, warm"].append(_jitprof(command, workdir, warm_cache))
            if perf:
                rows["perf --call-graph dwarf"].append(_perf(perf, command, workdir))
        for tool, outcomes in rows.items():
            if not outcomes:
                continue
            row = _median(outcomes)
            lines.append(
                f"| {label} | {tool} | {row.samples:.0f} | {_percent(row.whole)} | {_percent(row.native_main)} | "
                f"{row.bytes_per_sample:,.0f} | {_percent(row.copied_share)} | {row.copy_bytes:,.0f} |"
            )
    lines.append("")
    return lines
