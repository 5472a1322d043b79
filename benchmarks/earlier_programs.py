"""jitprof as it was the day the labels' and async callers' cost targets
were set ("BPF time per sample within 10 % / 15 % of today's"): commit
f39ef57 (2026-11-26), before either reader. Its tree is checked out from
this repository's history for the length of a benchmark, its native
library built and blazesym's copied (the same Cargo.lock), and it is
attached beside today's, so that its kernel programs are timed over the
same stretch of the same server."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.harness import ROOT
from benchmarks.kernel_cost import sampler_time

TARGETS_SET = "f39ef57"
LABEL = f"jitprof of 2026-11-26 ({TARGETS_SET}, before both readers)"


@contextmanager
def earlier_jitprof(workdir: Path) -> Iterator[list[str] | None]:
    """The command line of the earlier jitprof, or None where this clone has
    no history to check it out from (a shallow clone)."""
    tree = workdir / f"jitprof-{TARGETS_SET}"
    added = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), TARGETS_SET], capture_output=True, text=True
    )
    if added.returncode != 0:
        yield None
        return
    try:
        built = subprocess.run(["make", "-s", "-C", str(tree / "native"), "build/libjitprof_native.so"], capture_output=True)
        for name in ("libjitprof_blazesym.so", "blazesym.h"):
            shutil.copy2(ROOT / "native" / "build" / name, tree / "native" / "build" / name)
        yield ["env", f"PYTHONPATH={tree}", sys.executable, "-m", "profiler"] if built.returncode == 0 else None
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)


def attached_earlier(command: list[str], workdir: Path, deadline_s: float = 180.0) -> subprocess.Popen:
    """The earlier jitprof attached in the background, returned once its
    sampler runs (it says nothing when it starts; its first run compiles its
    programs)."""
    jitprof = subprocess.Popen(command, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if jitprof.poll() is not None:
            raise RuntimeError("the earlier jitprof ended before sampling")
        try:
            if sampler_time(jitprof.pid)[1] > 0:
                return jitprof
        except OSError:
            pass
        time.sleep(0.05)
    jitprof.kill()
    raise RuntimeError("the earlier jitprof did not start sampling")
