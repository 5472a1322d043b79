"""BPF time per sample and map memory, from the kernel's own accounting."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness import DWARF_CASES, JITPROF, ROOT


@dataclass(frozen=True)
class KernelCost:
    bpf_ns_per_sample: float
    samples: int
    map_memory_bytes: int


def _bpf_fdinfo(pid: int) -> list[dict[str, str]]:
    infos = []
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # it has ended
        return []
    for descriptor in descriptors:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{descriptor}")
            if "bpf" not in target:
                continue
            with open(f"/proc/{pid}/fdinfo/{descriptor}") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:
            continue
        infos.append({key.strip(): value.strip() for key, value in fields.items()})
    return infos


def sampler_time(jitprof_pid: int) -> tuple[int, int]:
    """The sampler's BPF run time (ns) and run count so far, from the kernel's
    accounting (kernel.bpf_stats_enabled). Tail calls run inside the entry
    program: its run time covers the walk."""
    return _sampler_total(_bpf_fdinfo(jitprof_pid))


def _sampler_total(infos: list[dict[str, str]]) -> tuple[int, int]:
    programs = [info for info in infos if info.get("prog_type") == "7"]
    return sum(int(info.get("run_time_ns", 0)) for info in programs), sum(int(info.get("run_cnt", 0)) for info in programs)


def kernel_cost(flags: list[str], workdir: Path) -> KernelCost:
    """BPF run time per collected sample (kernel.bpf_stats_enabled), map memory."""
    return measured_run([*JITPROF, "-F", "999", *flags, "-o", "cost.folded", "--", str(DWARF_CASES), "recursion", "5"], workdir)


def measured_run(command: list[str], workdir: Path, env: dict[str, str] | None = None) -> KernelCost:
    """Run a jitprof command line; its sampler's BPF time per sample and its map memory."""
    process = subprocess.Popen(command, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    # The kernel's counts are read while jitprof runs (its descriptors go
    # with it): the last reading before it ends.
    infos: list[dict[str, str]] = []
    sampler_ns = 0
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline:
        reading = _bpf_fdinfo(process.pid)
        run_time, runs = _sampler_total(reading)
        if runs:
            infos, sampler_ns = reading, run_time
        time.sleep(0.2)
    _, stderr = process.communicate(timeout=120)
    said = re.search(r"jitprof: ([\d,]+) samples", stderr)
    if said is None:
        raise RuntimeError(f"jitprof did not say how many samples it took: {stderr.strip()[-500:]}")
    samples = int(said.group(1).replace(",", ""))
    memory = sum(int(info.get("memlock", 0)) for info in infos if "map_type" in info)
    return KernelCost(sampler_ns / max(samples, 1) * (1 if samples else 0), samples, memory)


def labels_cost(workdir: Path, rounds: int = 3) -> tuple[float, float]:
    """BPF time per sample of fixtures/otel_context (its threads' records read
    at every sample) with labels and with --no-labels: medians of interleaved runs."""
    program = str(ROOT / "fixtures" / "build" / "otel_context")
    labelled: list[float] = []
    unlabelled: list[float] = []
    for _round in range(rounds):
        for flags, into in (([], labelled), (["--no-labels"], unlabelled)):
            command = [*JITPROF, "-F", "999", *flags, "-o", "cost.folded", "--", program, "3", "2"]
            into.append(measured_run(command, workdir).bpf_ns_per_sample)
    return statistics.median(labelled), statistics.median(unlabelled)


def kernel_costs(workdir: Path) -> list[str]:
    previous = Path("/proc/sys/kernel/bpf_stats_enabled").read_text().strip()
    Path("/proc/sys/kernel/bpf_stats_enabled").write_text("1")
    try:
        dwarf = kernel_cost([], workdir)
        frame_pointers = kernel_cost(["--no-dwarf"], workdir)
        labelled, unlabelled = labels_cost(workdir)
    finally:
        Path("/proc/sys/kernel/bpf_stats_enabled").write_text(previous)
    return [
        "## In the kernel: time per sample and memory",
        "",
        "`jitprof -F 999 -- dwarf_cases recursion 5` (stacks 19 frames deep through code without frame",
        "pointers); BPF run time from `kernel.bpf_stats_enabled`, over the samples collected (the",
        "sampler also runs, and returns at once, for every other process on the machine).",
        "",
        "| walk | BPF time per sample | samples | BPF map memory |",
        "| --- | --- | --- | --- |",
        f"| DWARF (default) | {dwarf.bpf_ns_per_sample / 1000:.1f} µs | {dwarf.samples:,} | {dwarf.map_memory_bytes / 2**20:.1f} MiB |",
        f"| frame pointers (`--no-dwarf`) | {frame_pointers.bpf_ns_per_sample / 1000:.1f} µs | {frame_pointers.samples:,} | "
        f"{frame_pointers.map_memory_bytes / 2**20:.1f} MiB |",
        "",
        "At 99 Hz on one busy CPU, 1 µs per sample is 0.01 % of that CPU.",
        "",
        "Request labels: `jitprof -F 999 -- otel_context 3 2` (two threads serving requests under an",
        "OpenTelemetry thread context the kernel reads at every sample), medians of 3 interleaved runs.",
        "",
        "| labels | BPF time per sample | ratio |",
        "| --- | --- | --- |",
        f"| read (default) | {labelled / 1000:.2f} µs | {labelled / max(unlabelled, 1):.3f} |",
        f"| `--no-labels` | {unlabelled / 1000:.2f} µs | 1 |",
        "",
    ]
