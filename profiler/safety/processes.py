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


def run_as_user(
    command: list[str],
    uid: int,
    gid: int,
    max_output: int,
    deadline_s: float,
    running: Callable[[int | None], None] | None = None,
) -> BoundedRun:
    """Run a program as a user (from /, with the trusted environment, no
    input): its standard output up to max_output bytes, within deadline_s;
    killed, with all it started in its process group, past either. The
    program is the user's own: what it can do, that user could. running is
    told its process group while it runs (None once it is reaped), for a
    caller that may have to stop it sooner."""
    as_user: dict = {} if uid == os.geteuid() else {"user": uid, "group": gid, "extra_groups": []}
    process = subprocess.Popen(
        command, cwd=TRUSTED_DIRECTORY, env={**trusted_environment(), "HOME": "/nonexistent", "NO_COLOR": "1"},
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, process_group=0, **as_user,
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
