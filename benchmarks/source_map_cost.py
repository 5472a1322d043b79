"""Source maps on a large real bundle: TypeScript's compiler (lib/tsc.js)
bundled and minified by esbuild with its map. How long a map takes to read
the first time one of its frames is seen, how long later lookups take on the
map kept parsed, and what a profile of that bundle gets from it."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks.harness import JITPROF, NODE, ROOT
from profiler.jit.v8.source_maps import parse_source_map

APPS = ROOT / ".nodes" / "apps" / "node_modules"
ESBUILD = APPS / "@esbuild" / "linux-x64" / "bin" / "esbuild"
TSC = APPS / "typescript" / "lib" / "tsc.js"
PROJECT = ROOT / "fixtures" / "ts"
POSITIONS = 10_000


def source_map_cost(workdir: Path, repeats: int) -> list[str]:
    if not ESBUILD.exists() or not TSC.exists():
        return ["## Source maps", "", "Not measured: typescript and esbuild are not installed (`make setup`).", ""]
    bundle = workdir / "tsc.min.js"
    for library in TSC.parent.glob("lib*.d.ts"):  # tsc finds its default libraries beside itself
        (workdir / library.name).write_bytes(library.read_bytes())
    subprocess.run(
        [str(ESBUILD), str(TSC), "--bundle", "--minify", "--platform=node", "--sourcemap", f"--outfile={bundle}"],
        check=True,
        capture_output=True,
    )
    text = Path(f"{bundle}.map").read_bytes()
    positions = _function_starts(bundle.read_bytes())
    first, later = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        source_map = parse_source_map(Path(f"{bundle}.map").read_bytes(), str(workdir))
        source_map.originals(positions)
        first.append(time.perf_counter() - started)
        started = time.perf_counter()
        source_map.originals(positions)
        later.append(time.perf_counter() - started)
    mapped = sum(1 for original in source_map.originals(positions) if original is not None)
    run_lines = _profiles(bundle, workdir, repeats=3)
    return [
        "## Source maps",
        "",
        f"TypeScript's compiler bundled and minified by esbuild (`esbuild lib/tsc.js --bundle --minify --sourcemap`): "
        f"{bundle.stat().st_size / 2**20:.1f} MiB of code, a {len(text) / 2**20:.1f} MiB map "
        f"({len(source_map.names):,} names, {len(source_map.sources):,} sources). "
        f"{len(positions):,} function starts looked up ({mapped:,} mapped); median of {repeats}:",
        "",
        "| | time |",
        "| --- | --- |",
        f"| first use: the map read, parsed and asked | {statistics.median(first) * 1000:.0f} ms |",
        f"| later passes: the map kept parsed | {statistics.median(later) * 1000:.0f} ms |",
        "",
        "Nothing is read at start: a map is read on the source-map thread when the first frame of its script is seen, "
        "kept parsed (up to 256 MiB of maps), and asked once per pass (every 0.5 s) for the frames new since.",
        "",
        *run_lines,
    ]


def _function_starts(code: bytes) -> list[tuple[int, int]]:
    """(line, column), 1-based, of up to POSITIONS function heads in the bundle."""
    found: list[tuple[int, int]] = []
    for number, line in enumerate(code.split(b"\n"), 1):
        for match in re.finditer(rb"function[ \w$]*\(", line):
            found.append((number, match.end()))
    step = max(len(found) // POSITIONS, 1)
    return found[::step][:POSITIONS]


def _profiles(bundle: Path, workdir: Path, repeats: int) -> list[str]:
    """The bundle compiling a small project under jitprof, with and without
    source maps, interleaved: wall time and the share of its frames shown as written."""
    walls: dict[str, list[float]] = {"source maps": [], "--no-source-maps": []}
    shares: list[float] = []
    for _ in range(repeats):
        for label, flags in (("source maps", []), ("--no-source-maps", ["--no-source-maps"])):
            output = workdir / "tsc.folded"
            started = time.perf_counter()
            subprocess.run(
                [*JITPROF, "--no-tui", "-F", "499", *flags, "-o", str(output), "--", str(NODE), str(bundle)]
                + ["-p", str(PROJECT), "--noEmit"],
                check=False,
                capture_output=True,
                cwd=workdir,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            walls[label].append(time.perf_counter() - started)
            if label == "source maps":
                shares.append(_written_share(output.read_text()))
    return [
        f"`jitprof -F 499 -- node tsc.min.js -p fixtures/ts --noEmit` (median of {repeats}, interleaved): "
        f"the bundle's frames shown as written (in tsc.js or _tsc.js, the files it was built from), "
        f"{statistics.median(shares):.1f} %; run wall time "
        f"{statistics.median(walls['source maps']):.2f} s with source maps, "
        f"{statistics.median(walls['--no-source-maps']):.2f} s without.",
        "",
    ]


def _written_share(folded: str) -> float:
    """Of the bundle's frames (and those mapped from it), the share named by its sources."""
    written = total = 0
    for line in folded.splitlines():
        stack, _, count = line.rpartition(" ")
        for frame in stack.split(";"):
            source = re.search(r" (_?tsc\.js|tsc\.min\.js):\d", frame)
            if source is not None:
                total += int(count)
                written += int(count) if source.group(1) != "tsc.min.js" else 0
    return 100.0 * written / total if total else 0.0
