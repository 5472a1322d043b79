"""Processes jitprof itself starts, as root: immune to where and how it was started.

A root process started from a directory another user can write (/tmp, a shared
checkout) must not import, source or run anything from there. So every helper
runs from /, with a fixed environment, by absolute path. (jitprof starts no
Python helpers: unwind tables compile in-process, in native/.)
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

TRUSTED_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
TRUSTED_DIRECTORY = "/"


def trusted_environment() -> dict[str, str]:
    """The whole environment of a helper: nothing inherited from the caller."""
    return {"PATH": TRUSTED_PATH, "LC_ALL": "C.UTF-8"}


def system_command(name: str) -> str:
    """The absolute path of a system tool, looked up in TRUSTED_PATH only."""
    for directory in TRUSTED_PATH.split(":"):
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK) and os.path.isfile(candidate):
            return candidate
    return os.path.join(TRUSTED_PATH.split(":")[1], name)


def absolute_path_entries(path: str) -> str:
    """PATH without relative entries ("", ".", "bin"), which would resolve in
    the working directory: sudo and login shells drop them for root too."""
    return os.pathsep.join(entry for entry in path.split(os.pathsep) if entry.startswith("/"))


@dataclass(frozen=True)
class BoundedRun:
    """How a helper that runs another user's program ended: its exit code
    (None: killed for overrunning), its output, and why it was cut short."""

    returncode: int | None
    output: bytes
    overrun: str = ""


# What a helper running as another user may use: its heap (bun reserves far
# more address space than it uses, so the heap, not the address space, is
# capped), its CPU, no file growth (it writes nothing) and no core dump.
HELPER_DATA_BYTES = 1 << 30  # bun transpiling TypeScript's compiler: 120 MB
HELPER_OPEN_FILES = 256


def run_as_user(
    command: list[str],
    uid: int,
    gid: int,
    max_output: int,
    deadline_s: float,
    running: Callable[[int | None], None] | None = None,
) -> BoundedRun:
    """Run one of jitprof's own programs as a user (what it reads, that user
    could read), confined: a session of its own (no controlling terminal, so
    nothing it does reaches the terminal jitprof runs in, and no process
    group of that terminal can be joined), no descriptor but /dev/null and
    its output pipe, no supplementary groups, no capabilities, no new
    privileges, killed if jitprof dies, and limits on its heap, CPU, file
    size and core dumps; from /, with the trusted environment, no input. Its
    standard output is read up to max_output bytes within deadline_s; past
    either it is killed with all it started in its session's process group.
    running is told that group while it runs (None once it is reaped), for a
    caller that may have to stop it sooner. command[0] must be a program
    jitprof trusts: a target's program is never run."""
    cpu_seconds = max(1, int(deadline_s) + 1)
    # As root: the user's ids and no capability left; otherwise the caller's own ids already.
    identity = [f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]
    confined = [
        system_command("setpriv"), *(identity if os.geteuid() == 0 else []), "--no-new-privs", "--pdeathsig=KILL", "--",
        system_command("prlimit"), f"--data={HELPER_DATA_BYTES}", f"--cpu={cpu_seconds}", "--fsize=0", "--core=0",
        f"--nofile={HELPER_OPEN_FILES}", "--",
        *command,
    ]  # fmt: skip
    process = subprocess.Popen(
        confined, cwd=TRUSTED_DIRECTORY, env={**trusted_environment(), "HOME": "/nonexistent", "NO_COLOR": "1"},
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    assert process.stdout is not None
    if running is not None:
        running(process.pid)
    try:
        return _bounded(process, max_output, deadline_s)
    finally:
        if running is not None:
            running(None)


def _bounded(process: subprocess.Popen, max_output: int, deadline_s: float) -> BoundedRun:
    assert process.stdout is not None
    chunks, size, overrun = [], 0, ""
    deadline = time.monotonic() + deadline_s
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                overrun = f"it ran over {deadline_s:g} s"
                break
            if not selector.select(left):
                continue
            chunk = os.read(process.stdout.fileno(), 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > max_output:
                overrun = f"it wrote over {max_output >> 20} MiB"
                break
            chunks.append(chunk)
    if overrun:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    process.stdout.close()
    try:
        code = process.wait(timeout=max(deadline - time.monotonic(), 1.0))
    except subprocess.TimeoutExpired:  # closed its output, went on running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        overrun = overrun or f"it ran over {deadline_s:g} s"
    return BoundedRun(None if overrun else code, b"".join(chunks), overrun)
