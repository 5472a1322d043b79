"""Reading a followed process's memory, as V8's objects are read: one open
/proc/PID/mem per process (bound to that process's address space: after its
exit or exec the descriptor reads nothing), reads of bounded size, nothing
written, the process never stopped."""

from __future__ import annotations

import os
import struct

MAX_READ = 64 << 20  # one read: a script's source at most
USER_SPACE_END = 1 << 47
_WORD = struct.Struct("<Q")


class ProcessMemory:
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
