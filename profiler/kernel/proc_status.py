"""What /proc says of a process: alive, its thread group, its parent, its
start, whether it is a kernel thread, its executable and container.
/proc/PID/stat is read here alone."""

from __future__ import annotations

import functools
import os
import re

MAX_COMMAND_LINE_BYTES = 64 << 10
MAX_CGROUP_BYTES = 16 << 10
# A container's id as runtimes name its cgroup: docker-ID.scope, /docker/ID,
# cri-containerd-ID.scope, crio-ID.scope, libpod-ID.scope.
_CONTAINER_ID = re.compile(r"(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$")

# Fields of /proc/PID/stat after "(comm)", which may itself hold spaces and ")".
STATE, PARENT, FLAGS, START_TIME = 0, 1, 6, 19


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name; None if it has gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[-1].split()
    except OSError:
        return None


def _stat_field(pid: int | str, index: int) -> int | None:
    fields = stat_fields(pid)
    try:
        return int(fields[index]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def status_field(pid: int, key: str) -> list[str] | None:
    """The words of one line of /proc/PID/status ("Uid:", "NStgid:", ...);
    None if the process has gone or has no such line."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith(key):
                    return line.split()[1:]
    except OSError:
        return None
    return None


def thread_group_id(pid: int) -> int | None:
    """The Tgid of a task id, or None if it has gone."""
    words = status_field(pid, "Tgid:")
    return int(words[0]) if words and words[0].isdigit() else None


def process_alive(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is not None and bool(fields) and fields[STATE] not in ("Z", "X")


PF_KTHREAD = 0x00200000


def descendants(pid: int) -> list[int]:
    """The processes below pid now, from every /proc/PID/stat's parent."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        parent = _stat_field(name, PARENT)
        if parent is not None:
            children.setdefault(parent, []).append(int(name))
    found, frontier = [], [pid]
    while frontier:
        below = children.get(frontier.pop(), [])
        found += below
        frontier += below
    return found


def parent_of(pid: int) -> int | None:
    return _stat_field(pid, PARENT)


def start_time(pid: int) -> int | None:
    """When the process started (clock ticks since boot): with the pid, it
    names one process, never a later one that reused the pid."""
    return _stat_field(pid, START_TIME)


def started_at(pid: int) -> float | None:
    """When the process started, in seconds since the epoch, to within a
    second (the boot time /proc/stat gives is whole seconds)."""
    ticks = start_time(pid)
    booted = _boot_time()
    if ticks is None or booted is None:
        return None
    return booted + ticks / os.sysconf("SC_CLK_TCK")


@functools.cache  # it does not change while the machine runs
def _boot_time() -> int | None:
    try:
        with open("/proc/stat", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("btime "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def is_kernel_thread(pid: int) -> bool:
    """A kernel thread (kthreadd, workers): the PF_KTHREAD flag of /proc/PID/stat."""
    flags = _stat_field(pid, FLAGS)
    return flags is not None and bool(flags & PF_KTHREAD)


def namespace_pid(pid: int) -> int:
    """The pid as the process itself sees it (innermost pid namespace)."""
    words = status_field(pid, "NStgid:")
    return int(words[-1]) if words and words[-1].isdigit() else pid


def process_uid(pid: int, default: int | None = None) -> int | None:
    """The effective uid of a live process; `default` when it is gone."""
    words = status_field(pid, "Uid:")
    return int(words[1]) if words and len(words) > 1 and words[1].isdigit() else default


def caught_signals(pid: int) -> int:
    """The mask of signals the process has a handler for (0 if gone)."""
    words = status_field(pid, "SigCgt:")
    try:
        return int(words[0], 16) if words else 0
    except ValueError:
        return 0


def command_line_and_environment(pid: int) -> tuple[list[bytes], list[bytes]]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            arguments = handle.read().split(b"\0")
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environment = handle.read().split(b"\0")
    except OSError:
        return [], []
    return arguments, environment


def command_line(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as stream:
            raw = stream.read(MAX_COMMAND_LINE_BYTES)
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def comm_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", "rb") as stream:
            return stream.read(64).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def executable_name(pid: int) -> str:
    """The base name of what the process runs (its /proc/PID/exe link, not followed)."""
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")).removesuffix(" (deleted)")
    except OSError:
        return ""


def container_id(pid: int) -> str:
    """The id of the container the process runs in (from its cgroup path); "" for none."""
    try:
        with open(f"/proc/{pid}/cgroup", "rb") as stream:
            text = stream.read(MAX_CGROUP_BYTES).decode("ascii", "replace")
    except OSError:
        return ""
    for line in text.splitlines():
        found = _CONTAINER_ID.search(line.rpartition(":")[2].rstrip("/").rpartition("/")[2])
        if found:
            return found.group(1)
    return ""
