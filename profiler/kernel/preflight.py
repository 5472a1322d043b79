"""Checks made before anything is loaded, each failing with a fix."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from profiler.errors import JitprofError
from profiler.safety import processes

TRACEFS = Path("/sys/kernel/tracing")


def require_root() -> None:
    if os.geteuid() != 0:
        raise JitprofError(
            "jitprof needs root to load BPF programs and attach perf events",
            "run it with sudo: sudo jitprof ...",
        )


def kernel_headers_dir() -> Path:
    """Where BCC will look for kernel headers (BCC_KERNEL_SOURCE wins, as in BCC)."""
    override = os.environ.get("BCC_KERNEL_SOURCE")
    if override:
        return Path(override)
    return Path("/lib/modules") / os.uname().release / "build"


def require_kernel_headers() -> None:
    headers = kernel_headers_dir()
    if not (headers / "include" / "linux").is_dir() and not (headers / "include" / "generated").is_dir():
        raise JitprofError(
            f"kernel headers not found at {headers}",
            "run `make setup` (installs the nearest Debian linux-headers and links them)",
        )


def require_tracefs() -> None:
    """Tracepoints need tracefs; mount it if the system has not."""
    if (TRACEFS / "events").is_dir():
        return
    subprocess.run(
        [processes.system_command("mount"), "-t", "tracefs", "nodev", str(TRACEFS)],
        cwd=processes.TRUSTED_DIRECTORY,
        env=processes.trusted_environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    if not (TRACEFS / "events").is_dir():
        raise JitprofError(
            f"tracefs is not mounted at {TRACEFS} and could not be mounted",
            f"mount -t tracefs nodev {TRACEFS}",
        )


def import_bcc():  # type: ignore[no-untyped-def]
    try:
        import bcc  # noqa: PLC0415  (optional system module, imported late)
    except ImportError as error:
        raise JitprofError(
            "the BCC Python module is not importable",
            "run `make setup`, or `apt-get install python3-bpfcc` and use the project's .venv",
        ) from error
    return bcc


def check_all() -> None:
    require_root()
    require_kernel_headers()
    require_tracefs()
