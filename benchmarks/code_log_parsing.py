"""V8 code-log parsing throughput, and the code log's cost on a Node workload."""

from __future__ import annotations

import statistics
import subprocess
import time
from pathlib import Path

from benchmarks.harness import JS_CODEGEN
from profiler.jit.v8.code_map import CodeMap, IsolateLog
from profiler.jit.v8.log_parser import V8LogReader


def code_log_parsing(workdir: Path, repeats: int) -> list[str]:
    """Throughput of reading V8's code log, on a real log of a program that
    compiles and optimises thousands of functions."""
    log = workdir / "codegen-v8.log"
    subprocess.run(
        ["node", "--log-code", "--log-source-code", "--no-logfile-per-isolate", f"--logfile={log}", str(JS_CODEGEN), "3000"],
        cwd=workdir,
        check=True,
        capture_output=True,
    )
    data = log.read_bytes()
    log.unlink()
    timings = []
    events = live = 0
    for _ in range(repeats):
        reader, code_map, isolate = V8LogReader(), CodeMap(), IsolateLog()
        started = time.perf_counter()
        events = 0
        for offset in range(0, len(data), 1 << 20):
            for event in reader.feed(data[offset : offset + (1 << 20)]):
                code_map.apply(isolate, event, 0)
                events += 1
        timings.append(time.perf_counter() - started)
        live = len(code_map)
    elapsed = statistics.median(timings)
    return [
        "## V8 code-log parsing",
        "",
        f"`node --log-code fixtures/js/codegen.js 3000` writes a {len(data) / 2**20:.1f} MiB log of {events:,} code events. "
        f"Parsing it into the code map (positions are decoded only for code that is sampled): {elapsed:.2f} s, "
        f"{len(data) / 2**20 / elapsed:.1f} MiB/s, {events / elapsed / 1000:.0f} k events/s (median of {repeats}); "
        f"{live:,} code objects live at the end.",
        "",
    ]
