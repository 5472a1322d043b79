"""What --off-cpu costs: a node HTTP server under a bounded load on
127.0.0.1 (its requests per second, alone and with jitprof attached, CPU only
and with --off-cpu), and jitprof's own CPU at about 10,000 context switches a
second. Medians of interleaved rounds, all measured in the same run."""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

from benchmarks import goals
from benchmarks.harness import FIXTURES, JITPROF, NODE, ROOT
from profiler.run.recording import SAMPLING_LINE

SERVER = ROOT / "benchmarks" / "http_server.js"
# The load: a C client costing the machine a fraction of what the server does
# per request, so the server on its own CPU sets the pace (a node client cost
# as much as the server, set the pace itself, and shared its CPU with jitprof).
LOAD = FIXTURES / "http_load"
LOAD_SECONDS = 6
FIRST_LOAD_SECONDS = 3  # right after jitprof attaches: it names the server's code for the first time
CONNECTIONS = 16
SWITCH_RATE = 4500  # round trips a second: about 10,000 voluntary switches
SWITCH_SECONDS = 10
SETTLE_S = 2.0
PERF_SETUP = "perf record -F 99 -g -p (the anchor)"
SETUPS: dict[str, list[str] | None] = {
    "server alone": None,
    "jitprof --pid (CPU only)": [],
    "jitprof --off-cpu --pid": ["--off-cpu"],
}
PID_GOAL = 0.98  # of the server's requests per second alone
OFF_CPU_GOAL = 0.97


def _pinned(cpu: int) -> list[str]:
    """The server gets a CPU of its own, the load and jitprof the other: what
    is measured is what jitprof makes the server do (BPF programs run in its
    context, uprobes trap in it), not jitprof's own CPU, reported apart."""
    return ["taskset", "-c", str(cpu)] if (os.cpu_count() or 1) >= 2 else []


