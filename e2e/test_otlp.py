"""--otlp into a real OpenTelemetry Collector (built by set-up from the Go
module proxy, profiles behind its feature gate) on 127.0.0.1. What the
Collector took is read back from its OTLP exporter by a receiver that
decodes with the official OTLP package: the names, inline chains as lines
of one location, the resource attributes a backend groups by.

Grafana Pyroscope cannot be built here: the Go module proxy this machine
reaches answers 403 for github.com/grafana/pyroscope (only its api module is
served), so its /ingest is tested against the receiver in tests/push."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.conftest import ROOT, jitprof_environment
from e2e.test_node import JS
from tests.push.otlp_reader import ProfileRecord, read
from tests.push.receiver import Receiver, free_port, running_receiver, wait_until

COLLECTOR = ROOT / ".tools" / "otelcol" / "otelcol-jitprof"
pytestmark = pytest.mark.skipif(not COLLECTOR.exists(), reason="the OpenTelemetry Collector is built by make setup")
OTLP_SENT = re.compile(r"--otlp to \S+: ([\d,]+) of ([\d,]+) requests sent")
PUSH_SENT = re.compile(r"--push to \S+: ([\d,]+) of ([\d,]+) profiles sent")
CHAIN = ["leaf main.js:7", "mid main.js:15", "top main.js:19"]  # leaf and mid inlined into top


class Collector:
    def __init__(self, port: int, log: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log = log


@pytest.fixture
def collected(tmp_path) -> Iterator[tuple[Collector, Receiver]]:
    """A Collector taking OTLP profiles over HTTP and passing them on, by
    its OTLP exporter, to a decoding receiver."""
    with running_receiver() as receiver:
        port = free_port()
        config = tmp_path / "collector.yaml"
        config.write_text(
            json.dumps(  # YAML is a superset of JSON
                {
                    "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{port}"}}}},
                    "exporters": {
                        "otlp_http": {
                            "endpoint": receiver.url,
                            "compression": "gzip",
                            "retry_on_failure": {"enabled": False},
                            "sending_queue": {"enabled": False},
                        },
                        "debug": {"verbosity": "basic"},
                    },
                    "service": {
                        "pipelines": {"profiles": {"receivers": ["otlp"], "exporters": ["otlp_http", "debug"]}},
                        "telemetry": {"metrics": {"level": "none"}},
                    },
                }
            )
        )
        log = tmp_path / "collector.log"
        with open(log, "wb") as output:
            process = subprocess.Popen(
                [str(COLLECTOR), "--config", str(config), "--feature-gates=+service.profilesSupport"],
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        try:
            assert wait_until(lambda: "Everything is ready" in log.read_text(errors="replace"), 30), log.read_text()
            yield Collector(port, log), receiver
        finally:
            process.terminate()
            process.wait(10)


def run_jitprof(symbol_cache, cwd: Path, *args: str) -> str:
    completed = subprocess.run(
        [sys.executable, "-m", "profiler", *args],
        cwd=cwd,
        env=jitprof_environment(symbol_cache),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stderr


def records(receiver: Receiver) -> list[ProfileRecord]:
    return [record for item in receiver.profiles() if item.otlp is not None for record in read(item.otlp)]


def app_dir(tmp_path: Path) -> Path:
    app = tmp_path / "srv" / "inline-demo"
    app.mkdir(parents=True)
    (app / "package.json").write_text(json.dumps({"name": "inline-demo", "version": "1.0.0"}))
    shutil.copy(JS / "inline_chain.js", app / "main.js")
    return app


def chain_share(profiles: list[ProfileRecord]) -> tuple[int, int]:
    """(samples, samples whose leaf location holds the chain as its lines)."""
    total = inlined = 0
    for profile in profiles:
        for sample in profile.samples:
            count = len(sample.timestamps_ns)
            total += count
            if not sample.stack:
                continue  # no user stack to walk (a thread exiting, its memory gone): rare, but a sample
            leaf = sample.stack[0]
            if [line.function for line in leaf.lines][:3] == CHAIN:
                inlined += count
                assert leaf.frame_type == "v8js" and leaf.lines[0].file.endswith("/srv/inline-demo/main.js")
                assert leaf.lines[0].start_line == 7 and leaf.lines[2].start_line == 19
    return total, inlined


def test_spawned_node_to_the_collector_and_pyroscope_ingest_together(collected, symbol_cache, tmp_path, fixtures_built):
    collector, receiver = collected
    app = app_dir(tmp_path)
    with running_receiver() as ingest:
        stderr = run_jitprof(
            symbol_cache,
            app,
            "-F",
            "199",
            "--otlp",
            collector.url,
            "--push",
            ingest.url,
            "--interval",
            "2",
            "--tag",
            "deployment.environment=e2e",
            "--spool-dir",
            str(tmp_path / "spool"),
            "--",
            "node",
            "main.js",
            "5",
        )
        pushed = PUSH_SENT.search(stderr)
        assert pushed is not None and pushed.group(1) == pushed.group(2), stderr
        assert {item.app for item in ingest.profiles()} == {"inline-demo"}
    sent = OTLP_SENT.search(stderr)
    assert sent is not None and sent.group(1) == sent.group(2) and int(sent.group(1)) >= 2, stderr
    assert wait_until(lambda: len(receiver.profiles()) >= int(sent.group(1)), 10), (stderr, collector.log.read_text())
    profiles = records(receiver)
    assert {profile.resource["service.name"] for profile in profiles} == {"inline-demo"}
    resource = profiles[0].resource
    assert resource["process.executable.name"] == "node" and resource["host.name"] == socket.gethostname()
    assert resource["deployment.environment"] == "e2e" and resource["process.runtime.name"] == "node"
    total, inlined = chain_share(profiles)
    assert total >= 199 * 3 and inlined >= 0.5 * total, (total, inlined)
    # each interval is its own profile, one after the other, with its samples inside it
    spans = sorted((profile.time_ns, profile.time_ns + profile.duration_ns) for profile in profiles)
    assert all(earlier[1] <= later[0] + 1_000_000 for earlier, later in zip(spans, spans[1:])), spans
    for profile in profiles:
        stamps = [stamp for sample in profile.samples for stamp in sample.timestamps_ns]
        assert min(stamps) >= profile.time_ns - 500_000_000 and max(stamps) <= profile.time_ns + profile.duration_ns + 500_000_000
    # native frames carry their file's build-id on their mapping
    mappings = {
        location.mapping: location.build_id for profile in profiles for sample in profile.samples for location in sample.stack
    }
    node_mapping = next(name for name in mappings if name.endswith("node"))
    assert re.fullmatch(r"[0-9a-f]{40}", mappings[node_mapping]), mappings
    assert '"sample records"' in collector.log.read_text()  # the Collector's own debug exporter counted them


def test_all_processes_to_the_collector(collected, symbol_cache, background, tmp_path, fixtures_built):
    collector, receiver = collected
    app = app_dir(tmp_path)
    node = background("sh", "-c", "sleep 1; exec node --perf-basic-prof --interpreted-frames-native-stack main.js 8", cwd=app)
    try:
        stderr = run_jitprof(
            symbol_cache,
            tmp_path,
            "--all",
            "-F",
            "199",
            "--otlp",
            collector.url,
            "--interval",
            "2",
            "-d",
            "7",
            "--spool-dir",
            str(tmp_path / "spool"),
        )
    finally:
        node.kill()
        node.wait()
        Path(f"/tmp/perf-{node.pid}.map").unlink(missing_ok=True)
    sent = OTLP_SENT.search(stderr)
    assert sent is not None and sent.group(1) == sent.group(2), stderr
    assert wait_until(lambda: len(receiver.profiles()) >= int(sent.group(1)), 10), stderr
    profiles = records(receiver)
    ours = [profile for profile in profiles if profile.resource.get("process.pid") == node.pid]
    assert ours and {profile.resource["service.name"] for profile in ours} == {"inline-demo"}
    total, inlined = chain_share(ours)
    assert total >= 199 * 2 and inlined >= 0.5 * total, (total, inlined)
    # the machine's other processes and the kernel's threads are there too, each its own resource
    names = {profile.resource["service.name"] for profile in profiles}
    assert len(names) >= 2, names
