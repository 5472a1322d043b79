"""`make bench`: jitprof's cost and completeness, against baselines measured
in the same run (the program alone, `perf record`), medians of several runs."""

from __future__ import annotations

import argparse
import os
import platform
import pty
import random
import re
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from profiler import elf, node_preload, symcache, unwind
from profiler.events import WalkEnd
from profiler.jvm_attach import run_jcmd
from profiler.output import EXTENSIONS
from profiler.perfmap import open_perf_map
from profiler.profile import Frame, FrameKind, Profile, RunInfo, Sample
from profiler.rawprofile import write_raw
from profiler.runtimes import JAVA_FLAGS, merge_node_options, node_flags
from profiler.v8code import CodeMap, IsolateLog
from profiler.v8log import V8LogReader

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "build"
WORKLOAD = FIXTURES / "workload"
DWARF_CASES = FIXTURES / "dwarf_cases"
ROUNDS = "800"
JITPROF = [sys.executable, "-m", "profiler"]
NODE = Path("/usr/bin/node")
JS_WORKLOAD = ROOT / "fixtures" / "js" / "workload.js"
JS_ROUNDS = "150"
JAVA_COMMAND = [
    "java", "-XX:CompileCommand=quiet", "-XX:CompileCommand=dontinline,Hot::*",
    "-cp", str(ROOT / "fixtures" / "build" / "java"), "Hot", "--rounds", "4000000",
]
JS_CODEGEN = ROOT / "fixtures" / "js" / "codegen.js"


@dataclass(frozen=True)
class WorkloadRun:
    elapsed_s: float  # the workload's own measure of its work
    start_delay_s: float  # from launching the command to main's first instruction
    wall_s: float  # the whole command, tool start-up and end work included


@dataclass(frozen=True)
class KernelCost:
    bpf_ns_per_sample: float
    samples: int
    map_memory_bytes: int


@dataclass(frozen=True)
class Completeness:
    tool: str
    case: str
    reach_main: float
    samples: int
    data_bytes: int


def run_workload(prefix: list[str], workdir: Path, command: list[str] | None = None, env: dict[str, str] | None = None) -> WorkloadRun:
    launched_ns = time.time_ns()
    started = time.monotonic()
    completed = subprocess.run(
        [*prefix, *(command or [str(WORKLOAD), ROUNDS])], cwd=workdir, capture_output=True, text=True, check=True, env=env
    )
    wall = time.monotonic() - started
    fields = dict(item.split("=") for item in completed.stdout.split())
    return WorkloadRun(
        elapsed_s=int(fields["elapsed_ns"]) / 1e9,
        start_delay_s=(int(fields["first_instruction_ns"]) - launched_ns) / 1e9,
        wall_s=wall,
    )


@dataclass(frozen=True)
class Setup:
    prefix: list[str]  # the tool in front of the workload; [] for the workload alone
    env: dict[str, str] | None = None


def interleaved_runs(setups: dict[str, Setup], repeats: int, workdir: Path, command: list[str] | None, label: str) -> dict[str, list[WorkloadRun]]:
    """Each setup once per round, rounds repeated: drift hits all setups alike."""
    results: dict[str, list[WorkloadRun]] = {name: [] for name in setups}
    for repeat in range(repeats):
        for name, setup in setups.items():
            results[name].append(run_workload(setup.prefix, workdir, command, setup.env))
        print(f"bench: {label}, round {repeat + 1}/{repeats}", file=sys.stderr)
    return results


