"""A new process's slow reads, made before its runtime is told of it and on
a thread of their own.

The first node of a run costs a read of its binary's symbol table for V8's
layout: tens of milliseconds, hundreds when the file is not in the page
cache. Made on the sampling loop, it held up the events behind it, and a
short process that exec'd meanwhile (a `node -e` in a shell loop lives 50 ms)
was gone before its maps were read: every sample of it lost its stack. Here
the loop goes on reading maps; the process's walks stay held (its samples
carry their stacks) until its reads are done and its runtime is known.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

WAIT_MS = 10  # how long the loop sleeps while reads are under way


@dataclass(frozen=True)
class _Request:
    pid: int
    token: int
    reads: tuple[Callable[[], None], ...]


class ReadAhead:
    """Called from the sampling loop only; the reads run on the thread."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
        self._waiting: dict[int, int] = {}  # pid -> the token of its latest request
        self._tokens = itertools.count(1)
        # Started now: a thread started while the symbolizer holds the
        # interpreter waits for it, on the loop.
        self._thread = threading.Thread(target=self._read_loop, name="jitprof-read-ahead", daemon=True)
        self._thread.start()

    def start(self, pid: int, reads: list[Callable[[], None]]) -> None:
        """Read for pid; a later start for it (an exec) supersedes this one."""
        token = next(self._tokens)
        self._waiting[pid] = token
        self._requests.put(_Request(pid, token, tuple(reads)))

    def waiting(self) -> bool:
        return bool(self._waiting)

    def cancel(self, pid: int) -> None:
        """pid is gone: what is read for it serves nothing now."""
        self._waiting.pop(pid, None)

    def ready(self, wait_s: float = 0.0) -> list[int]:
        """The processes whose latest reads are done, in the order they were
        asked; waits up to wait_s for all of them."""
        done: list[int] = []
        deadline = time.monotonic() + wait_s
        while self._waiting:
            try:
                pid, token = self._done.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if self._waiting.get(pid) == token:  # else superseded, or its process gone
                del self._waiting[pid]
                done.append(pid)
        return done

    def close(self) -> None:
        self._requests.put(None)

    def _read_loop(self) -> None:
        while (request := self._requests.get()) is not None:
            for read in request.reads:
                try:
                    read()
                except Exception:  # noqa: BLE001 - watch() makes the same read, and says what went wrong
                    pass
            self._done.put((request.pid, request.token))
