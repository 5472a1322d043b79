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

from benchmarks.code_log_parsing import code_log_parsing
from benchmarks.completeness import completeness
from benchmarks.first_samples import first_samples
from benchmarks.format_conversion import format_conversion
from benchmarks.java_cost import java_cost
from benchmarks.kernel_cost import kernel_costs
from benchmarks.live_view_cost import live_view_cost
from benchmarks.load import load
from benchmarks.long_runs import long_runs
from benchmarks.node_cost import node_cost
from benchmarks.perf_map_tailing import perf_map_tailing
from benchmarks.run_cost import run_cost
from benchmarks.sampling_cost import sampling_cost
from benchmarks.table_build import table_build


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--write", type=Path, help="write the results as Markdown here")
    args = parser.parse_args()
    perf = shutil.which("perf")
    with tempfile.TemporaryDirectory(prefix="jitprof-bench-") as directory:
        workdir = Path(directory)
        report = [
            "# Benchmarks",
            "",
            f"Produced by `make bench` (`python -m benchmarks.run --write docs/benchmarks.md`) on "
            f"{time.strftime('%Y-%m-%d')}, kernel {platform.release()}, {os.cpu_count()} CPUs.",
            "",
        ]
        report += run_cost(args.repeats, perf, workdir)
        report += sampling_cost(args.repeats, perf, workdir)
        report += node_cost(max(args.repeats - 2, 3), perf, workdir)
        report += java_cost(max(args.repeats - 2, 3), perf, workdir)
        report += perf_map_tailing(workdir)
        report += code_log_parsing(workdir, 5)
        report += format_conversion(workdir)
        report += live_view_cost(3, workdir)
        report += kernel_costs(workdir)
        report += completeness(perf, workdir)
        report += first_samples(3, perf, workdir)
        report += load(workdir)
        report += table_build(workdir / "table-cache")
        report += long_runs()
    text = "\n".join(report)
    print(text)
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