def _run_seconds(pid: int) -> float:
    """A process's CPU time from the scheduler's own count (nanoseconds, all
    threads), not the clock ticks of /proc/PID/stat."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


def _cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _tree(pid: int) -> list[int]:
    """pid and its descendants (jitprof's naming helper)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        try:
            pending += [int(child) for child in Path(f"/proc/{current}/task/{current}/children").read_text().split()]
        except OSError:
            continue
    return found


def _voluntary_switches(pid: int) -> int:
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def _attached(command: list[str], workdir: Path, deadline_s: float = 60.0) -> subprocess.Popen:
    """jitprof attached in the background, returned once it says it samples
    (its perf events open; the tracepoints it opens at load are perf events
    too, and come seconds before). Its stderr is read on to the end."""
    jitprof = subprocess.Popen(command, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sampling = threading.Event()

    def read(stream: IO[str]) -> None:
        for line in stream:
            if line.startswith(SAMPLING_LINE):
                sampling.set()
        stream.close()

    threading.Thread(target=read, args=(jitprof.stderr,), daemon=True).start()
    end = time.monotonic() + deadline_s
    while not sampling.wait(0.05):
        if jitprof.poll() is not None:
            raise RuntimeError("jitprof ended before sampling")
        if time.monotonic() > end:
            jitprof.kill()
            raise RuntimeError("jitprof did not start sampling")
    return jitprof


def _load(port: int, seconds: int) -> float:
    """Requests a second the bounded client got answered."""
    # Real-time on its CPU: jitprof beside it (at 999 Hz, busy) must not slow
    # it, or the server waits for requests and its CPU per request grows.
    load = subprocess.run(
        [*_pinned(1), "chrt", "-f", "10", str(LOAD), str(port), str(seconds), str(CONNECTIONS)], capture_output=True, text=True
    )
    if load.returncode != 0:
        raise RuntimeError(f"the load failed: {load.stderr.strip()}")
    return float(load.stdout.strip() or 0)


def _round(flags: list[str] | None, server: int, port: int, workdir: Path) -> tuple[float, float, float, float, float]:
    """(requests/s, jitprof's CPU as a share of a core, the server's switches/s,
    the server's CPU µs per request, requests/s in the first load) over the
    load that follows a first one (jitprof's start: the server's code named)."""
    jitprof = None
    if flags and Path(flags[0]).name == "perf":
        jitprof = _perf_attached([*_pinned(1), *flags, "-p", str(server)], workdir)
    elif flags is not None:
        jitprof = _attached(
            [*_pinned(1), *JITPROF, "--no-tui", *flags, "--pid", str(server), "-d", str(LOAD_SECONDS + 30), "-o", "out.pb.gz"],
            workdir,
        )
    first_rate = _load(port, FIRST_LOAD_SECONDS)
    switches_before = _voluntary_switches(server)
    cpu_before = _cpu_seconds(_tree(jitprof.pid)) if jitprof else 0.0
    server_before = _run_seconds(server)
    started = time.monotonic()
    rate = _load(port, LOAD_SECONDS)
    elapsed = time.monotonic() - started
    share = (_cpu_seconds(_tree(jitprof.pid)) - cpu_before) / elapsed if jitprof else 0.0
    switches = (_voluntary_switches(server) - switches_before) / elapsed
    server_cpu = _run_seconds(server) - server_before
    if jitprof is not None:
        jitprof.send_signal(2)
        jitprof.wait(timeout=120)
    return rate, share, switches, 1e6 * server_cpu / max(rate * elapsed, 1.0), first_rate


def _perf_attached(command: list[str], workdir: Path, deadline_s: float = 30.0) -> subprocess.Popen:
    """perf record attached in the background, returned once its file has
    its header (its events are open by then)."""
    output = workdir / "perf.data"
    output.unlink(missing_ok=True)
    perf = subprocess.Popen(
        [*command, "-q", "-o", str(output)], cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    end = time.monotonic() + deadline_s
    while not (output.exists() and output.stat().st_size > 0):
        if perf.poll() is not None or time.monotonic() > end:
            perf.kill()
            raise RuntimeError("perf record did not start")
        time.sleep(0.02)
    return perf


def _server_throughput(repeats: int, workdir: Path, perf: str | None) -> list[str]:
    setups = dict(SETUPS)
    if perf:
        setups[PERF_SETUP] = [perf, "record", "-F", "99", "-g"]
    server = subprocess.Popen([*_pinned(0), str(NODE), str(SERVER)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        _load(port, 2)  # warm up V8
        results: dict[str, list[tuple[float, float, float, float, float]]] = {name: [] for name in setups}
        # Each setup is measured right after the server alone, in the same
        # round: this machine's speed drifts by tens of per cent over minutes.
        alone_before: dict[str, list[tuple[float, float, float, float, float]]] = {name: [] for name in setups}
        attached = [name for name, flags in setups.items() if flags is not None]
        for round_index in range(repeats):
            for name in attached if round_index % 2 == 0 else attached[::-1]:
                alone = _round(None, server.pid, port, workdir)
                results["server alone"].append(alone)
                alone_before[name].append(alone)
                results[name].append(_round(setups[name], server.pid, port, workdir))
        (workdir / "perf.data").unlink(missing_ok=True)
    finally:
        server.terminate()
        server.wait()

    def paired(name: str, column: int, inverse: bool = False) -> float:
        """The median over rounds of the setup's ratio to the server alone just before it."""
        if name == "server alone":
            return 1.0
        ratios = [
            (alone[column] / round_[column] if inverse else round_[column] / alone[column])
            for round_, alone in zip(results[name], alone_before[name])
            if round_[column] and alone[column]
        ]
        return statistics.median(ratios) if ratios else 0.0

    lines = [
        "### A node HTTP server under load",
        "",
        f"`node benchmarks/http_server.js` on 127.0.0.1 (pinned to CPU 0; each request about 60 µs of JavaScript), "
        f"loaded by `fixtures/build/http_load` (C; {CONNECTIONS} keep-alive connections, each sending its next request "
        f"when answered; CPU 1, a fraction of the server's CPU per request), jitprof attached with `--pid` for each round (on CPU 1, beside the load: its own CPU "
        f"is the column apart); medians of {repeats} interleaved rounds. Each round is a first load of "
        f"{FIRST_LOAD_SECONDS} s as jitprof starts (it names the server's code for the first time: *first "
        f"{FIRST_LOAD_SECONDS} s*), then the load measured, {LOAD_SECONDS} s. *Server CPU per request* is "
        "the server's own CPU time (its threads' run time as the scheduler counts it) over the requests it answered: what jitprof makes the server do "
        "(its BPF programs run in the server's context, its uprobes trap there), which sets how many requests a "
        "saturated server can answer (*capacity*); requests/s also moves with the load's CPU, which jitprof shares. "
        "In each round every setup is measured right after the server alone (a first load and the measured one); "
        "each *vs alone* is the median over rounds of the setup's ratio to the server alone just before it (this "
        "machine's speed drifts by tens of per cent over minutes); the other columns are medians.",
        "",
        f"| setup | requests/s | vs alone | server CPU per request (µs) | capacity vs alone | jitprof's CPU (share of a core) "
        f"| server's voluntary switches/s | first {FIRST_LOAD_SECONDS} s: requests/s | vs alone |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, rounds in results.items():
        rate = statistics.median(round_[0] for round_ in rounds)
        share = statistics.median(round_[1] for round_ in rounds)
        switches = statistics.median(round_[2] for round_ in rounds)
        cost = statistics.median(round_[3] for round_ in rounds)
        first = statistics.median(round_[4] for round_ in rounds)
        lines.append(
            f"| {name} | {rate:,.0f} | {100 * paired(name, 0):.1f} % | {cost:.1f} | {100 * paired(name, 3, inverse=True):.1f} % "
            f"| {100 * share:.1f} % | {switches:,.0f} | {first:,.0f} | {100 * paired(name, 4):.1f} % |"
        )
    lines += [
        "",
        f"Targets: ≥ {100 * PID_GOAL:.0f} % of the server's requests per second alone with `--pid`, "
        f"≥ {100 * OFF_CPU_GOAL:.0f} % with `--off-cpu`.",
        "",
    ]
    anchor = f"perf record -g: {100 * paired(PERF_SETUP, 0):.1f} %" if perf else ""
    for name, goal in (("jitprof --pid (CPU only)", PID_GOAL), ("jitprof --off-cpu --pid", OFF_CPU_GOAL)):
        goals.record(
            goals.ratio_row(
                f"a saturated node HTTP server's requests/s, `{name.removeprefix('jitprof ').removesuffix(' (CPU only)')}`",
                goal,
                paired(name, 0),
                "Cost of --off-cpu",
                anchor,
                at_least=True,
            )
        )
    return lines


def _switch_cost(repeats: int, workdir: Path) -> list[str]:
    program = FIXTURES / "switches"
    shares: dict[str, list[float]] = {"jitprof --pid (CPU only)": [], "jitprof --off-cpu --pid": []}
    rates: list[float] = []
    for round_index in range(repeats):
        for name in list(shares)[round_index % 2 :] + list(shares)[: round_index % 2]:
            target = subprocess.Popen(
                [str(program), str(SWITCH_RATE), str(SWITCH_SECONDS + 30)], stdout=subprocess.PIPE, text=True
            )
            try:
                assert target.stdout is not None and target.stdout.readline().strip() == "ready"
                flags = ["--off-cpu"] if "off-cpu" in name else []
                jitprof = _attached(
                    [*JITPROF, "--no-tui", *flags, "--pid", str(target.pid), "-d", str(SWITCH_SECONDS + 20), "-o", "out.pb.gz"],
                    workdir,
                )
                time.sleep(SETTLE_S)  # its start-up (the target's symbols, unwind tables) is not steady state
                switches, cpu, started = _voluntary_switches(target.pid), _cpu_seconds(_tree(jitprof.pid)), time.monotonic()
                time.sleep(SWITCH_SECONDS)  # a benchmark's window, not a test's wait
                elapsed = time.monotonic() - started
                shares[name].append((_cpu_seconds(_tree(jitprof.pid)) - cpu) / elapsed)
                rates.append((_voluntary_switches(target.pid) - switches) / elapsed)
                jitprof.send_signal(2)
                jitprof.wait(timeout=120)
            finally:
                target.kill()
                target.wait()
    lines = [
        "### jitprof's own CPU at 10,000 context switches a second",
        "",
        f"`fixtures/build/switches {SWITCH_RATE}`: two threads handing a byte over pipes, "
        f"{statistics.median(rates):,.0f} voluntary switches a second (median); jitprof attached, its CPU "
        f"(with its naming helper) over {SWITCH_SECONDS} s of steady state ({SETTLE_S:g} s after it began sampling), "
        f"medians of {repeats} interleaved rounds.",
        "",
        "| setup | jitprof's CPU (share of a core) |",
        "| --- | --- |",
    ]
    lines += [f"| {name} | {100 * statistics.median(values):.2f} % |" for name, values in shares.items()]
    lines += ["", "Target: ≤ 2 % of a core with `--off-cpu`.", ""]
    return lines


def off_cpu_cost(repeats: int, workdir: Path, perf: str | None = None) -> list[str]:
    return ["## Cost of --off-cpu", ""] + _server_throughput(repeats, workdir, perf) + _switch_cost(max(repeats // 2, 2), workdir)
