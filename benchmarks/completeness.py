"""How many stacks reach main: jitprof against perf's frame-pointer and DWARF modes."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness import DWARF_CASES, JITPROF


@dataclass(frozen=True)
class Completeness:
    tool: str
    case: str
    reach_main: float
    samples: int
    data_bytes: int


def _perf_reach_main(perf: str, data: Path) -> tuple[float, int]:
    script = subprocess.run([perf, "script", "-i", str(data), "-F", "ip,sym"], capture_output=True, text=True).stdout
    blocks = [block for block in script.split("\n\n") if block.strip()]
    reached = sum(1 for block in blocks if re.search(r"^\s*[0-9a-f]+ main$", block, re.MULTILINE))
    return reached / max(len(blocks), 1), len(blocks)


def completeness(perf: str | None, workdir: Path) -> list[str]:
    rows: list[Completeness] = []
    for case in ("recursion", "qsort", "threads"):
        command = [str(DWARF_CASES), case, "3"]
        subprocess.run([*JITPROF, "-o", "warm.folded", "--", *command], cwd=workdir, capture_output=True)
        for label, flags in (("jitprof", []), ("jitprof --no-dwarf", ["--no-dwarf"])):
            subprocess.run([*JITPROF, *flags, "-o", "out.folded", "--", *command], cwd=workdir, capture_output=True, check=True)
            lines = (workdir / "out.folded").read_text().splitlines()
            total = sum(int(line.rsplit(" ", 1)[1]) for line in lines)
            reached = sum(int(line.rsplit(" ", 1)[1]) for line in lines if ";main;" in line)
            rows.append(Completeness(label, case, reached / max(total, 1), total, len("\n".join(lines))))
        if perf:
            for label, flags in (("perf -g", ["-g"]), ("perf --call-graph dwarf", ["--call-graph", "dwarf"])):
                data = workdir / "perf.data"
                subprocess.run(
                    [perf, "record", "-q", "-F", "99", *flags, "-o", str(data), "--", *command],
                    cwd=workdir,
                    capture_output=True,
                    check=True,
                )
                share, samples = _perf_reach_main(perf, data)
                rows.append(Completeness(label, case, share, samples, data.stat().st_size))
    lines = [
        "## Completeness: samples whose stack reaches main",
        "",
        "`dwarf_cases MODE 3`, built -O2 -fomit-frame-pointer, at 99 Hz. threads: a thread made and joined after "
        "another, most of the time in the parent's clone system call; a new thread's own samples (the clone alone, "
        "before its function) do not reach main.",
        "",
        "| case | tool | reach main | samples | data written |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        lines.append(
            f"| {row.case} | {row.tool} | {100 * row.reach_main:.1f} % | {row.samples} | {row.data_bytes / 1024:.0f} KiB |"
        )
    lines.append("")
    return lines
