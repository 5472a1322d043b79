"""What naming Java from HotSpot's own structures costs: the BPF time per
sample with the interpreted frames' words read and without (two jitprofs on
one JVM at once, compiled and under -Xint), the reading of a new method's
frames (blob, scopes, methods), and jitprof's own CPU under --all beside
one busy JVM."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks.harness import JITPROF, ROOT
from benchmarks.v8_heap_cost import PAIRED_WINDOW_S, paired_rounds, paired_row
from profiler.jit.jvm.hotspot.layout import layout_of
from profiler.jit.jvm.hotspot.objects import HotSpotReader
from profiler.jit.jvm.hotspot_source import libjvm_of
from profiler.kernel.process_memory import ProcessMemory

CLASSES = ROOT / "fixtures" / "build" / "java"
PAIRED_ROUNDS = 4
PLAIN = {key: value for key, value in os.environ.items() if key != "JAVA_TOOL_OPTIONS"}


def _jvm(*flags: str, seconds: int = 900) -> subprocess.Popen[str]:
    """Inlined.java running, past its warm-up."""
    process = subprocess.Popen(
        ["java", "-XX:+PreserveFramePointer", *flags, "-cp", str(CLASSES), "Inlined", str(seconds)],
        env=PLAIN,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "warm":
        process.kill()
        raise RuntimeError("the JVM did not warm up")
    return process


def _stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    process.wait()


def _paired(jvm_flags: list[str], workdir: Path) -> tuple[float, float, list[float]]:
    """paired_rounds on one JVM: interpreted frames' words read by the kernel, or not (--no-v8-heap)."""
    target = _jvm(*jvm_flags)
    try:
        return paired_rounds(target.pid, PAIRED_ROUNDS, "java structures", workdir)
    finally:
        _stop(target)


def _reading_cost() -> tuple[int, float, float, float]:
    """Every nmethod of a warm JVM read as the symbolizer reads a new one (its
    blob by a pc in it, its tables, its scopes' methods), cold: the layout
    (once per libjvm build), then per nmethod and per method, CPU time."""
    target = _jvm(seconds=60)
    try:
        started = time.process_time()
        found = libjvm_of(target.pid)
        assert found is not None, "libjvm.so is not mapped"
        path, bias = found
        memory = ProcessMemory(target.pid)
        reader = HotSpotReader(memory, layout_of(memory, path, bias), bias)
        heaps = reader.code_heaps()
        layout_s = time.process_time() - started
        # The blobs, block after block (each block's header says how many segments it takes).
        starts: list[int] = []
        for heap in heaps:
            segment, segments = 0, (heap.high - heap.low) >> heap.log2_segment
            while segment < segments and len(starts) < 1_000_000:
                header = memory.read(heap.low + (segment << heap.log2_segment), 16)
                length = int.from_bytes(header[:8], "little") if header is not None else 0
                if length == 0:
                    break  # the end of what was ever allocated
                if header is not None and header[8]:
                    starts.append(heap.low + (segment << heap.log2_segment))
                segment += length
        blobs, methods = 0, set()
        started = time.process_time()
        for block in starts:
            address = block + reader.layout.heap_block_size
            field = memory.read(address + reader.layout.blob_code_begin, 8)
            if field is None:
                continue
            begin = (
                address + int.from_bytes(field[:4], "little", signed=True)
                if reader.layout.blob_offsets
                else int.from_bytes(field, "little")
            )
            blob = reader.blob_at(begin)  # by a pc in its code, as a sample finds it
            code = reader.compiled(blob) if blob is not None else None
            if code is None:
                continue
            blobs += 1
            for index in range(1, len(code.metadata) // 8 + 1):
                method = code.method_at(index)
                if method not in methods and reader.method(method) is not None:
                    methods.add(method)
        spent = time.process_time() - started
        memory.close()
    finally:
        _stop(target)
    return blobs, layout_s, spent / max(blobs, 1), spent / max(len(methods), 1)


def _all_cpu(seconds: float, workdir: Path) -> float:
    """jitprof's own CPU (user + system) under --all for seconds, beside one busy JVM."""
    target = _jvm()
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(
            [*JITPROF, "--no-tui", "--all", "-d", str(seconds), "-o", "all.folded"], cwd=workdir, capture_output=True, check=True
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        _stop(target)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def java_structures_cost(workdir: Path) -> list[str]:
    if not (CLASSES / "Inlined.class").exists():
        return ["## Naming Java from HotSpot's structures", "", "Skipped: the Java fixtures are not built (javac missing).", ""]
    version = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    previous = Path("/proc/sys/kernel/bpf_stats_enabled").read_text().strip()
    Path("/proc/sys/kernel/bpf_stats_enabled").write_text("1")
    try:
        rows = [
            paired_row(label, *_paired(flags, workdir))
            for flags, label in [
                ([], "compiled (C2, run > step > leaf inlined)"),
                (["-Xint"], "interpreted (-Xint)"),
                # The later flag wins: compiled code without frame pointers. Read: whole stacks,
                # compiled frames stepped by their sizes; not read: stacks stop at the first one.
                (["-XX:-PreserveFramePointer"], "compiled, without frame pointers (stepped by frame sizes)"),
            ]
        ]
    finally:
        Path("/proc/sys/kernel/bpf_stats_enabled").write_text(previous)
    blobs, layout_s, per_blob_s, per_method_s = _reading_cost()
    short = statistics.median(_all_cpu(5, workdir) for _ in range(3))
    long = statistics.median(_all_cpu(25, workdir) for _ in range(3))
    steady = (long - short) / 20
    return [
        "## Naming Java from HotSpot's structures",
        "",
        f"fixtures/java/Inlined.java ({version}), started with `-XX:+PreserveFramePointer` only. In the kernel: two jitprofs "
        "attached at once (`--pid`, `-F 999`), one having interpreted frames' Method* and bytecode pointer read (the default) "
        f"and one not (`--no-v8-heap`), over {PAIRED_WINDOW_S} s of both sampling; BPF time per run of each sampler, medians "
        f"of {PAIRED_ROUNDS} rounds, which starts first alternating. Target: within 10 %. The last row's JVM runs "
        "without `-XX:+PreserveFramePointer`: read, its compiled frames are stepped over by their sizes and its stacks are "
        "whole (to the thread's start); not read, they stop at the first compiled frame: the difference is what whole "
        "stacks cost there, no target.",
        "",
        "| program | frames' words read | not read | difference (median) | rounds |",
        "| --- | --- | --- | --- | --- |",
        *rows,
        "",
        f"Reading, cold, what names a new compiled method (its blob found by a pc, its tables, its scopes' methods), every "
        f"nmethod of the warm JVM ({blobs} of them): the layout once per libjvm.so build {1000 * layout_s:.0f} ms; then "
        f"{1e6 * per_blob_s:.0f} µs of CPU per nmethod, {1e6 * per_method_s:.0f} µs per distinct method.",
        "",
        f"`jitprof --all` beside the busy JVM (one core): {100 * steady:.2f} % of a core in steady state (CPU of a 25 s run "
        "less a 5 s run's, over the 20 s between, medians of 3). Target: ≤ 1 %.",
        "",
    ]
