"""A long run with processes coming and going stays flat: each exited
process's JIT files are removed and its descriptors closed while the run
goes on, not at its end."""

import os
import subprocess
import sys
import time
from pathlib import Path

from e2e.conftest import jitprof_environment
from profiler.run.recording import RETIRE_AFTER_S

ROOT = Path(__file__).resolve().parent.parent


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_exited_processes_are_forgotten_during_the_run(symbol_cache, tmp_path):
    pids_file = tmp_path / "pids"
    work = "let s=0; for (let i=0;i<3e7;i++) s=(s*31+i)%1000003; require('fs').appendFileSync(process.argv[1], process.pid+'\\n')"
    loop = f'for i in $(seq 50); do node -e "{work}" {pids_file}; sleep 0.2; done'
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
        # Now as many processes are within their last RETIRE_AFTER_S as will
        # ever be: ten seconds and as many processes later, no more descriptors.
        steady = descriptors(run.pid)
        time.sleep(10)
        assert run.poll() is None
        later = descriptors(run.pid)
        assert later <= steady + 15, (steady, later)  # not several per process that came and went
    finally:
        _stderr = run.communicate(timeout=120)[1]
    assert run.returncode == 0, _stderr
    pids = [int(pid) for pid in pids_file.read_text().split()]
    assert len(pids) == 50
    assert not [pid for pid in pids if Path(f"/tmp/perf-{pid}.map").exists()]
    assert not list(tmp_path.glob("isolate-*-v8.log"))
