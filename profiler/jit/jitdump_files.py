"""Where jitdump files are: found through the maps of the process that
writes one (writers map their dump so that profilers see it), named
jit-PID.dump or jit-TID-PID.dump, and removed when jitprof caused them."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from pathlib import Path

from profiler.kernel.procmaps import MapEntry, read_maps
from profiler.safety import files

# perf's convention, jit-PID.dump; JavaScriptCore's, jit-TID-PID.dump (the
# thread that writes it, then the process).
_DUMP_FILE = re.compile(r"^jit-(?:\d+-)?(\d+)\.dump$")


def dump_file_pid(name: str) -> int | None:
    """The process a jitdump's file name says wrote it (None: not a dump's name)."""
    matched = _DUMP_FILE.match(name)
    return int(matched.group(1)) if matched else None


# Where runtimes jitprof spawns are told to write their dumps (Bun's
# JavaScriptCore): a directory of the user's own under root's, kept between
# runs (a process that outlives a run may start the runtime again, and bun
# aborts when its directory is gone). Not /tmp, where any user can plant a
# link at the name a runtime running as root is about to write. In memory
# where the machine has it: JavaScriptCore syncs its dump as it writes, which
# cost prettier and tsc under bun 36-39 % of their wall on a disk, nothing on
# a tmpfs.
DUMP_ROOTS_IN_MEMORY = ("/run/jitprof/jitdumps", "/dev/shm/jitprof/jitdumps")
DUMP_ROOT_ON_DISK = "/var/lib/jitprof/jitdumps"
MAX_MOUNTINFO_BYTES = 4 << 20


@functools.cache
def spawned_dump_root() -> str:
    """The first of the in-memory roots on a tmpfs that can be root's alone
    (made if missing: in /dev/shm another user may have taken the name),
    else the one on disk."""
    mounts = _filesystem_types()
    for root in DUMP_ROOTS_IN_MEMORY:
        if _filesystem_of(root, mounts) == "tmpfs" and _root_directories(root):
            return root
    return DUMP_ROOT_ON_DISK


def _root_directories(root: str) -> bool:
    """Are root and its parent (made if missing) root's alone?"""
    try:
        os.close(_open_dump_root(root))
    except (OSError, files.UnsafePath):
        return False
    return True


def _open_dump_root(root: str) -> int:
    """A descriptor of root, it and its parent made if missing and checked
    root's alone (files.UnsafePath, OSError otherwise)."""
    os.close(files.open_root_directory(Path(root).parent, 0o755))  # /run/jitprof, say
    return files.open_root_directory(Path(root), 0o755)


def _filesystem_types() -> dict[str, str]:
    """Mount point -> filesystem type, from this process's mount table."""
    try:
        with open("/proc/self/mountinfo", "rb") as handle:
            text = handle.read(MAX_MOUNTINFO_BYTES).decode("utf-8", "replace")
    except OSError:
        return {}
    mounts = {}
    for line in text.splitlines():
        fields, _separator, rest = line.partition(" - ")
        words = fields.split()
        if len(words) >= 5 and rest:
            mounts[words[4].replace("\\040", " ")] = rest.split()[0]
    return mounts


def _filesystem_of(path: str, mounts: dict[str, str]) -> str:
    """The type of the filesystem path would be on: its deepest mount point's."""
    best = ""
    for point in mounts:
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best = point
    return mounts.get(best, "")


def spawned_dump_directory(uid: int) -> str:
    return f"{spawned_dump_root()}/{uid}"


def make_spawned_dump_directory(uid: int, gid: int) -> str | None:
    """The user's dump directory, made if missing: None when it cannot be
    (a read-only /var: the runtime is then not asked for a dump)."""
    try:
        root = _open_dump_root(spawned_dump_root())
    except (OSError, files.UnsafePath):
        return None
    try:
        os.close(files.private_directory(root, str(uid), uid, gid))
    except files.UnsafeDirectory:
        return None
    finally:
        os.close(root)
    return spawned_dump_directory(uid)


def mapped_dumps(pid: int, entries: Iterable[MapEntry] | None = None) -> list[str]:
    """/proc/PID/map_files entries of the jit-*.dump files the process maps
    (among entries, its mappings just read; else read now)."""
    read = read_maps(pid) if entries is None else entries
    return [f"/proc/{pid}/map_files/{entry.start:x}-{entry.end:x}" for entry in read if entry.is_jitdump_marker]


def maps_a_jitdump(pid: int) -> bool:
    """Does the live process write a jitdump (it maps one, as writers do)?"""
    return bool(mapped_dumps(pid))


def remove_jitdumps(pids: Iterable[int], owner_uid: int, directory_path: str | None = None) -> list[str]:
    """Delete the dumps the given processes wrote into the directory spawned
    runtimes are told to use, if they are still regular files of owner_uid
    (the directory opened once and checked, each file removed relative to it)."""
    wanted = set(pids)
    if not wanted:
        return []
    try:
        directory = files.open_directory_for(directory_path or spawned_dump_directory(owner_uid), owner_uid)
    except files.UnsafeDirectory:
        return []
    try:
        removed = []
        for name in os.listdir(directory):
            if dump_file_pid(name) in wanted and files.remove_owned(directory, name, owner_uid):
                removed.append(name)
        return removed
    except OSError:
        return []
    finally:
        os.close(directory)
