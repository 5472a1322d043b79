"""A file's function symbols, sorted by address, and lookups in them."""

from __future__ import annotations

import array
import bisect
import re
from dataclasses import dataclass

from profiler.native.demangle import demangle

NAME_END = re.compile(b"\0")


@dataclass(frozen=True)
class SymbolHit:
    """The function an address is in, and how far into it."""

    name: str
    offset: int  # bytes into the function


class SymbolTable:
    """Function symbols sorted by address, names as the file has them:
    demangled when looked up (node has 78 k symbols; a profile hits a few
    hundred). Held as three arrays and one block of names, not an object
    per symbol: a third of the memory, and given back whole when the file's
    last process is gone (a run of days sees many files come and go)."""

    def __init__(self, starts: array.array, sizes: array.array, names_blob: bytes) -> None:
        """starts and sizes: array('Q'); names_blob: the names, each ended by a NUL."""
        self.starts = starts
        self.sizes = sizes
        self.names_blob = names_blob
        self._name_ends = array.array(
            "I" if len(names_blob) < 1 << 32 else "Q", (match.start() for match in NAME_END.finditer(names_blob))
        )
        if not len(starts) == len(sizes) == len(self._name_ends):
            raise ValueError("a symbol table needs as many names and sizes as starts")
        self._readable: dict[int, str] = {}

    @classmethod
    def of(cls, starts: list[int], sizes: list[int], names: list[str]) -> SymbolTable:
        blob = b"".join(name.replace("\0", "").encode("utf-8", "replace") + b"\0" for name in names)
        return cls(array.array("Q", starts), array.array("Q", sizes), blob)

    def name(self, index: int) -> str:
        """The index-th name as the file has it (mangled)."""
        begin = self._name_ends[index - 1] + 1 if index else 0
        return self.names_blob[begin : self._name_ends[index]].decode("utf-8", "replace")

    @property
    def names(self) -> list[str]:
        return [self.name(index) for index in range(len(self))]

    def lookup(self, vaddr: int) -> SymbolHit | None:
        """The function holding vaddr, if any."""
        index = bisect.bisect_right(self.starts, vaddr) - 1
        if index < 0:
            return None
        start, size = self.starts[index], self.sizes[index]
        if size and vaddr >= start + size:
            return None
        if not size and index + 1 < len(self.starts) and vaddr >= self.starts[index + 1]:
            return None
        name = self._readable.get(index)
        if name is None:
            name = self._readable[index] = demangle(self.name(index))
        return SymbolHit(name, vaddr - start)

    def __len__(self) -> int:
        return len(self.starts)
