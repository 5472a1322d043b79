"""Naming native addresses: blazesym (through cffi) beside jitprof's own
symbol-table reader and `addr2line -i`, on the same addresses: time cold and
warm, and how often they agree."""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from benchmarks.harness import NODE, rss_kib
from profiler.native import elf
from profiler.native.locator_process import CodeLocator

ROOT = Path(__file__).resolve().parents[1]
ADDRESSES = 2000
LIBC = Path("/lib/x86_64-linux-gnu/libc.so.6")


@dataclass
class Measured:
    label: str
    symbols: int
    table_cold_s: float
    blazesym_cold_s: float
    blazesym_warm_s: float
    addr2line_s: float
    first_cold_s: float  # a new symbolizer's first name, the file out of the page cache
    first_warm_s: float  # the same, the file in the page cache
    names_agree: float  # blazesym vs jitprof's table, outer function
    lines_agree: float  # blazesym vs addr2line -i, innermost file:line, where addr2line has one
    with_inlined: float  # addresses with at least one inlined function


def _addresses(table, count: int) -> list[int]:
    chooser = random.Random(7)
    sized = [index for index in range(len(table)) if table.sizes[index] > 1]
    picked = [chooser.choice(sized) for _ in range(count)]
    return [table.starts[index] + chooser.randrange(table.sizes[index]) for index in picked]


