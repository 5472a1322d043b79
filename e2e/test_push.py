"""--all and --push: every process on the machine, pushed every interval to
a Pyroscope-like receiver on 127.0.0.1, whose profiles are read back with an
independent pprof reader; the receiver down, failing, slow; SIGTERM; the
spool's bound; memory over a long run with processes coming and going."""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from e2e.conftest import FIXTURES, ROOT, jitprof_environment
from e2e.test_node import JS
from tests.push.receiver import Behaviour, reader_available, running_receiver

pytestmark = pytest.mark.skipif(not reader_available(), reason="node and pprof-format are installed by make setup")
SENT = re.compile(r"push to \S+: ([\d,]+) of ([\d,]+) profiles sent")


@pytest.fixture
def receiver():
    with running_receiver() as started:
        yield started


@pytest.fixture
def start_jitprof(symbol_cache, tmp_path, background):
    """jitprof in the background, as a service runs (stopped at the end)."""

    def start(*args: str) -> subprocess.Popen:
        return background(
            sys.executable,
            "-m",
            "profiler",
            *args,
            cwd=tmp_path,
            env=jitprof_environment(symbol_cache),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    return start


def finished(process: subprocess.Popen, timeout: float = 90) -> str:
    _, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, stderr
    return stderr


def test_all_push_names_js_inlined_and_native_frames(receiver, start_jitprof, background, tmp_path, fixtures_built):
    app = tmp_path / "srv" / "inline-demo"
    app.mkdir(parents=True)
    (app / "package.json").write_text(json.dumps({"name": "inline-demo", "version": "1.0.0"}))
    shutil.copy(JS / "inline_chain.js", app / "main.js")
    native = background(str(FIXTURES / "dwarf_cases"), "recursion", "12", "now")  # running before jitprof
    # Started after jitprof, as a new process on the machine.
    node = background(
        "sh",
        "-c",
        "sleep 2; exec node --perf-basic-prof --interpreted-frames-native-stack --log-code "
        f"--no-logfile-per-isolate --logfile={tmp_path}/v8.log main.js 10",
        cwd=app,
    )
    try:
        jitprof = start_jitprof(
            "--all",
            "-F",
            "199",
            "--push",
            receiver.url,
            "--interval",
            "2",
            "-d",
            "9",
            "--tag",
            "env=e2e",
            "--spool-dir",
            str(tmp_path / "spool"),
        )
        stderr = finished(jitprof)
    finally:
        for process in (native, node):
            process.kill()
            process.wait()
        Path(f"/tmp/perf-{node.pid}.map").unlink(missing_ok=True)
    sent = SENT.search(stderr)
    assert sent is not None and sent.group(1) == sent.group(2), stderr
    profiles = receiver.profiles()
    # Intervals follow one another, about 2 s each, the last cut short by -d.
    bounds = sorted({(int(item.query["from"]), int(item.query["until"])) for item in profiles})
    assert len(bounds) >= 4, bounds
    assert all(earlier[1] == later[0] for earlier, later in zip(bounds, bounds[1:])), bounds
    assert all(1 <= until - start <= 3 for start, until in bounds[:-1]), bounds
    hostname = socket.gethostname()
    demo = [item for item in profiles if item.app == "inline-demo"]
    assert demo, sorted({item.app for item in profiles})
    assert {item.labels["pid"] for item in demo} == {str(node.pid)}
    assert all(
        item.labels["runtime"] == "node" and item.labels["env"] == "e2e" and item.labels["hostname"] == hostname for item in demo
    )
    chain = ["leaf main.js:7", "mid main.js:15", "top main.js:19"]  # leaf and mid inlined into top: one location
    counts = {"all": 0, "inlined": 0}
    for item in demo:
        for sample in item.decoded()["samples"]:
            counts["all"] += sample["values"][0]
            leaf = sample["stack"][0]
            if [line["name"] for line in leaf][:3] == chain:
                counts["inlined"] += sample["values"][0]
                assert leaf[0]["file"].endswith("/srv/inline-demo/main.js")
    assert counts["inlined"] >= 0.5 * counts["all"], counts
    # (Other dwarf_cases processes on the machine are the same application: ours is told by its pid.)
    native_profiles = [item for item in profiles if item.app == "dwarf_cases" and item.labels["pid"] == str(native.pid)]
    assert native_profiles and all(item.labels["runtime"] == "native" for item in native_profiles)
    stacks = [
        [location[0]["name"] for location in sample["stack"]] for item in native_profiles for sample in item.decoded()["samples"]
    ]
    assert any(stack[0] == "burn" and "recurse" in stack and "main" in stack for stack in stacks), stacks[:3]


@pytest.mark.parametrize("fault", ["down", "500", "429", "slow"])
def test_store_faults_lose_nothing_and_do_not_slow_sampling(fault, receiver, start_jitprof, tmp_path, fixtures_built):
    if fault == "down":
        receiver.stop()
        threading.Timer(4.0, receiver.start).start()
    elif fault == "500":
        receiver.behaviour = Behaviour(fail_with=500, failures_left=3)
    elif fault == "429":
        receiver.behaviour = Behaviour(fail_with=429, retry_after="2", failures_left=1)
    else:
        receiver.behaviour = Behaviour(delay_s=12, failures_left=None)  # past the 10 s request timeout
        threading.Timer(3.0, lambda: setattr(receiver, "behaviour", Behaviour())).start()
    jitprof = start_jitprof(
        "-F",
        "199",
        "--push",
        receiver.url,
        "--interval",
        "1",
        "--spool-dir",
        str(tmp_path / "spool"),
        "--",
        str(FIXTURES / "dwarf_cases"),
        "recursion",
        "6",
        "now",
    )
    stderr = finished(jitprof, timeout=120)
    sent = SENT.search(stderr)
    assert sent is not None and sent.group(1) == sent.group(2) and int(sent.group(1).replace(",", "")) >= 5, stderr
    samples = int(re.search(r"jitprof: ([\d,]+) samples", stderr).group(1).replace(",", ""))
    assert samples >= 0.5 * 199 * 6, stderr  # sampling went on whatever the store did (the CPU is shared)
    assert ", 0 lost" in stderr
    delivered = receiver.profiles()
    assert sum(sum(s["values"][0] for s in item.decoded()["samples"]) for item in delivered) == samples
    if fault != "slow":
        assert "cannot send to" in stderr and "takes profiles again" in stderr
    if fault == "429":
        assert receiver.attempt_times[1] - receiver.attempt_times[0] >= 1.9
    assert not list((tmp_path / "spool").iterdir())


def test_spool_bound_then_the_next_run_sends_what_is_left(receiver, start_jitprof, tmp_path, fixtures_built):
    receiver.behaviour = Behaviour(fail_with=503)
    spool = tmp_path / "spool"
    jitprof = start_jitprof(
        "--push",
        receiver.url,
        "--interval",
        "1",
        "--spool-dir",
        str(spool),
        "--spool-max",
        "0.002",
        "--",
        str(FIXTURES / "dwarf_cases"),
        "recursion",
        "7",
        "now",
    )
    stderr = finished(jitprof)
    assert "the spool is full: dropped" in stderr and "dropped (spool full or over an hour old)" in stderr, stderr
    left = sorted(spool.iterdir())
    assert left and sum(path.stat().st_size for path in left) <= 0.002 * (1 << 20)
    receiver.behaviour = Behaviour()
    second = start_jitprof("--push", receiver.url, "--spool-dir", str(spool), "--", "true")
    stderr = finished(second)
    assert f"({len(left)} left by an earlier run are sent first)" in stderr
    assert len(receiver.profiles()) >= len(left) and not list(spool.iterdir())


def test_sigterm_sends_the_interval_under_way(receiver, start_jitprof, tmp_path, fixtures_built, background):
    native = background(str(FIXTURES / "dwarf_cases"), "recursion", "30", "now")
    jitprof = start_jitprof("--all", "--push", receiver.url, "--interval", "60", "--spool-dir", str(tmp_path / "spool"))
    time.sleep(4)
    jitprof.send_signal(signal.SIGTERM)
    started = time.monotonic()
    stderr = finished(jitprof, timeout=30)
    assert time.monotonic() - started < 10
    native.kill()
    native.wait()
    ours = [item for item in receiver.profiles() if item.labels.get("pid") == str(native.pid)]
    assert len(ours) == 1, stderr
    assert 2 <= int(ours[0].query["until"]) - int(ours[0].query["from"]) <= 6


def test_memory_stays_flat_with_processes_coming_and_going(receiver, start_jitprof, tmp_path, fixtures_built, background):
    churn = background(
        "sh", "-c", f"while :; do node {JS / 'workload.js'} 2 >/dev/null; {FIXTURES / 'dwarf_cases'} recursion 0.05 now; done"
    )
    jitprof = start_jitprof(
        "--all", "-F", "99", "--push", receiver.url, "--interval", "2", "-d", "150", "--spool-dir", str(tmp_path / "spool")
    )
    rss: dict[int, int] = {}
    started = time.monotonic()
    while jitprof.poll() is None:
        elapsed = int(time.monotonic() - started)
        try:
            text = Path(f"/proc/{jitprof.pid}/status").read_text()
            rss[elapsed] = int(re.search(r"VmRSS:\s+(\d+)", text).group(1)) // 1024
        except (OSError, AttributeError):
            pass
        time.sleep(5)
    stderr = finished(jitprof)
    churn.kill()
    churn.wait()
    settled = [value for second, value in rss.items() if 40 <= second <= 60]
    late = [value for second, value in rss.items() if second >= 130]
    assert settled and late, rss
    assert max(late) - max(settled) <= 12, rss  # MiB, over 80 s and ~200 processes
    sent = SENT.search(stderr)
    assert sent is not None and int(sent.group(1).replace(",", "")) >= 100, stderr
    counts = re.search(r"jitprof: ([\d,]+) samples .*?; ([\d,]+) stacks cut short", stderr)
    samples, cut = (int(text.replace(",", "")) for text in counts.groups())
    assert cut <= 0.1 * samples, stderr  # the stacks of processes coming and going are whole


def test_the_systemd_unit_runs_and_stops_as_systemd_would(receiver, symbol_cache, tmp_path, fixtures_built, background):
    """packaging/systemd/jitprof.service, checked by systemd-analyze, its
    ExecStart run with the example settings (the checkout in place of
    /opt/jitprof), stopped with its KillSignal within its TimeoutStopSec."""
    unit = (ROOT / "packaging" / "systemd" / "jitprof.service").read_text()
    settings = (ROOT / "packaging" / "systemd" / "jitprof.default").read_text()
    settings = re.sub(r"(?m)^JITPROF_PUSH_URL=.*$", f"JITPROF_PUSH_URL={receiver.url}", settings)
    settings = re.sub(r"(?m)^JITPROF_OPTIONS=(.*)$", rf"JITPROF_OPTIONS=\1 --interval 2 --spool-dir {tmp_path}/spool", settings)
    (tmp_path / "default").write_text(settings)
    local = unit.replace("/opt/jitprof", str(ROOT)).replace(
        "EnvironmentFile=/etc/default/jitprof", f"EnvironmentFile={tmp_path}/default"
    )
    (tmp_path / "jitprof.service").write_text(local)
    if shutil.which("systemd-analyze"):
        verified = subprocess.run(
            ["systemd-analyze", "verify", "--man=no", str(tmp_path / "jitprof.service")], capture_output=True, text=True
        )
        assert verified.returncode == 0 and not verified.stdout.strip() and not verified.stderr.strip(), verified.stderr
    variables = dict(re.findall(r"(?m)^([A-Z_]+)=(.*)$", settings))
    command = re.search(r"(?m)^ExecStart=(.*)$", local).group(1)
    argv = []
    for word in command.split():  # systemd: ${X} is one word, $X is split on white space
        if word.startswith("${"):
            argv.append(variables[word[2:-1]])
        elif word.startswith("$"):
            argv += variables[word[1:]].split()
        else:
            argv.append(word)
    kill_signal = getattr(signal, re.search(r"(?m)^KillSignal=(\w+)", local).group(1))
    stop_timeout = float(re.search(r"(?m)^TimeoutStopSec=(\d+)", local).group(1))
    native = background(str(FIXTURES / "dwarf_cases"), "recursion", "30", "now")
    service = subprocess.Popen(
        argv, env=jitprof_environment(symbol_cache), cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        time.sleep(6)
        service.send_signal(kill_signal)
        _, stderr = service.communicate(timeout=stop_timeout)
    finally:
        if service.poll() is None:
            service.kill()
            service.communicate()
        native.kill()
        native.wait()
    assert service.returncode == 0, stderr
    ours = [item for item in receiver.profiles() if item.labels.get("pid") == str(native.pid)]
    assert len(ours) >= 2 and all(item.labels["env"] == "production" for item in ours), stderr
    assert "pushing a profile per application every 2 s" in stderr and SENT.search(stderr) is not None
