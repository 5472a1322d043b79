"""The spawned program's output while the live view owns the terminal.

The program writes to a pseudo-terminal (so it still sees a TTY and keeps
line buffering); a thread reads it, keeps all of it for the end, and the
last lines for the view's pane.
"""

from __future__ import annotations

import fcntl
import os
import re
import struct
import termios
import threading
from collections import deque

from profiler.safety.terminal import printable_lines

MAX_KEPT_BYTES = 64 << 20  # beyond this the oldest output is dropped (and said so)
PANE_LINES = 200
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# An escape sequence not finished at the end of a read: kept for the next
# (a program's write can be split anywhere), up to this long.
_UNFINISHED_ESCAPE = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*|\][^\x07\x1b]*)?\Z")
MAX_UNFINISHED_ESCAPE = 4096


class CapturedOutput:
    def __init__(self, columns: int = 120, rows: int = 24) -> None:
        self.master, self.slave = os.openpty()
        # The program sees a terminal of the pane's width.
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        os.set_inheritable(self.slave, True)
        self._chunks: deque[bytes] = deque()
        self._kept_bytes = 0
        self.dropped_bytes = 0
        self._lines: deque[str] = deque(maxlen=PANE_LINES)
        self._partial = ""
        self._unfinished_escape = ""
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="jitprof-output", daemon=True)
        self.changed = False

    def start(self) -> None:
        """Call once the child holds the slave end: ours is closed, so the
        reader sees the end when the program (and its children) close theirs."""
        os.close(self.slave)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: every writer has gone
                return
            if not data:
                return
            self._keep(data)

    def _keep(self, data: bytes) -> None:
        text = self._pane_text(data.decode("utf-8", "replace"))
        with self._lock:
            self._chunks.append(data)
            self._kept_bytes += len(data)
            while self._kept_bytes > MAX_KEPT_BYTES and len(self._chunks) > 1:
                dropped = self._chunks.popleft()
                self._kept_bytes -= len(dropped)
                self.dropped_bytes += len(dropped)
            pieces = (self._partial + text).split("\n")
            self._partial = pieces.pop()
            self._lines.extend(pieces)
            self.changed = True

    def _pane_text(self, text: str) -> str:
        """What of the program's output the pane shows: its escape sequences
        removed (also one split across two reads), the other controls shown."""
        text = self._unfinished_escape + text
        unfinished = _UNFINISHED_ESCAPE.search(text)
        self._unfinished_escape = ""
        if unfinished is not None and len(text) - unfinished.start() <= MAX_UNFINISHED_ESCAPE:
            self._unfinished_escape = text[unfinished.start() :]
            text = text[: unfinished.start()]
        text = _ESCAPES.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
        return printable_lines(text)

    def last_lines(self, count: int) -> list[str]:
        with self._lock:
            lines = list(self._lines)[-count:] if count > 0 else []
            if self._partial and count > 0:
                lines = (lines + [self._partial])[-count:]
            self.changed = False
            return lines

    def finish(self, timeout_s: float = 1.0) -> bytes:
        """Everything the program wrote (after it has exited)."""
        self._thread.join(timeout_s)
        try:
            os.close(self.master)
        except OSError:
            pass
        with self._lock:
            return b"".join(self._chunks)
