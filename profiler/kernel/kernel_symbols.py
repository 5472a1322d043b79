"""Kernel function names from /proc/kallsyms, read once when the first
kernel frame is named.

About 120 k text symbols: kept as one sorted array of addresses and one
blob of names, about 5 MiB, not 120 k Python strings.
"""

from __future__ import annotations

import array
import bisect
import threading

KALLSYMS = "/proc/kallsyms"
TEXT_TYPES = frozenset(b"tTwW")
MAX_BYTES = 64 << 20  # a kallsyms of every module loaded is about 15 MB


class KernelSymbols:
    def __init__(self, path: str = KALLSYMS) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._addresses: array.array | None = None
        self._ends = array.array("I")  # where each name ends in _names
        self._names = b""

    def name(self, address: int) -> str:
        """The function containing address, or "" when none is known (or
        kallsyms hides addresses: kptr_restrict, not root)."""
        addresses = self._load()
        index = bisect.bisect_right(addresses, address) - 1
        if index < 0:
            return ""
        start = self._ends[index - 1] if index else 0
        return self._names[start : self._ends[index]].decode("utf-8", "replace")

    def _load(self) -> array.array:
        with self._lock:
            if self._addresses is None:
                self._addresses = self._read()
            return self._addresses

    def _read(self) -> array.array:
        entries: list[tuple[int, bytes]] = []
        try:
            with open(self._path, "rb") as handle:
                text = handle.read(MAX_BYTES)
        except OSError:
            return array.array("Q")
        for line in text.splitlines():
            fields = line.split()
            if len(fields) < 3 or len(fields[1]) != 1 or fields[1][0] not in TEXT_TYPES:
                continue
            try:
                address = int(fields[0], 16)
            except ValueError:
                continue
            if address:
                entries.append((address, fields[2]))
        entries.sort(key=lambda entry: entry[0])  # stable: of names at one address, the first listed
        addresses = array.array("Q")
        names = bytearray()
        for address, name in entries:
            if addresses and addresses[-1] == address:
                continue
            addresses.append(address)
            names += name
            self._ends.append(len(names))
        self._names = bytes(names)
        return addresses
