"""`make bench`: jitprof's cost and completeness, against baselines measured
in the same run (the program alone, `perf record`), medians of several runs.
Each benchmark is a module of its own; this runs them all and writes the report."""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import goals
from benchmarks.async_cost import async_cost
from benchmarks.bun_functions import bun_functions
from benchmarks.code_log_parsing import code_log_parsing
from benchmarks.completeness import completeness
from benchmarks.first_samples import first_samples
from benchmarks.format_conversion import format_conversion
from benchmarks.java_cost import java_cost
from benchmarks.java_structures_cost import java_structures_cost
from benchmarks.javascript_runtimes_cost import javascript_runtimes_cost
from benchmarks.jvm_compiling_cost import jvm_compiling_cost
from benchmarks.kernel_cost import kernel_costs
from benchmarks.labels_cost import labels_cost
from benchmarks.live_view_cost import live_view_cost
from benchmarks.load import load
from benchmarks.long_runs import long_runs
from benchmarks.native_symbols import native_symbols
from benchmarks.node_cost import node_cost
from benchmarks.off_cpu_cost import off_cpu_cost
from benchmarks.perf_map_tailing import perf_map_tailing
from benchmarks.run_cost import run_cost
from benchmarks.sampling_cost import sampling_cost
from benchmarks.source_map_cost import source_map_cost
from benchmarks.syscall_cost import syscall_cost
from benchmarks.table_build import table_build
from benchmarks.v8_heap_cost import v8_heap_cost
from benchmarks.verification_cost import verification_cost
from benchmarks.whole_machine import whole_machine

SECTIONS = {
    "run_cost": lambda repeats, perf, workdir: run_cost(repeats, perf, workdir),
    "verification_cost": lambda repeats, perf, workdir: verification_cost(),
    "sampling_cost": lambda repeats, perf, workdir: sampling_cost(repeats, perf, workdir),
    "node_cost": lambda repeats, perf, workdir: node_cost(max(repeats - 2, 3), perf, workdir),
    "v8_heap_cost": lambda repeats, perf, workdir: v8_heap_cost(max(repeats - 2, 3), workdir),
    "java_cost": lambda repeats, perf, workdir: java_cost(max(repeats - 2, 3), perf, workdir),
    "java_structures_cost": lambda repeats, perf, workdir: java_structures_cost(workdir),
    "jvm_compiling_cost": lambda repeats, perf, workdir: jvm_compiling_cost(max(repeats - 2, 3), workdir),
    "javascript_runtimes_cost": lambda repeats, perf, workdir: javascript_runtimes_cost(max(repeats - 2, 3), workdir),
    "bun_functions": lambda repeats, perf, workdir: bun_functions(workdir, 3),
    "off_cpu_cost": lambda repeats, perf, workdir: off_cpu_cost(repeats + 2, workdir, perf),
    "perf_map_tailing": lambda repeats, perf, workdir: perf_map_tailing(workdir),
    "code_log_parsing": lambda repeats, perf, workdir: code_log_parsing(workdir, 5),
    "source_map_cost": lambda repeats, perf, workdir: source_map_cost(workdir, 5),
    "format_conversion": lambda repeats, perf, workdir: format_conversion(workdir),
    "live_view_cost": lambda repeats, perf, workdir: live_view_cost(3, workdir),
    "kernel_costs": lambda repeats, perf, workdir: kernel_costs(workdir),
    "syscall_cost": lambda repeats, perf, workdir: syscall_cost(repeats, perf, workdir),
    "labels_cost": lambda repeats, perf, workdir: labels_cost(max(repeats, 5), workdir),
    "async_cost": lambda repeats, perf, workdir: async_cost(max(repeats, 5), workdir),
    "completeness": lambda repeats, perf, workdir: completeness(perf, workdir),
    "first_samples": lambda repeats, perf, workdir: first_samples(3, perf, workdir),
    "load": lambda repeats, perf, workdir: load(workdir),
    "table_build": lambda repeats, perf, workdir: table_build(workdir / "table-cache"),
    "native_symbols": lambda repeats, perf, workdir: native_symbols(),
    "long_runs": lambda repeats, perf, workdir: long_runs(),
    "whole_machine": lambda repeats, perf, workdir: whole_machine() if perf else ["## Whole machine", "", "(perf not found)", ""],
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--write", type=Path, help="write the results as Markdown here")
    parser.add_argument(
        "--only",
        default="",
        metavar="NAME,...",
        help=f"run these sections only and replace them in the --write file ({', '.join(SECTIONS)})",
    )
    args = parser.parse_args()
    only = [name for name in args.only.split(",") if name]
    unknown = [name for name in only if name not in SECTIONS]
    if unknown:
        parser.error(f"no such section: {', '.join(unknown)}")
    perf = shutil.which("perf")
    with tempfile.TemporaryDirectory(prefix="jitprof-bench-") as directory:
        workdir = Path(directory)
        sections = [SECTIONS[name](args.repeats, perf, workdir) for name in (only or SECTIONS)]
    header = [
        "# Benchmarks",
        "",
        f"Produced by `make bench` (`python -m benchmarks.run --write docs/benchmarks.md`) on "
        f"{time.strftime('%Y-%m-%d')}, kernel {platform.release()}, {os.cpu_count()} CPUs.",
        "",
    ]
    earlier = args.write.read_text() if only and args.write and args.write.exists() else ""
    rows = goals.merged(goals.rows_in(earlier), goals.recorded())
    measured_on = f"Measured on {time.strftime('%Y-%m-%d')}, kernel {platform.release()}, {os.cpu_count()} CPUs"
    summary = goals.section(
        rows, f"{measured_on} (rows of sections not re-run: from their last run)." if earlier else f"{measured_on}."
    )
    if earlier:
        text = _replace_sections(earlier, [summary, *sections] if rows else sections, only, first=goals.TITLE)
    else:
        text = "\n".join(header + (summary if rows else []) + [line for section in sections for line in section])
    print(text)
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(text)
    return 0


def _replace_sections(text: str, sections: list[list[str]], names: list[str], first: str = "") -> str:
    """The report with each new section in place of the one of the same
    heading (appended if new; the one headed `first` put first if new), and
    a note of which were re-run when."""
    lines = text.split("\n")
    for section in sections:
        heading = section[0]
        if heading in lines:
            start = lines.index(heading)
            end = next((index for index in range(start + 1, len(lines)) if lines[index].startswith("## ")), len(lines))
            lines[start:end] = section
        elif heading == first:
            at = next((index for index, line in enumerate(lines) if line.startswith("## ")), len(lines))
            lines[at:at] = section
        else:
            lines += section
    today = time.strftime("%Y-%m-%d")
    earlier = next((line for line in lines if line.startswith(f"Sections re-run alone on {today} ")), "")
    if earlier:  # the same day's re-runs are named together
        names = [*(name for name in earlier.rsplit(": ", 1)[1].rstrip(".").split(", ") if name not in names), *names]
    note = f"Sections re-run alone on {today} (`python -m benchmarks.run --only NAME`): {', '.join(names)}."
    lines = [line for line in lines if not line.startswith("Sections re-run alone on ")]
    first_section = next((index for index, line in enumerate(lines) if line.startswith("## ")), len(lines))
    # The header's paragraphs, then the note, each followed by one blank line (not one more per re-run).
    header = [part for line in lines[:first_section] if line.strip() for part in (line, "")]
    lines = [*header, note, "", *lines[first_section:]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
