"""Samples labelled from the OpenTelemetry context a process publishes
(process context, OTEP 4719; thread context, OTEP 4947): a C program whose
SDK library (fixtures/libotel_context.c) does as the specifications say,
spawned and attached, on and off the CPU. Truth is the program's own record
of each request: its trace and span ids, route and the nanoseconds it ran
(the kernel's clock). A labelled sample must be a request's that was running
then; samples between requests carry none."""

from __future__ import annotations

import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.conftest import ROOT, read_folded
from e2e.test_off_cpu import read_pprof
from profiler.model.profile import Profile
from profiler.model.raw import read_raw

PROGRAM = ROOT / "fixtures" / "build" / "otel_context"
HANDLERS = {"checkout_work": "/checkout", "search_work": "/search"}


@dataclass(frozen=True)
class Request:
    span_id: str
    route: str
    tenant: str
    start_ns: int
    end_ns: int


def requests_of(output: str) -> dict[str, Request]:
    """The program's requests, by trace id."""
    found = {}
    for line in output.splitlines():
        if line.startswith("span "):
            _, trace_id, span_id, route, tenant, start, end = line.split()
            found[trace_id] = Request(span_id, route, tenant, int(start), int(end))
    return found


def where(profile: Profile, sample) -> str:  # noqa: ANN001
    names = [profile.frames[frame_id].name for frame_id in sample.frame_ids]
    return next((name for name in (*HANDLERS, "between_requests", "wait_for_io") if name in names), "")


def check_labels(profile: Profile, requests: dict[str, Request], pid: int) -> Counter:
    """Every label true; the counts of samples (and of labelled ones) per place and kind."""
    counts: Counter = Counter()
    wrong = []
    for sample in profile.samples:
        place = where(profile, sample)
        if sample.pid != pid or not place:
            continue
        kind = "off" if sample.off_cpu_ns else "cpu"
        labels = profile.labels_of(sample)
        counts[(place, kind)] += 1
        if labels:
            assert labels.get("service.name") == "otel-fixture", labels
        if "trace_id" not in labels:
            continue
        counts[(place, kind, "labelled")] += 1
        request = requests.get(labels["trace_id"])
        # A sample is taken within the request it is labelled with (its
        # interval from just before attach to just after detach).
        if (
            request is None
            or place == "between_requests"
            or labels["span_id"] != request.span_id
            or labels.get("http.route") != request.route
            or labels.get("tenant") != request.tenant
            or place in HANDLERS
            and HANDLERS[place] != request.route
            or not request.start_ns <= sample.time_ns <= request.end_ns
        ):
            wrong.append((place, kind, labels, request, sample.time_ns))
    assert wrong == [], wrong[:3]
    return counts


def labelled_share(counts: Counter, place: str, kind: str) -> float:
    return counts[(place, kind, "labelled")] / max(counts[(place, kind)], 1)


@pytest.fixture
def program() -> Path:
    if not PROGRAM.exists():
        pytest.skip("the C fixtures are not built")
    return PROGRAM


def test_a_spawned_program_s_samples_carry_its_requests_on_and_off_the_cpu(jitprof, tmp_path, program):
    run = jitprof("--no-tui", "--off-cpu", "-F", "499", "-o", "out.jitprof", "-o", "out.pb.gz", "--", str(program), "3", "2")
    assert run.returncode == 0, run.stderr
    assert "labelled with the OpenTelemetry context" in run.stderr, run.stderr
    profile = read_raw(tmp_path / "out.jitprof")
    pid = profile.info.pids[0]
    counts = check_labels(profile, requests_of(run.stdout), pid)
    # Only samples before jitprof first read the published context (the
    # program's first milliseconds) go without.
    for place in HANDLERS:
        assert counts[(place, "cpu")] >= 50 and labelled_share(counts, place, "cpu") >= 0.95, counts
    assert counts[("wait_for_io", "off")] >= 50 and labelled_share(counts, "wait_for_io", "off") >= 0.95, counts
    assert counts[("between_requests", "cpu")] >= 20 and counts[("between_requests", "cpu", "labelled")] == 0, counts
    # The pprof as a user's tools read it: the labels on its samples.
    routes = Counter()
    for sample in read_pprof(tmp_path / "out.pb.gz")["samples"]:
        names = [line["name"] for location in sample["stack"] for line in location]
        for handler, route in HANDLERS.items():
            if handler in names and "trace_id" in sample["labels"]:
                assert sample["labels"]["http.route"] == route and len(sample["labels"]["trace_id"]) == 32, sample["labels"]
                routes[route] += 1
    assert routes["/checkout"] and routes["/search"], routes


def test_an_attached_program_s_samples_carry_its_requests(jitprof, tmp_path, program, background):
    target = background(str(program), "6", "2", cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    assert target.stdout.readline().strip() == "ready"
    run = jitprof("--no-tui", "-F", "499", "--pid", str(target.pid), "-o", "out.jitprof")
    assert run.returncode == 0, run.stderr
    output = target.stdout.read()
    target.wait(timeout=30)
    profile = read_raw(tmp_path / "out.jitprof")
    counts = check_labels(profile, requests_of(output), target.pid)
    for place in HANDLERS:
        assert counts[(place, "cpu")] >= 50 and labelled_share(counts, place, "cpu") >= 0.95, counts
    assert counts[("between_requests", "cpu", "labelled")] == 0, counts


def test_grouped_by_route_the_flame_graph_splits_as_the_requests_ran(jitprof, tmp_path, program):
    """--group-by http.route: each route's share of the handlers' samples
    within 5 points of its share of the CPU time its requests' handlers
    took (the program's own record: each request's handler runs a fixed time)."""
    run = jitprof(
        "--no-tui", "-F", "499", "--group-by", "http.route", "-o", "out.folded", "-o", "out.jitprof", "--", str(program), "3", "2"
    )
    assert run.returncode == 0, run.stderr
    requests = requests_of(run.stdout)
    handler_ms = {"/checkout": 20, "/search": 10}
    truth = Counter()
    for request in requests.values():
        truth[request.route] += handler_ms[request.route]
    shown = Counter()
    for line in read_folded(tmp_path / "out.folded"):
        for route in handler_ms:
            if line.frames[1] == f"http.route={route}" and any(handler in line.frames for handler in HANDLERS):
                shown[route] += line.count
    assert set(shown) == set(handler_ms), shown
    for route in handler_ms:
        expected = truth[route] / sum(truth.values())
        got = shown[route] / sum(shown.values())
        assert abs(got - expected) <= 0.05, (route, got, expected)
    # report selects by label, from the saved profile.
    selected = jitprof("report", "out.jitprof", "--label", "http.route=/search")
    assert selected.returncode == 0, selected.stderr
    assert "search_work" in selected.stdout and "checkout_work" not in selected.stdout