def _addr2line(binary: str, addresses: list[int]) -> tuple[list[tuple[str, int]], float]:
    """Innermost (file, line) of each address, and the time addr2line took."""
    started = time.monotonic()
    text = subprocess.run(
        ["addr2line", "-i", "-a", "-e", binary, *(f"{address:#x}" for address in addresses)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    elapsed = time.monotonic() - started
    innermost: list[tuple[str, int]] = []
    for block in text.split("0x")[1:]:
        lines = block.splitlines()
        first = lines[1] if len(lines) > 1 else "??:0"
        file, _, line = first.partition(" ")[0].rpartition(":")
        innermost.append((os.path.basename(file), int(line) if line.isdigit() else 0))
    return innermost, elapsed


def _first_name(source: BinaryIO, address: int, evict: bool) -> float:
    """How long a new symbolizer takes to name one address of the file (its
    symbol table and DWARF parsed): what a run waits for a file's first
    frame. Cold: the file's pages dropped from the page cache first."""
    times = []
    for _ in range(3):
        if evict:
            os.posix_fadvise(source.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        locator = CodeLocator()  # the library is loaded before the clock starts
        started = time.monotonic()
        locator.locate(source, [address])
        times.append(time.monotonic() - started)
        locator.close()
    return statistics.median(times)


def _measure(label: str, path: Path) -> Measured | None:
    if not path.exists():
        return None
    image = elf.open_elf([str(path)], str(path))
    try:
        started = time.monotonic()
        table = elf.read_symbols(image.handle)
        table_cold = time.monotonic() - started
        addresses = _addresses(table, ADDRESSES)
        source = image.debug_handle() or image.handle
        locator = CodeLocator()
        started = time.monotonic()
        located = locator.locate(source, addresses)
        blazesym_cold = time.monotonic() - started
        warm = []
        for _ in range(3):
            started = time.monotonic()
            locator.locate(source, addresses)
            warm.append(time.monotonic() - started)
        locator.close()
        first_cold = _first_name(source, addresses[0], evict=True)
        first_warm = _first_name(source, addresses[0], evict=False)
        debug = image.debug_file if image.debug_file else str(path)
        innermost, addr2line_time = _addr2line(debug, addresses)
    finally:
        image.close()
    names = sum(
        1
        for address, symbol in zip(addresses, located, strict=True)
        if symbol is not None and (hit := table.lookup(address)) is not None and hit.name == symbol.name
    )
    compared = agreed = 0
    for symbol, (file, line) in zip(located, innermost, strict=True):
        if not line or symbol is None:
            continue
        compared += 1
        place = symbol.inlined[-1].place if symbol.inlined else symbol.place
        agreed += place is not None and os.path.basename(place.file) == file and place.line == line
    return Measured(
        label,
        len(table),
        table_cold,
        blazesym_cold,
        statistics.median(warm),
        addr2line_time,
        first_cold,
        first_warm,
        names / len(addresses),
        agreed / compared if compared else float("nan"),
        sum(1 for symbol in located if symbol is not None and symbol.inlined) / len(addresses),
    )


def _helper_heap_mib(locator: CodeLocator) -> float:
    assert locator._helper is not None
    status = Path(f"/proc/{locator._helper.process.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("RssAnon:"))) / 1024


def _memory_over_rounds(path: Path, rounds: int) -> tuple[float, float]:
    """The helper's heap (MiB) after the first and the last of `rounds`
    rounds of opening a file anew, naming addresses in it and closing it (as
    files come and go over a long --all run)."""
    locator = CodeLocator()
    after: list[float] = []
    for _ in range(rounds):
        image = elf.open_elf([str(path)], str(path))
        try:
            table = elf.read_symbols(image.handle)
            locator.locate(image.debug_handle() or image.handle, _addresses(table, ADDRESSES))
        finally:
            image.close()
        after.append(_helper_heap_mib(locator))
    locator.close()
    return after[0], after[-1]


@dataclass
class HelperCost:
    label: str
    start_s: float  # the helper's start: Python, cffi, blazesym's library, its confinement
    batch_s: tuple[float, float]  # ADDRESSES in one request, a parsed file: (helper, in process)
    single_s: tuple[float, float]  # one address per request, per address
    heap_mib: tuple[float, float]  # the helper's RssAnon; jitprof's RSS growth in process


def _helper_cost(label: str, path: Path) -> HelperCost | None:
    """blazesym in its confined helper against blazesym in jitprof's own
    process (as before the helper), the file's pages in the page cache."""
    from profiler.native.blazesym import BlazesymLocator  # noqa: PLC0415  (in process: only here, to compare)

    if not path.exists():
        return None
    image = elf.open_elf([str(path)], str(path))
    try:
        addresses = _addresses(elf.read_symbols(image.handle), ADDRESSES)
        source = image.debug_handle() or image.handle
        locator = CodeLocator()
        started = time.monotonic()
        locator.locate(source, addresses[:1])
        start_s = time.monotonic() - started
        in_process = BlazesymLocator()
        before_kib = rss_kib(os.getpid())
        in_process.locate(source, addresses[:1])
        timings: dict[str, list[float]] = {"helper batch": [], "own batch": [], "helper single": [], "own single": []}
        for _ in range(3):  # interleaved
            for name, locate in (("helper", locator.locate), ("own", in_process.locate)):
                started = time.monotonic()
                locate(source, addresses)
                timings[f"{name} batch"].append(time.monotonic() - started)
                started = time.monotonic()
                for address in addresses[:200]:
                    locate(source, [address])
                timings[f"{name} single"].append((time.monotonic() - started) / 200)
        helper_mib = _helper_heap_mib(locator)
        own_kib = rss_kib(os.getpid()) - before_kib
        locator.close()
    finally:
        image.close()
    median = statistics.median
    return HelperCost(
        label,
        start_s,
        (median(timings["helper batch"]), median(timings["own batch"])),
        (median(timings["helper single"]), median(timings["own single"])),
        (helper_mib, own_kib / 1024),
    )


def native_symbols() -> list[str]:
    subprocess.run(["make", "-s", "-C", str(ROOT / "fixtures")], check=True)
    with tempfile.TemporaryDirectory() as cache_dir:
        os.environ["JITPROF_CACHE_DIR"] = cache_dir
        results = [
            result
            for result in (
                _measure("node (symbols only)", NODE),
                _measure("libc.so.6 (with libc6-dbg's DWARF)", LIBC),
                _measure("fixtures/build/inlined (-O2 -g)", ROOT / "fixtures" / "build" / "inlined"),
            )
            if result is not None
        ]
    rows = [
        "## Naming native code: blazesym beside jitprof's reader and addr2line",
        "",
        f"{ADDRESSES:,} addresses inside functions of each file, the same for every tool. blazesym cold: a new",
        "symbolizer (the file parsed); warm: the same addresses again (median of 3). jitprof's own reader of",
        "the symbol table, cold (no cache), is what named native frames before. Names: blazesym's outer",
        "function equals that reader's; lines: blazesym's innermost file:line equals `addr2line -i`'s first.",
        "First name: a new symbolizer naming one address (the file's symbols and DWARF parsed), median of 3,",
        "the file's pages dropped from the page cache first (cold) or not (warm).",
        "",
        "| file | symbols | own reader, cold | blazesym cold | blazesym warm | first name cold | first name warm "
        "| addr2line -i | names agree | lines agree | with inlined |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for result in results:
        rows.append(
            f"| {result.label} | {result.symbols:,} | {result.table_cold_s * 1000:.0f} ms | {result.blazesym_cold_s * 1000:.0f} ms "
            f"| {result.blazesym_warm_s * 1000:.1f} ms | {result.first_cold_s * 1000:.1f} ms | {result.first_warm_s * 1000:.1f} ms "
            f"| {result.addr2line_s * 1000:.0f} ms | {result.names_agree:.1%} "
            f"| {result.lines_agree:.1%} | {result.with_inlined:.1%} |"
        )
    rows.append("")
    costs = [cost for cost in (_helper_cost("node", NODE), _helper_cost("libc.so.6 (with its DWARF)", LIBC)) if cost is not None]
    rows += [
        "### What the confined helper costs",
        "",
        "blazesym runs in a helper process (its own uid, an empty root, a seccomp filter, 512 MiB of heap), asked",
        "over a Unix socket; before, it ran in jitprof's own process. Both warm (the file parsed once), medians of 3",
        "interleaved rounds. First name: the helper's start included (on the symbolizer thread; sampling goes on).",
        "Heap: the helper's RssAnon after the rounds, beside what the same lookups add to a process's RSS in process.",
        "",
        f"| file | first name, helper started | {ADDRESSES:,} addresses, one request: helper | in process "
        "| one address per request: helper | in process | heap: helper | in process |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for cost in costs:
        rows.append(
            f"| {cost.label} | {cost.start_s * 1000:.0f} ms | {cost.batch_s[0] * 1000:.1f} ms | {cost.batch_s[1] * 1000:.1f} ms "
            f"| {cost.single_s[0] * 1e6:.0f} µs | {cost.single_s[1] * 1e6:.0f} µs | {cost.heap_mib[0]:.0f} MiB "
            f"| {cost.heap_mib[1]:.0f} MiB |"
        )
    rows += [
        "",
        "A request is a round trip, so jitprof names a new stack's native callers in one request per file",
        "(their functions, then the lines they begin on), not one per frame.",
        "",
    ]
    if LIBC.exists():
        first, last = _memory_over_rounds(LIBC, 40)
        rows += [
            f"Memory: libc with its DWARF opened anew, {ADDRESSES:,} addresses named and closed, 40 times (files coming",
            f"and going over a long `--all` run): the helper's heap {first:.0f} MiB after the first round, {last:.0f} MiB",
            "after the last (blazesym keeps every file it parsed until its symbolizer is renewed).",
            "",
        ]
    return rows
