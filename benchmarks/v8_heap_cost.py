"""What naming JavaScript from V8's objects costs, beside the code-log path:
the program's time and the share of its samples V8's logging takes (tsc,
spawned), the BPF time per sample, the symbolizer's CPU per new JS frame,
and jitprof's own CPU while attached to a busy node."""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import JITPROF, ROOT
from benchmarks.kernel_cost import measured_run, sampler_time

APPS = ROOT / ".nodes" / "apps" / "node_modules"
TSC = [
    str(APPS / "typescript" / "bin" / "tsc"),
    "--noEmit",
    "--target",
    "es2020",
    str(APPS / "typescript" / "lib" / "typescript.d.ts"),
]
# tsc checking typescript.js as JavaScript: its checker recurses 60 to 120 JS frames deep.
DEEP_TSC = [
    str(APPS / "typescript" / "bin" / "tsc"),
    "--noEmit",
    "--allowJs",
    "--checkJs",
    "--skipLibCheck",
    "--target",
    "es2020",
    str(APPS / "typescript" / "lib" / "typescript.js"),
]
BUSY = ROOT / "fixtures" / "js" / "inline_chain.js"
TSC_LOOP = [
    str(ROOT / "benchmarks" / "tsc_loop.js"),
    str(APPS / "typescript"),
    str(APPS / "typescript" / "lib" / "typescript.js"),
]
PAIRED_ROUNDS = 4  # the order the two start in alternates: the one started first pays 1-3 % more
PAIRED_WINDOW_S = 20
V8_LOGGING = re.compile(r"V8FileLogger|LogFile::|EnsureLogScriptSource|PerfBasicLogger|CodeEventLogger|ExistingCodeLogger")
KERNEL_ROUNDS = 5  # tsc's BPF time varies by a fifth from run to run: medians of 5
PLAIN = {key: value for key, value in os.environ.items() if key != "NODE_OPTIONS"}


