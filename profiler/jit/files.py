"""Files the injected runtime flags make a program write, besides perf maps.

`--perf-basic-prof` makes V8 write `isolate-0x…-PID-v8.log` into the
process's working directory (the code log, when jitprof's preload turns it
on), and Node does not allow `--logfile` in NODE_OPTIONS to send it
elsewhere; Deno writes its own there too. jitprof notes the working
directory of each such process while it lives (a directory descriptor,
usable after it exits) and removes those logs at the end.
"""

from __future__ import annotations

import os
import re
import stat

from profiler.jit import runtimes
from profiler.safety import files

MAX_TRACKED_DIRECTORIES = 512


class JitFileJanitor:
    def __init__(self) -> None:
        self._directories: dict[int, int] = {}  # pid -> descriptor of its working directory

    def note_process(self, pid: int) -> None:
        if pid in self._directories or len(self._directories) >= MAX_TRACKED_DIRECTORIES:
            return
        runtime = runtimes.runtime_of(pid)
        if runtime is None or not runtime.writes_v8_logs:
            return
        try:
            self._directories[pid] = os.open(f"/proc/{pid}/cwd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return

    def _log_names(self, pid: int, directory: int) -> list[str]:
        pattern = re.compile(rf"^isolate-0x[0-9a-f]+-{pid}-v8\.log$")
        try:
            return [name for name in os.listdir(directory) if pattern.match(name)]
        except OSError:
            return []

    def open_v8_logs(self, pid: int) -> list[int]:
        """Descriptors of the process's V8 logs in its working directory
        (for a process that has gone; a live one is read through /proc)."""
        directory = self._directories.get(pid)
        if directory is None:
            return []
        opened = []
        for name in self._log_names(pid, directory):
            try:
                if not stat.S_ISREG(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode):
                    continue  # never open a device or FIFO as root
                opened.append(os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory))
            except OSError:
                continue
        return opened

    def remove_files(self, owner_uid: int) -> list[str]:
        """Delete the V8 logs the processes wrote; returns their names."""
        removed = []
        for pid, directory in self._directories.items():
            for name in self._log_names(pid, directory):
                if files.remove_owned(directory, name, owner_uid):
                    removed.append(name)
        return removed

    def forget(self, pid: int, owner_uid: int | None) -> None:
        """A process long gone: remove its logs (owner_uid given) and let its directory go."""
        directory = self._directories.pop(pid, None)
        if directory is None:
            return
        if owner_uid is not None:
            for name in self._log_names(pid, directory):
                files.remove_owned(directory, name, owner_uid)
        os.close(directory)

    def close(self) -> None:
        for directory in self._directories.values():
            try:
                os.close(directory)
            except OSError:
                pass
        self._directories.clear()
