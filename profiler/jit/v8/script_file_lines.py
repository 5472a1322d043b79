"""Where a script's lines begin, read from its file, for a V8 code log
written without sources (Deno's, spawned: `--no-log-source-code`, because
the sources are half of the log and most of what logging costs the
program).

The file is the target's: it is opened inside the target's root with no
symbolic link on its path, under a size cap, and only if the target's own
user could read it. It may not hold what V8 ran (edited since, or a loader's
wrapper under the same URL), so its lines serve a function only while the
function's declared line and column, which V8 logged, agree with them
(code_map.Script, log_source).
"""

from __future__ import annotations

import array
import os
import re
from dataclasses import dataclass

from profiler.jit.v8.log_parser import newline_starts
from profiler.jit.v8.source_map_files import MAX_SCRIPT_BYTES, TargetUser, script_path
from profiler.kernel.proc_status import start_time
from profiler.safety.files import open_in_root_as

MAX_FILES_PER_PROCESS = 4096
MAX_BYTES_PER_PROCESS = 1 << 30
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")  # two UTF-16 units each in V8's offsets


def file_line_starts(data: bytes) -> array.array:
    """Line starts of a UTF-8 file in UTF-16 units, as V8 counts its offsets."""
    text = data.decode("utf-8", "replace")
    if not text.isascii():
        text = _ASTRAL.sub("__", text)
    return newline_starts(text)


@dataclass
class ScriptFileReader:
    """One process's script files, read as its user could."""

    root: int  # an O_PATH descriptor of its root, kept so files are found after it exits
    user: TargetUser
    files_read: int = 0
    bytes_read: int = 0

    @classmethod
    def of_process(cls, pid: int, started: int | None = None) -> ScriptFileReader | None:
        """None when the process is gone, its ids cannot be read, or (given
        when it started) the pid is another process's now."""
        user = TargetUser.of_process(pid)
        if user is None:
            return None
        try:
            root = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        if started is not None and start_time(pid) != started:  # checked after the open: the root is that process's
            os.close(root)
            return None
        return cls(root, user)

    def line_starts(self, url: str) -> array.array | None:
        """The file's line starts; None when it is not a file, cannot be read
        by the target's user, or the process's budget is spent."""
        path = script_path(url)
        if path is None or self.files_read >= MAX_FILES_PER_PROCESS or self.bytes_read >= MAX_BYTES_PER_PROCESS:
            return None
        self.files_read += 1
        try:
            with open_in_root_as(
                f"/proc/self/fd/{self.root}", path, MAX_SCRIPT_BYTES, self.user.may_search, self.user.may_read
            ) as handle:
                data = handle.read(MAX_SCRIPT_BYTES + 1)
        except OSError:
            return None
        if len(data) > MAX_SCRIPT_BYTES:
            return None  # grew past the cap after it was checked
        self.bytes_read += len(data)
        return file_line_starts(data)

    def close(self) -> None:
        os.close(self.root)
