"""Unwind-table build times, cold and from the cache."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from benchmarks.harness import NODE
from profiler.native import cache, elf, library
from tests.native import unwind_oracle


def table_build(cache_dir: Path) -> list[str]:
    if not NODE.exists():
        return []
    os.environ["JITPROF_CACHE_DIR"] = str(cache_dir)
    started = time.monotonic()
    with open(NODE, "rb") as handle:
        table = unwind_oracle.compile_table(handle)
    oracle = time.monotonic() - started
    native_times = []
    for _ in range(5):
        started = time.monotonic()
        compiled = library.compile_unwind_rows_of(NODE)
        native_times.append(time.monotonic() - started)
    cold = statistics.median(native_times)
    packed = compiled.packed
    assert packed == table.pack(), "native rows differ from the oracle's"
    cache.store_cached("b-0000", packed)
    started = time.monotonic()
    assert cache.load_cached("b-0000") == packed
    cached = time.monotonic() - started
    image = elf.open_elf([str(NODE)], str(NODE))
    try:
        started = time.monotonic()
        symbols = elf.read_symbols(image.handle)
        symbols_cold = time.monotonic() - started
        cache.store("b-0000", symbols)
        started = time.monotonic()
        assert cache.load("b-0000") is not None
        symbols_cached = time.monotonic() - started
    finally:
        image.close()
    return [
        "## Symbols and unwind table for /usr/bin/node",
        "",
        f"{NODE.stat().st_size / 2**20:.0f} MiB binary, {len(symbols):,} function symbols: read with pyelftools in "
        f"{symbols_cold:.2f} s, from the cache in {symbols_cached * 1000:.1f} ms.",
        "",
        "| FDEs | rows (merged) | rows size | native build (C, median of 5) | pyelftools (the oracle) | from the cache |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| {compiled.fdes:,} | {len(table.rows):,} | {len(packed) / 2**20:.1f} MiB | {cold * 1000:.0f} ms | {oracle:.1f} s "
        f"| {cached * 1000:.1f} ms |",
        "",
        "The two compilers' rows are identical (checked here). Builds run on a thread while sampling goes on;",
        "later runs load the cache, keyed by build-id.",
        "",
    ]
