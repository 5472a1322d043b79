"""A file's function symbols, sorted by address, and lookups in them."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from profiler.native.demangle import demangle


@dataclass(frozen=True)
class SymbolHit:
    name: str
    offset: int  # bytes into the function

@dataclass
class SymbolTable:
    """Function symbols sorted by address, names as the file has them:
    demangled when looked up (node has 78 k symbols; a profile hits a few
    hundred)."""

    starts: list[int]
    sizes: list[int]
    names: list[str]
    _readable: dict[int, str] = field(default_factory=dict, repr=False, compare=False)

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
            name = self._readable[index] = demangle(self.names[index])
        return SymbolHit(name, vaddr - start)

    def __len__(self) -> int:
        return len(self.starts)