def sampling_cost(repeats: int, perf: str | None, workdir: Path) -> list[str]:
    setups = {
        "alone": Setup([]),
        "jitprof -F 99": Setup([*JITPROF, "-F", "99", "-o", "bench.folded", "--"]),
        "jitprof -F 99 --no-dwarf": Setup([*JITPROF, "-F", "99", "--no-dwarf", "-o", "bench.folded", "--"]),
    }
    if perf:
        setups["perf record -F 99 -g"] = Setup([perf, "record", "-q", "-F", "99", "-g", "-o", "perf.data", "--"])
    run_workload(setups["jitprof -F 99"].prefix, workdir)  # warm the symbol and unwind caches
    results = interleaved_runs(setups, repeats, workdir, None, "sampling cost")
    alone = statistics.median(run.elapsed_s for run in results["alone"])
    lines = [
        "## Cost of sampling a CPU-bound program",
        "",
        f"`fixtures/build/workload {ROUNDS}`: a CPU-bound native program (main → outer → middle → inner). "
        f"Medians of {repeats} interleaved runs.",
        "",
        "| setup | workload time (s) | slowdown vs alone | launch → first instruction (s) | whole command (s) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, runs in results.items():
        elapsed = statistics.median(run.elapsed_s for run in runs)
        lines.append(
            f"| {name} | {elapsed:.3f} | {100 * (elapsed / alone - 1):+.2f} % | "
            f"{statistics.median(run.start_delay_s for run in runs):.3f} | "
            f"{statistics.median(run.wall_s for run in runs):.3f} |"
        )
    alone_runs = [run.elapsed_s for run in results["alone"]]
    lines += [
        "",
        f"Noise floor: the workload alone took {min(alone_runs):.3f} s to {max(alone_runs):.3f} s "
        f"({100 * (max(alone_runs) / min(alone_runs) - 1):.1f} % apart); slowdowns below that are within noise.",
        "",
        "- *workload time* is measured by the workload itself around its loop, so the slowdown is the",
        "  cost of sampling while it runs (target ≤ 1 % at 99 Hz).",
        "- *launch → first instruction*: for jitprof, BCC compiling and loading the BPF program.",
        "- *whole command* includes start-up and the work after the program ends (symbolising and",
        "  writing; perf: writing perf.data).",
        "",
    ]
    return lines


def node_cost(repeats: int, perf: str | None, workdir: Path) -> list[str]:
    command = ["node", str(JS_WORKLOAD), JS_ROUNDS]
    plain = {key: value for key, value in os.environ.items() if key != "NODE_OPTIONS"}
    flagged = dict(plain, NODE_OPTIONS=merge_node_options(None))
    with_code_log = dict(plain, NODE_OPTIONS=merge_node_options(None, node_flags(node_preload.install())))
    setups = {
        "node alone": Setup([], plain),
        "node with the perf-map flags": Setup([], flagged),
        "node with the perf-map flags and the code log": Setup([], with_code_log),
        "jitprof -F 99 (injects the flags)": Setup([*JITPROF, "-F", "99", "-o", "bench.folded", "--"], plain),
    }
    if perf:
        setups["perf record -F 99 -g, with the flags"] = Setup([perf, "record", "-q", "-F", "99", "-g", "-o", "perf.data", "--"], flagged)
    results = runtime_runs(setups, "jitprof -F 99 (injects the flags)", command, repeats, workdir, "node cost")
    for leftover in workdir.glob("isolate-*-v8.log"):
        leftover.unlink()
    return [
        "## Cost of profiling a CPU-bound Node.js program",
        "",
        f"`node fixtures/js/workload.js {JS_ROUNDS}` (system Node, {subprocess.run(['node', '--version'], capture_output=True, text=True).stdout.strip()}); "
        f"the flags' own cost is separate from sampling's. Medians of {repeats} interleaved runs.",
        "",
        *slowdown_table(results, "node alone"),
        "",
        "Target: ≤ 3 % in total at 99 Hz.",
        "",
    ]


def java_cost(repeats: int, perf: str | None, workdir: Path) -> list[str]:
    if shutil.which("java") is None:
        return ["## Cost of profiling a Java program", "", "Skipped: no `java` on this machine.", ""]
    plain = {key: value for key, value in os.environ.items() if key != "JAVA_TOOL_OPTIONS"}
    flagged = dict(plain, JAVA_TOOL_OPTIONS=" ".join(JAVA_FLAGS))
    setups = {
        "java alone": Setup([], plain),
        "java with the injected flags": Setup([], flagged),
        "jitprof -F 99 (flags, perf map asked for every second)": Setup([*JITPROF, "-F", "99", "-o", "bench.folded", "--"], plain),
    }
    if perf:
        setups["perf record -F 99 -g, with the flags"] = Setup([perf, "record", "-q", "-F", "99", "-g", "-o", "perf.data", "--"], flagged)
    results = runtime_runs(
        setups, "jitprof -F 99 (flags, perf map asked for every second)", JAVA_COMMAND, repeats, workdir, "java cost"
    )
    return [
        "## Cost of profiling a Java program",
        "",
        f"`{' '.join(JAVA_COMMAND[:1] + JAVA_COMMAND[-3:])}` (fixtures/java/Hot.java, "
        f"{subprocess.run(['java', '-version'], capture_output=True, text=True).stderr.splitlines()[0]}). "
        f"Medians of {repeats} interleaved runs.",
        "",
        *slowdown_table(results, "java alone"),
        "",
        *perf_map_request_cost(workdir, plain),
        "",
    ]


def runtime_runs(
    setups: dict[str, Setup], warm: str, command: list[str], repeats: int, workdir: Path, label: str
) -> dict[str, list[WorkloadRun]]:
    """Interleaved runs after one run of `warm` (caches); removes the perf
    maps the runs without jitprof left (the runtime's own flags write them)."""
    before = set(Path("/tmp").glob("perf-*.map"))
    run_workload(setups[warm].prefix, workdir, command, setups[warm].env)
    results = interleaved_runs(setups, repeats, workdir, command, label)
    for leftover in set(Path("/tmp").glob("perf-*.map")) - before:
        leftover.unlink()
    return results


def slowdown_table(results: dict[str, list[WorkloadRun]], baseline: str) -> list[str]:
    alone = statistics.median(run.elapsed_s for run in results[baseline])
    lines = [f"| setup | workload time (s) | vs {baseline} |", "| --- | --- | --- |"]
    for name, runs in results.items():
        elapsed = statistics.median(run.elapsed_s for run in runs)
        lines.append(f"| {name} | {elapsed:.3f} | {100 * (elapsed / alone - 1):+.2f} % |")
    return lines


def perf_map_request_cost(workdir: Path, environment: dict[str, str]) -> list[str]:
    """One `Compiler.perfmap` request to a running JVM: jcmd against jitprof's own attach client."""
    jvm = subprocess.Popen([*JAVA_COMMAND[:-2], "30"], cwd=workdir, env=environment, stdout=subprocess.DEVNULL)
    try:
        time.sleep(2.0)
        run_jcmd(jvm.pid, "Compiler.perfmap")  # the attach listener starts on the first request
        ours = []
        for _ in range(20):
            started = time.perf_counter()
            run_jcmd(jvm.pid, "Compiler.perfmap")
            ours.append(time.perf_counter() - started)
        jcmd_wall, jcmd_cpu = [], []
        for _ in range(5):
            before = os.times()
            started = time.perf_counter()
            subprocess.run(["jcmd", str(jvm.pid), "Compiler.perfmap"], check=True, capture_output=True)
            jcmd_wall.append(time.perf_counter() - started)
            after = os.times()
            jcmd_cpu.append(after.children_user + after.children_system - before.children_user - before.children_system)
    finally:
        jvm.terminate()  # not SIGKILL: the JVM removes its attach socket as it exits
        jvm.wait()
        Path(f"/tmp/perf-{jvm.pid}.map").unlink(missing_ok=True)
    return [
        "Asking a running JVM for its perf map (`Compiler.perfmap`, this fixture): "
        f"jitprof's attach client {1000 * statistics.median(ours):.1f} ms (median of 20, including writing the map); "
        f"`jcmd` {1000 * statistics.median(jcmd_wall):.0f} ms wall and {1000 * statistics.median(jcmd_cpu):.0f} ms of CPU "
        "(median of 5; it starts a JVM each time).",
    ]


@dataclass(frozen=True)
class DaemonCpu:
    share_of_core: float  # jitprof's own CPU time over the target's lifetime, as a share of one core
    target_s: float


def _cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime, not children's


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def daemon_cpu_on_a_terminal(args: list[str], workdir: Path) -> DaemonCpu:
    """Run jitprof on a pseudo-terminal (so the live view is on unless told
    otherwise) and measure its own CPU while its command runs."""
    environment = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    environment["TERM"] = "xterm-256color"
    pid, master = pty.fork()
    if pid == 0:
        os.chdir(workdir)
        os.execve(sys.executable, [sys.executable, "-m", "profiler", *args], environment)
    started = first_cpu = last_cpu = None
    last_seen = 0.0
    output_open = True
    while True:
        ready, _, _ = select.select([master] if output_open else [], [], [], 0.05)
        if ready:
            try:
                output_open = bool(os.read(master, 65536))  # drained, so the view never blocks
            except OSError:
                output_open = False
        cpu = _cpu_seconds(pid)
        if _children(pid):
            now = time.monotonic()
            if started is None:
                started, first_cpu = now, cpu
            last_seen, last_cpu = now, cpu
        if os.waitpid(pid, os.WNOHANG)[0]:
            break
    os.close(master)
    if started is None or first_cpu is None or last_cpu is None:
        raise RuntimeError("the command never ran under jitprof")
    return DaemonCpu((last_cpu - first_cpu) / (last_seen - started), last_seen - started)


def live_view_cost(repeats: int, workdir: Path) -> list[str]:
    command = ["--", "node", str(JS_WORKLOAD), "400"]
    setups = {
        "live view": ["-F", "99", "-o", "view.folded", *command],
        "--no-tui": ["-F", "99", "--no-tui", "-o", "plain.folded", *command],
    }
    results: dict[str, list[DaemonCpu]] = {name: [] for name in setups}
    for round_index in range(repeats):
        print(f"bench: live view cost, round {round_index + 1}/{repeats}", file=sys.stderr)
        for name, args in setups.items():
            results[name].append(daemon_cpu_on_a_terminal(args, workdir))
    shares = {name: statistics.median(run.share_of_core for run in runs) for name, runs in results.items()}
    target_s = statistics.median(run.target_s for runs in results.values() for run in runs)
    return [
        "## Cost of the live view",
        "",
        f"jitprof's own CPU time (its process, not the program's) while `node fixtures/js/workload.js 400` runs "
        f"(≈ {target_s:.0f} s, one busy CPU, 99 Hz) on a pseudo-terminal, medians of {repeats} interleaved runs.",
        "",
        "| setup | jitprof CPU, share of one core |",
        "| --- | --- |",
        *(f"| {name} | {100 * share:.2f} % |" for name, share in shares.items()),
        "",
        f"The view's own cost: {100 * (shares['live view'] - shares['--no-tui']):+.2f} % of one core (target < 5 %).",
        "",
    ]


def synthetic_profile(samples: int, seed: int = 1) -> Profile:
    """An hour at 99 Hz on 2 CPUs, roughly: a Node service's stacks, 20 to 60
    frames deep, native and JIT frames with inlining and exact lines."""
    rng = random.Random(seed)
    profile = Profile(RunInfo(["node", "server.js"], [4242], 99, started_ns=0, ended_ns=3600 * 10**9))
    native = [Frame(f"node::native_{index}(int)", "/usr/bin/node", FrameKind.NATIVE) for index in range(400)]
    jit: list[Frame] = []
    for index in range(3000):
        script = f"/srv/app/lib/module{index % 300}.js"
        for line in range(3):
            jit.append(Frame(f"handler{index} module{index % 300}.js:{index % 900}", "[jit]", FrameKind.JIT, script,
                             index % 900 + line, 7, "turbofan", inlined=line > 0, line_exact=True, function_line=index % 900))
    roots = [profile.intern(frame) for frame in native[:12]]
    paths = []
    for _ in range(5000):  # distinct stacks, reused as a service's are
        depth = rng.randint(8, 48)
        paths.append(tuple(roots + [profile.intern(rng.choice(jit if rng.random() < 0.8 else native)) for _ in range(depth)]))
    interval = 3600 * 10**9 // samples
    for index in range(samples):
        tid = 4242 + index % 4
        profile.add(Sample(index * interval, 4242, tid, "node", paths[int(rng.paretovariate(1.2)) % len(paths)], WalkEnd.COMPLETE))
    return profile


def format_conversion(workdir: Path) -> list[str]:
    """`jitprof report` of a 700 k-sample profile into every format: time and peak memory."""
    profile = synthetic_profile(700_000)
    raw = workdir / "hour.jitprof"
    with open(raw, "wb") as handle:
        write_raw(profile, handle)
    del profile
    names = {"folded": "hour.folded", "svg": "hour.svg", "speedscope": "hour.speedscope.json", "cpuprofile": "hour.cpuprofile",
             "pprof": "hour.pb.gz", "callgrind": "callgrind.out.hour"}
    assert set(names) | {"jitprof"} == set(EXTENSIONS.values())
    rows = []
    for format_name, file_name in [("all six", ""), *names.items()]:
        outputs = [arg for name in (names.values() if not file_name else [file_name]) for arg in ("-o", str(workdir / name))]
        started = time.monotonic()
        completed = subprocess.Popen([*JITPROF, "report", str(raw), *outputs], cwd=workdir, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(completed.pid, 0)
        elapsed = time.monotonic() - started
        if status != 0:
            raise RuntimeError(f"jitprof report failed for {format_name}")
        size = sum((workdir / name).stat().st_size for name in (names.values() if not file_name else [file_name]))
        written = f"{size / 2**20:.0f} MiB" if size >= 2**20 else f"{size / 1024:.0f} KiB"
        rows.append(f"| {format_name} | {elapsed:.1f} s | {usage.ru_maxrss / 1024:.0f} MiB | {written} |")
    return [
        "## Converting a long profile to every format",
        "",
        f"A synthetic profile of 700,000 samples (an hour at 99 Hz on 2 CPUs; 5,000 distinct stacks 20–60 frames deep, "
        f"9,400 frames), saved as .jitprof ({raw.stat().st_size / 2**20:.1f} MiB), converted by `jitprof report`. "
        "Target: every format within 60 s and 1 GB.",
        "",
        "| output | wall time | peak memory (RSS) | written |",
        "| --- | --- | --- | --- |",
        *rows,
        "",
    ]


def code_log_parsing(workdir: Path, repeats: int) -> list[str]:
    """Throughput of reading V8's code log, on a real log of a program that
    compiles and optimises thousands of functions."""
    log = workdir / "codegen-v8.log"
    subprocess.run(
        ["node", "--log-code", "--log-source-code", "--no-logfile-per-isolate", f"--logfile={log}", str(JS_CODEGEN), "3000"],
        cwd=workdir, check=True, capture_output=True,
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


def perf_map_tailing(workdir: Path) -> list[str]:
    """Throughput of reading a large perf map (as a busy Node service writes)."""
    path = workdir / "perf-bench.map"
    with open(path, "w") as handle:
        for index in range(300_000):
            handle.write(f"{0x7f0000000000 + index * 0x400:x} 3a0 JS:*handler{index % 5000} /srv/app/lib/module{index % 300}.js:{index % 900}:7\n")
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


def _bpf_fdinfo(pid: int) -> list[dict[str, str]]:
    infos = []
    for descriptor in os.listdir(f"/proc/{pid}/fd"):
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


def kernel_cost(flags: list[str], workdir: Path) -> KernelCost:
    """BPF run time per collected sample (kernel.bpf_stats_enabled), map memory."""
    process = subprocess.Popen(
        [*JITPROF, "-F", "999", *flags, "-o", "cost.folded", "--", str(DWARF_CASES), "recursion", "5"],
        cwd=workdir, stderr=subprocess.PIPE, text=True,
    )
    time.sleep(6.5)  # compile, then a few seconds of sampling
    infos = _bpf_fdinfo(process.pid)
    _, stderr = process.communicate(timeout=120)
    samples = int(re.search(r"jitprof: ([\d,]+) samples", stderr).group(1).replace(",", ""))
    # Tail calls run inside the entry program: its run time covers the walk.
    sampler_ns = sum(int(info.get("run_time_ns", 0)) for info in infos if info.get("prog_type") == "7")
    memory = sum(int(info.get("memlock", 0)) for info in infos if "map_type" in info)
    return KernelCost(sampler_ns / max(samples, 1) * (1 if samples else 0), samples, memory)


def kernel_costs(workdir: Path) -> list[str]:
    previous = Path("/proc/sys/kernel/bpf_stats_enabled").read_text().strip()
    Path("/proc/sys/kernel/bpf_stats_enabled").write_text("1")
    try:
        dwarf = kernel_cost([], workdir)
        frame_pointers = kernel_cost(["--no-dwarf"], workdir)
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
    ]


def table_build(cache_dir: Path) -> list[str]:
    if not NODE.exists():
        return []
    os.environ["JITPROF_CACHE_DIR"] = str(cache_dir)
    started = time.monotonic()
    with open(NODE, "rb") as handle:
        table = unwind.compile_table(handle)
    cold = time.monotonic() - started
    packed = table.pack()
    unwind.store_cached("b-0000", packed)
    started = time.monotonic()
    assert unwind.load_cached("b-0000") == packed
    cached = time.monotonic() - started
    image = elf.open_elf([str(NODE)], str(NODE))
    try:
        started = time.monotonic()
        symbols = elf.read_symbols(image.handle)
        symbols_cold = time.monotonic() - started
        symcache.store("b-0000", symbols)
        started = time.monotonic()
        assert symcache.load("b-0000") is not None
        symbols_cached = time.monotonic() - started
    finally:
        image.close()
    return [
        "## Symbols and unwind table for /usr/bin/node",
        "",
        f"{NODE.stat().st_size / 2**20:.0f} MiB binary, {len(symbols):,} function symbols: read with pyelftools in "
        f"{symbols_cold:.2f} s, from the cache in {symbols_cached * 1000:.1f} ms.",
        "",
        "| FDEs | rows (merged) | rows size | cold build | from the cache |",
        "| --- | --- | --- | --- | --- |",
        f"| {table.fde_count:,} | {len(table.rows):,} | {len(packed) / 2**20:.1f} MiB | {cold:.1f} s | {cached * 1000:.1f} ms |",
        "",
        "Cold builds run on a thread while sampling goes on (frames in node take frame-pointer steps",
        "until the table is live); later runs load the cache, keyed by build-id.",
        "",
    ]


def _perf_reach_main(perf: str, data: Path) -> tuple[float, int]:
    script = subprocess.run([perf, "script", "-i", str(data), "-F", "ip,sym"], capture_output=True, text=True).stdout
    blocks = [block for block in script.split("\n\n") if block.strip()]
    reached = sum(1 for block in blocks if re.search(r"^\s*[0-9a-f]+ main$", block, re.MULTILINE))
    return reached / max(len(blocks), 1), len(blocks)


def completeness(perf: str | None, workdir: Path) -> list[str]:
    rows: list[Completeness] = []
    for case in ("recursion", "qsort"):
        command = [str(DWARF_CASES), case, "3"]
        subprocess.run([*JITPROF, "-o", "warm.folded", "--", *command], cwd=workdir, capture_output=True)
        for label, flags in (("jitprof", []), ("jitprof --no-dwarf", ["--no-dwarf"])):
            subprocess.run([*JITPROF, *flags, "-o", "out.folded", "--", *command], cwd=workdir, capture_output=True, check=True)
            lines = (workdir / "out.folded").read_text().splitlines()
            total = sum(int(line.rsplit(" ", 1)[1]) for line in lines)
            reached = sum(int(line.rsplit(" ", 1)[1]) for line in lines if ";main;" in line)
            rows.append(Completeness(label, case, reached / max(total, 1), total, len("\n".join(lines))))
        if perf:
            for label, flags in (("perf -g", ["-g"]), ("perf --call-graph dwarf", ["--call-graph", "dwarf"])):
                data = workdir / "perf.data"
                subprocess.run([perf, "record", "-q", "-F", "99", *flags, "-o", str(data), "--", *command], cwd=workdir, capture_output=True, check=True)
                share, samples = _perf_reach_main(perf, data)
                rows.append(Completeness(label, case, share, samples, data.stat().st_size))
    lines = [
        "## Completeness: samples whose stack reaches main",
        "",
        "`dwarf_cases MODE 3`, built -O2 -fomit-frame-pointer, at 99 Hz.",
        "",
        "| case | tool | reach main | samples | data written |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        lines.append(f"| {row.case} | {row.tool} | {100 * row.reach_main:.1f} % | {row.samples} | {row.data_bytes / 1024:.0f} KiB |")
    lines.append("")
    return lines


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
        report += sampling_cost(args.repeats, perf, workdir)
        report += node_cost(max(args.repeats - 2, 3), perf, workdir)
        report += java_cost(max(args.repeats - 2, 3), perf, workdir)
        report += perf_map_tailing(workdir)
        report += code_log_parsing(workdir, 5)
        report += format_conversion(workdir)
        report += live_view_cost(3, workdir)
        report += kernel_costs(workdir)
        report += completeness(perf, workdir)
        report += table_build(workdir / "table-cache")
    text = "\n".join(report)
    print(text)
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
