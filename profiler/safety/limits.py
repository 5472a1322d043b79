"""Resource limits: jitprof's own raised to what a run needs, the spawned
command's left as the user set them (the observer must not change what it
observes).

A run holds a perf event per CPU, its BPF maps, every mapped file of the
processes it follows and their perf maps and logs: a soft limit of 64 or
1,024 descriptors can run out, and an address-space limit (`ulimit -v`)
below what BCC's compiler libraries map makes loading them fail.
"""

from __future__ import annotations

import ctypes
import resource

WANTED_OPEN_FILES = 65536
# (resource, its limits when jitprof started), restored in the spawned command.
_original: dict[int, tuple[int, int]] = {}


def load_thread_exit_library() -> None:
    """glibc loads libgcc_s when a thread first exits (to unwind it): with
    every descriptor in use (a low `ulimit -n`) that load fails and the
    process aborts instead of saying the limit. Loaded now, while it can be."""
    try:
        ctypes.CDLL("libgcc_s.so.1")
    except OSError:
        pass  # a static build has none to load


def raise_own_limits() -> None:
    """Open files up to WANTED_OPEN_FILES and the address space unlimited: as
    root the hard limits are raised too; otherwise the soft ones up to them."""
    infinity = resource.RLIM_INFINITY
    for kind, wanted in ((resource.RLIMIT_NOFILE, WANTED_OPEN_FILES), (resource.RLIMIT_AS, infinity)):
        soft, hard = resource.getrlimit(kind)
        _original.setdefault(kind, (soft, hard))
        if _at_least(soft, wanted, infinity):
            continue
        try:
            resource.setrlimit(kind, (wanted, wanted if not _at_least(hard, wanted, infinity) else hard))
        except (OSError, ValueError):  # not allowed to raise the hard limit: as far as it goes
            try:
                resource.setrlimit(kind, (hard, hard))
            except (OSError, ValueError):
                pass


def _at_least(limit: int, wanted: int, infinity: int) -> bool:
    return limit == infinity or (wanted != infinity and limit >= wanted)


def restore_for_command() -> None:
    """(In the forked child, before exec.) The limits the user started jitprof with."""
    for kind, limits in _original.items():
        try:
            resource.setrlimit(kind, limits)
        except (OSError, ValueError):
            pass


def describe_limits() -> str:
    """The limits a failure may come from, for its hint."""
    parts = []
    files_soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if files_soft != resource.RLIM_INFINITY and files_soft < 4096:
        parts.append(f"open files limited to {files_soft} (ulimit -n)")
    address_soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if address_soft != resource.RLIM_INFINITY:
        parts.append(f"address space limited to {address_soft >> 20} MiB (ulimit -v)")
    return "; ".join(parts)
