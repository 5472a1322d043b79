"""Processes jitprof itself starts, as root: immune to where and how it was started.

A root process started from a directory another user can write (/tmp, a shared
checkout) must not import, source or run anything from there. So every helper
runs from /, with a fixed environment, by absolute path. (jitprof starts no
Python helpers: unwind tables compile in-process, in native/.)
"""

from __future__ import annotations

import os

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
