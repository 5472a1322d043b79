"""Reading a followed process's memory, as V8's and HotSpot's objects are read: one open
/proc/PID/mem per process (bound to that process's address space: after its
exit or exec the descriptor reads nothing), reads of bounded size, nothing
written, the process never stopped.

A read can block: the target may back the address with userfaultfd or a
FUSE file and never answer. So all reading of a process's memory is done by
a thread of its own (MemoryThread), waited for while its reads go on: an
operation none of whose reads returns for OPERATION_TIMEOUT_S, or that takes
MAX_OPERATION_S in all, marks the process stalled, its later operations fail
at once, and only that thread stays behind (MAX_STALLED of them at most: past
that, no process's memory is read). A slow operation is not a stuck one: on a
busy machine (jitprof's own cold start among it) reads are slow, not blocked."""

from __future__ import annotations

import os
import queue
import struct
import threading
import time
from collections.abc import Callable
from typing import TypeVar

MAX_READ = 64 << 20  # one read: a script's source at most
USER_SPACE_END = 1 << 47
OPERATION_TIMEOUT_S = 2.0  # without a read returning: a read the target blocks
MAX_OPERATION_S = 10.0  # naming a frame: a few reads, or a script's source
MAX_STALLED = 16
_WORD = struct.Struct("<Q")
_stalled_lock = threading.Lock()
_stalled = 0
Result = TypeVar("Result")


class ProcessMemory:
    """Reads of one process's memory: used on its MemoryThread only."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._descriptor: int | None = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        self.reads = 0
        self.bytes_read = 0

    def read(self, address: int, length: int) -> bytes | None:
        """length bytes at address, or None (unmapped, out of range, closed)."""
        if self._descriptor is None or length <= 0 or length > MAX_READ:
            return None
        if address <= 0 or address + length > USER_SPACE_END:
            return None
        self.reads += 1
        try:
            data = os.pread(self._descriptor, length, address)
        except OSError:
            return None
        self.bytes_read += len(data)
        return data if len(data) == length else None

    def word(self, address: int) -> int | None:
        data = self.read(address, 8)
        return _WORD.unpack(data)[0] if data is not None else None

    def close(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None


class MemoryThread:
    """Runs what reads a process's memory on a thread of its own, and waits
    for it while its reads return (see above)."""

    def __init__(self, memory: ProcessMemory) -> None:
        self.memory = memory
        self._requests: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[tuple[object, BaseException | None]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._callers = threading.Lock()  # the symbolizer and the prefetcher: one operation at a time
        self.stalled = False

    def run(self, operation: Callable[[], Result]) -> Result | None:
        """operation's result, or None when the process's memory did not
        answer in time (then, and from then on, nothing more is asked of it)."""
        with self._callers:
            return self._run(operation)

    def _run(self, operation: Callable[[], Result]) -> Result | None:
        if self.stalled:
            return None
        if self._thread is None:
            with _stalled_lock:
                if _stalled >= MAX_STALLED:
                    return None
            self._thread = threading.Thread(target=self._serve, name=f"jitprof-mem-{self.memory.pid}", daemon=True)
            self._thread.start()
        self._requests.put(operation)
        given_up_at = time.monotonic() + MAX_OPERATION_S
        reads = self.memory.reads
        while True:
            try:
                result, error = self._answers.get(timeout=OPERATION_TIMEOUT_S)
                break
            except queue.Empty:
                if self.memory.reads == reads or time.monotonic() >= given_up_at:
                    self._stall()
                    return None
                reads = self.memory.reads
        if error is not None:
            raise error
        return result  # type: ignore[return-value]

    def _serve(self) -> None:
        while True:
            operation = self._requests.get()
            if operation is None:
                break
            try:
                self._answers.put((operation(), None))
            except Exception as error:  # a bug: raised again on the caller's thread
                self._answers.put((None, error))
        self.memory.close()  # here, never under a read of this thread

    def _stall(self) -> None:
        global _stalled
        self.stalled = True
        with _stalled_lock:
            _stalled += 1
        self._requests.put(None)  # if the read ever returns, the thread ends

    def close(self) -> None:
        if self._thread is None:
            self.memory.close()
        elif not self.stalled:
            self._requests.put(None)