def _timed(command: list[str], workdir: Path, env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.monotonic()
    completed = subprocess.run(command, cwd=workdir, capture_output=True, text=True, env=env or PLAIN, check=True)
    return time.monotonic() - started, completed.stderr


def _logging_share(folded: Path) -> float:
    total = hit = 0
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        hit += int(count) if V8_LOGGING.search(stack) else 0
    return hit / max(total, 1)


def _tsc_runs(repeats: int, workdir: Path) -> list[str]:
    setups = {
        "tsc alone": ["node", *TSC],
        "jitprof -F 99 (V8's objects; a perf map)": [*JITPROF, "--no-tui", "-F", "99", "-o", "heap.folded", "--", "node", *TSC],
        "jitprof -F 99 --no-v8-heap (the code log)": [
            *JITPROF,
            "--no-tui",
            "-F",
            "99",
            "--no-v8-heap",
            "-o",
            "log.folded",
            "--",
            "node",
            *TSC,
        ],
    }
    times: dict[str, list[float]] = {name: [] for name in setups}
    shares: dict[str, list[float]] = {name: [] for name in setups}
    _timed(setups["jitprof -F 99 (V8's objects; a perf map)"], workdir)  # caches
    for repeat in range(repeats):
        for name, command in setups.items():
            elapsed, _ = _timed(command, workdir)
            times[name].append(elapsed)
            output = "heap.folded" if "objects" in name else "log.folded" if "code log" in name else ""
            if output:
                shares[name].append(_logging_share(workdir / output))
        print(f"bench: v8 heap cost, tsc round {repeat + 1}/{repeats}", file=sys.stderr)
    alone = statistics.median(times["tsc alone"])
    lines = ["| setup | tsc wall time (s) | vs tsc alone | V8's logging, share of samples |", "| --- | --- | --- | --- |"]
    for name in setups:
        median = statistics.median(times[name])
        share = f"{100 * statistics.median(shares[name]):.2f} %" if shares[name] else "–"
        lines.append(f"| {name} | {median:.2f} | {100 * (median / alone - 1):+.1f} % | {share} |")
    return lines


def _bpf_ns_per_sample(flags: list[str], program: list[str], workdir: Path) -> tuple[float, int]:
    cost = measured_run([*JITPROF, "--no-tui", "-F", "999", *flags, "-o", "bpf.folded", "--", "node", *program], workdir, PLAIN)
    return cost.bpf_ns_per_sample, cost.samples


def attach_sampling(flags: list[str], target_pid: int, output: str, workdir: Path) -> subprocess.Popen[bytes]:
    command = [*JITPROF, "--no-tui", "-F", "999", *flags, "--pid", str(target_pid), "-d", str(PAIRED_WINDOW_S + 30), "-o", output]
    jitprof = subprocess.Popen(command, cwd=workdir, env=PLAIN, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while sampler_time(jitprof.pid)[1] == 0:
        if jitprof.poll() is not None or time.monotonic() > deadline:
            jitprof.kill()
            raise RuntimeError(f"jitprof {' '.join(flags)} did not start sampling")
        time.sleep(0.2)
    return jitprof


def paired_rounds(target_pid: int, rounds: int, label: str, workdir: Path) -> tuple[float, float, list[float]]:
    """Two jitprofs attached at once to one process, one having the kernel
    read its runtime's frame words (the default) and one not
    (`--no-v8-heap`): the same stacks at the same moments, so the program's
    phases fall on both. Over PAIRED_WINDOW_S seconds of both sampling, each
    sampler's BPF time per run (every CPU's tick, the idle ones' too), which
    of the two starts first alternating. Returns the medians of both and each
    round's ratio."""
    read_costs, plain_costs, ratios = [], [], []
    for round_index in range(rounds):
        read_first = round_index % 2 == 0
        order = [[], ["--no-v8-heap"]] if read_first else [["--no-v8-heap"], []]
        samplers = [attach_sampling(flags, target_pid, f"paired{index}.folded", workdir) for index, flags in enumerate(order)]
        try:
            time.sleep(3)
            before = [sampler_time(sampler.pid) for sampler in samplers]
            time.sleep(PAIRED_WINDOW_S)
            after = [sampler_time(sampler.pid) for sampler in samplers]
        finally:
            for sampler in samplers:
                sampler.kill()
                sampler.wait()
        per_run = [(end[0] - start[0]) / max(end[1] - start[1], 1) for start, end in zip(before, after, strict=True)]
        read, plain = per_run if read_first else per_run[::-1]
        read_costs.append(read)
        plain_costs.append(plain)
        ratios.append(read / plain)
        print(f"bench: {label}, paired BPF round {round_index + 1}/{rounds}: {read / plain:.3f}", file=sys.stderr)
    for output in workdir.glob("paired*.folded"):
        output.unlink()
    return statistics.median(read_costs), statistics.median(plain_costs), ratios


def paired_row(label: str, read: float, plain: float, ratios: list[float]) -> str:
    """A table row of paired_rounds: both medians, the median difference, its spread over the rounds."""
    spread = f"{100 * (min(ratios) - 1):+.1f} to {100 * (max(ratios) - 1):+.1f} %"
    return (
        f"| {label} | {read / 1000:.2f} µs | {plain / 1000:.2f} µs | {100 * (statistics.median(ratios) - 1):+.1f} % | {spread} |"
    )


def _paired_bpf_cost(program: list[str], workdir: Path) -> tuple[float, float, list[float]]:
    """paired_rounds on one node started without flags."""
    target = subprocess.Popen(["node", *program, "900"], cwd=workdir, env=PLAIN, stdout=subprocess.DEVNULL)
    try:
        time.sleep(8)  # past start-up: the hot code optimized
        return paired_rounds(target.pid, PAIRED_ROUNDS, "v8 heap cost", workdir)
    finally:
        target.kill()
        target.wait()


def _symbolizer_cost(workdir: Path) -> tuple[int, float]:
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.v8_heap_probe", "--no-tui", "-F", "199", "-o", "probe.folded", "--", "node", *TSC],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=dict(PLAIN, PYTHONPATH=str(ROOT)),
        check=True,
    )
    meter = json.loads(completed.stderr.split("v8-heap-probe ", 1)[1].splitlines()[0])
    return meter["frames"], meter["cpu_ns"] / max(meter["frames"], 1) / 1000


def _attached_cpu(flags: list[str], node_flags: list[str], seconds: float, workdir: Path) -> float:
    """jitprof's own CPU time (user + system) attached to a busy node for seconds."""
    target = subprocess.Popen(
        ["node", *node_flags, str(BUSY), str(seconds + 15)], cwd=workdir, env=PLAIN, stdout=subprocess.DEVNULL
    )
    try:
        time.sleep(1.5)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(
            [*JITPROF, "--no-tui", *flags, "--pid", str(target.pid), "-d", str(seconds), "-o", "attached.folded"],
            cwd=workdir,
            capture_output=True,
            check=True,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        target.kill()
        target.wait()
        Path(f"/tmp/perf-{target.pid}.map").unlink(missing_ok=True)
        for log in workdir.glob("*.log"):
            log.unlink()
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def _steady_share(flags: list[str], node_flags: list[str], workdir: Path) -> float:
    """CPU per second of attachment, start-up (imports, BPF load, tables) taken out: two lengths' difference."""
    short = statistics.median(_attached_cpu(flags, node_flags, 5, workdir) for _ in range(3))
    long = statistics.median(_attached_cpu(flags, node_flags, 25, workdir) for _ in range(3))
    return (long - short) / 20


def v8_heap_cost(repeats: int, workdir: Path) -> list[str]:
    if not (APPS / "typescript").exists():
        return ["## Naming JavaScript from V8's objects", "", "Skipped: typescript is not installed (`make setup`).", ""]
    tsc_lines = _tsc_runs(repeats, workdir)
    previous = Path("/proc/sys/kernel/bpf_stats_enabled").read_text().strip()
    Path("/proc/sys/kernel/bpf_stats_enabled").write_text("1")
    try:
        kernel_rows = []
        for program, label in [([str(BUSY), "5"], "inline_chain.js"), (DEEP_TSC, "tsc, deep stacks")]:
            runs: dict[str, list[tuple[float, int]]] = {"read (default)": [], "not read (`--no-v8-heap`)": []}
            for _round in range(KERNEL_ROUNDS):  # interleaved: the machine's drift falls on both
                runs["read (default)"].append(_bpf_ns_per_sample([], program, workdir))
                runs["not read (`--no-v8-heap`)"].append(_bpf_ns_per_sample(["--no-v8-heap"], program, workdir))
            for name, measured in runs.items():
                per_sample = statistics.median(ns for ns, _samples in measured)
                samples = statistics.median(count for _ns, count in measured)
                kernel_rows.append(f"| {label} | {name} | {per_sample / 1000:.1f} µs | {samples:,.0f} |")
        paired_rows = []
        for program, label in [([str(BUSY)], "inline_chain.js"), (TSC_LOOP, "tsc's checker in a loop")]:
            paired_rows.append(paired_row(label, *_paired_bpf_cost(program, workdir)))
    finally:
        Path("/proc/sys/kernel/bpf_stats_enabled").write_text(previous)
    frames, per_frame_us = _symbolizer_cost(workdir)
    heap_share = _steady_share([], [], workdir)
    log_share = _steady_share(["--no-v8-heap"], ["--perf-basic-prof", "--interpreted-frames-native-stack", "--log-code"], workdir)
    return [
        "## Naming JavaScript from V8's objects",
        "",
        f"Spawned: `jitprof -- node tsc --noEmit typescript.d.ts` (TypeScript 5.9, system Node); wall time, medians of {repeats} "
        "interleaved runs; the share of samples in V8's logging (`V8FileLogger`, `LogFile`, `EnsureLogScriptSource`, ...), "
        "from each run's own profile.",
        "",
        *tsc_lines,
        "",
        "In the kernel, on the same stacks: two jitprofs attached at once (`--pid`, `-F 999`) to one node started without "
        "flags, one reading the JS frames' words (the default) and one not (`--no-v8-heap`, what the BPF program did before "
        f"V8's objects were read), over {PAIRED_WINDOW_S} s of both sampling; the BPF time per run of each sampler (every CPU's "
        f"tick, the idle CPU's too), medians of {PAIRED_ROUNDS} rounds, which of the two starts first alternating. "
        "inline_chain.js: ~10 frames, 4 of them JS; tsc's checker on typescript.js in a loop: 60 to 200 JS frames.",
        "",
        "| program | JS frames read | not read | difference (median) | rounds |",
        "| --- | --- | --- | --- | --- |",
        *paired_rows,
        "",
        "Spawned, `jitprof -F 999 -- node PROGRAM`: BPF time per sample with the JS frames' words read and sent, and "
        f"without (`--no-v8-heap`), medians of {KERNEL_ROUNDS} interleaved runs. inline_chain.js 5: a JS stack of ~10 frames, 4 of them V8's; tsc checking typescript.js "
        "(`--allowJs --checkJs`): 60 to 120 JS frames, every one read. Here the two runs differ by more than the BPF program: "
        "`--no-v8-heap` starts node with the code log's flags, and one run's phases are not the next one's.",
        "",
        "| program | JS frames | BPF time per sample | samples |",
        "| --- | --- | --- | --- |",
        *kernel_rows,
        "",
        f"Symbolizer: {per_frame_us:.0f} µs of CPU per JS frame named from V8's objects the first time ({frames:,} such frames "
        "in a tsc run at 199 Hz; later samples of the same code are served from the cache).",
        "",
        "Attached (`--pid`) to a busy node (`inline_chain.js`) at 99 Hz, jitprof's own CPU per second of attachment "
        "(25 s and 5 s runs, the difference: start-up taken out):",
        "",
        "| names from | jitprof CPU, share of one core |",
        "| --- | --- |",
        f"| V8's objects (node without flags) | {100 * heap_share:.2f} % |",
        f"| its code log (`--no-v8-heap`; node with `--log-code`) | {100 * log_share:.2f} % |",
        "",
        "Targets: V8's logging ≤ 1 % of a spawned program's samples; BPF time within 10 % of the code-log path's; "
        "≤ 2 % of a core attached.",
        "",
    ]
