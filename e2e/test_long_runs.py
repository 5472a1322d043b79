"""A long run with processes coming and going stays flat: each exited
process's JIT files are removed and its descriptors closed while the run
goes on, not at its end."""

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from e2e.conftest import jitprof_environment
from profiler.run.recording import RETIRE_AFTER_S

ROOT = Path(__file__).resolve().parent.parent


PROCESS_NAMED = re.compile(r"^/proc/(\d+)/|^/tmp/perf-(\d+)\.map$|-(\d+)-v8\.log$")


@dataclass
class Descriptors:
    held: set[int]  # the processes whose memory, perf map or code log are open
    directories: int  # a process's perf map and code log directories, held beside them
    others: int


def descriptors(pid: int) -> Descriptors:
    census = Descriptors(set(), 0, 0)
    for descriptor in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{descriptor}")
        except OSError:
            continue  # closed meanwhile
        named = PROCESS_NAMED.search(target)
        if named:
            census.held.add(int(next(group for group in named.groups() if group)))
        elif target.startswith("/") and os.path.isdir(target):
            census.directories += 1
        else:
            census.others += 1
    return census


def test_exited_processes_are_forgotten_during_the_run(symbol_cache, tmp_path):
    pids_file = tmp_path / "pids"
    work = "let s=0; for (let i=0;i<3e7;i++) s=(s*31+i)%1000003; require('fs').appendFileSync(process.argv[1], process.pid+'\\n')"
    # Processes come and go until the test has seen what it looks for (on a
    # slow CPU 50 of them ended before the last ones exited had been retired).
    stop = tmp_path / "stop"
    loop = f'i=0; while [ ! -e {stop} ] && [ $i -lt 400 ]; do node -e "{work}" {pids_file}; sleep 0.2; i=$((i+1)); done'
    environment = jitprof_environment(symbol_cache)
    run = subprocess.Popen(
        [sys.executable, "-m", "profiler", "--no-tui", "-o", "out.folded", "--", "sh", "-c", loop],
        cwd=tmp_path,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + RETIRE_AFTER_S + 15
        first = None
        while time.monotonic() < deadline:
            time.sleep(0.5)
            pids = pids_file.read_text().split() if pids_file.exists() else []
            if pids:
                first = int(pids[0])
            if (
                first is not None
                and not Path(f"/tmp/perf-{first}.map").exists()
                and not list(tmp_path.glob(f"isolate-*-{first}-v8.log"))
            ):
                break
        assert run.poll() is None, "the run ended before the test could look"
        assert first is not None
        # The first process's perf map and code log went while the run goes on.
        assert not Path(f"/tmp/perf-{first}.map").exists()
        assert not list(tmp_path.glob(f"isolate-*-{first}-v8.log"))
        # Every process that had exited by now is forgotten while the run
        # goes on: no descriptor names it any more, no directory is held
        # for it, and the others did not grow with the processes that came
        # and went meanwhile.
        exited = {int(pid) for pid in pids_file.read_text().split()}
        steady = descriptors(run.pid)
        deadline = time.monotonic() + RETIRE_AFTER_S + 60
        later = steady
        while later.held & exited and time.monotonic() < deadline:
            time.sleep(0.5)
            if run.poll() is not None:
                break  # later: the run's last census
            later = descriptors(run.pid)
        assert not later.held & exited, f"exited processes still held at the run's end: {sorted(later.held & exited)}"
        assert later.directories <= 2 * (len(later.held) + 1), later
        came_and_went = len(pids_file.read_text().split()) - len(exited)
        assert later.others - steady.others < came_and_went, (steady, later, came_and_went)
    finally:
        stop.touch()
        _stderr = run.communicate(timeout=120)[1]
    assert run.returncode == 0, _stderr
    pids = [int(pid) for pid in pids_file.read_text().split()]
    assert len(pids) > len(exited)
    assert not [pid for pid in pids if Path(f"/tmp/perf-{pid}.map").exists()]
    assert not list(tmp_path.glob("isolate-*-v8.log"))
