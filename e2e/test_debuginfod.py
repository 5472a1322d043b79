"""Symbols of a stripped binary from a real debuginfod server on 127.0.0.1
(Debian's debuginfod, serving the debug file of a binary the test strips)."""

import os
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from e2e.conftest import FoldedLine, children_cpu_seconds, read_folded, total

pytestmark = pytest.mark.skipif(shutil.which("debuginfod") is None, reason="debuginfod is installed by make setup")


def read_folded_text(text: str) -> list[FoldedLine]:
    lines = []
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        lines.append(FoldedLine(stack.split(";"), int(count)))
    return lines


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def stripped_and_served(tmp_path, fixtures_built):
    served = tmp_path / "served"
    served.mkdir()
    binary = tmp_path / "chain-stripped"
    subprocess.run(["objcopy", "--only-keep-debug", str(fixtures_built / "chain"), str(served / "chain.debug")], check=True)
    shutil.copy(fixtures_built / "chain", binary)
    subprocess.run(["strip", "--strip-all", str(binary)], check=True)
    build_id = (
        subprocess.run(["readelf", "-n", str(binary)], capture_output=True, text=True, check=True)
        .stdout.split("Build ID: ")[1]
        .split()[0]
    )
    port = free_port()
    server = subprocess.Popen(
        ["debuginfod", "-p", str(port), "-F", str(served), "-d", str(tmp_path / "index.sqlite"), "-t", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:  # until it has indexed the directory
        try:
            with urllib.request.urlopen(f"{url}/buildid/{build_id}/debuginfo", timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "debuginfod did not start"
        time.sleep(0.2)
    yield binary, url
    server.terminate()
    server.wait(timeout=10)


def test_stripped_functions_are_named_from_debuginfod(jitprof, stripped_and_served, tmp_path):
    binary, url = stripped_and_served
    cache = tmp_path / "cache"
    run = jitprof("-o", "out.folded", "--", str(binary), "1", env={"DEBUGINFOD_URLS": url, "JITPROF_CACHE_DIR": str(cache)})
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    named = sum(line.count for line in lines if line.frames[-4:] == ["main", "a", "b", "c"])
    assert named >= 0.95 * total(lines), lines
    assert list((cache / "debuginfod").glob("*.debug"))  # kept: the next run asks no server
    # Turned off: the same functions, apart but unnamed...
    other = {"DEBUGINFOD_URLS": url, "JITPROF_CACHE_DIR": str(tmp_path / "other-cache")}
    run = jitprof("--no-debuginfod", "-o", "off.folded", "-o", "off.jitprof", "--", str(binary), "1", env=other)
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "off.folded")
    assert not any("main" in line.frames for line in lines)
    leaves = {line.frames[-1] for line in lines if line.count >= 10}
    assert all(leaf.startswith("chain-stripped+0x") for leaf in leaves), leaves
    # ...until `report` finds the debug file, after the run.
    assert "chain-stripped+0x" in jitprof("report", "--no-debuginfod", "off.jitprof", env=other).stdout
    named = read_folded_text(jitprof("report", "off.jitprof", env=other).stdout)
    assert sum(line.count for line in named if line.frames[-4:] == ["main", "a", "b", "c"]) >= 0.95 * total(named)


def test_a_server_that_does_not_answer_costs_a_bounded_wait(jitprof, fixtures_built, tmp_path):
    binary = tmp_path / "chain-stripped"
    shutil.copy(fixtures_built / "chain", binary)
    subprocess.run(["strip", "--strip-all", str(binary)], check=True)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections, never answers
    try:
        started = time.monotonic()
        run = jitprof(
            "-o",
            "out.folded",
            "--",
            "sh",
            "-c",
            f"{binary} 1; times",  # the program's CPU time, on the last line
            env={"DEBUGINFOD_URLS": f"http://127.0.0.1:{silent.getsockname()[1]}", "JITPROF_CACHE_DIR": str(tmp_path / "cache")},
        )
        assert run.returncode == 0, run.stderr
        assert time.monotonic() - started < 25
        # Its samples still reach the profile: at 99 Hz, most of its CPU time.
        cpu_s = children_cpu_seconds(run.stdout)
        samples = total(read_folded(tmp_path / "out.folded"))
        assert samples >= 0.7 * 99 * cpu_s, (run.stdout, samples)
    finally:
        silent.close()
    assert os.path.exists(tmp_path / "cache" / "debuginfod")  # "not found" is remembered
