"""Reading a perf map as it grows."""

from __future__ import annotations

import os
import time
from pathlib import Path

from profiler.jit.perfmap import open_perf_map


def perf_map_tailing(workdir: Path) -> list[str]:
    """Throughput of reading a large perf map (as a busy Node service writes)."""
    path = workdir / "perf-bench.map"
    with open(path, "w") as handle:
        for index in range(300_000):
            handle.write(
                f"{0x7F0000000000 + index * 0x400:x} 3a0 JS:*handler{index % 5000} /srv/app/lib/module{index % 300}.js:{index % 900}:7\n"
            )
    size = path.stat().st_size
    perf_map = open_perf_map(str(path), os.getuid())
    assert perf_map is not None
    started = time.monotonic()
    entries = perf_map.tail()
    elapsed = time.monotonic() - started
    perf_map.close()
    path.unlink()
    return [
        "## Perf-map tailing",
        "",
        f"Reading a {size / 2**20:.0f} MiB perf map of {entries:,} entries: {elapsed:.2f} s "
        f"({size / 2**20 / elapsed:.0f} MiB/s, {entries / elapsed / 1000:.0f} k entries/s). A live map is read "
        "incrementally, so each poll reads only what was appended.",
        "",
    ]
