"""What blazesym's helper said of a file's addresses, kept on disk by the
file's cache key (its build-id, or its identity; "-d": with its debug file):
a later run names those addresses without asking. The helper's first answer
for a file with large DWARF (libc's debug file: 0.17 s) was most of a short
program's run's end, at every run. The entry is ours, not trusted: read
within a size cap and checked as an answer from the helper is.
"""

from __future__ import annotations

import itertools

from profiler.native import cache
from profiler.native.blazesym import NativeSymbol
from profiler.native.locator_process import answer_of, symbols_of

KIND = "located-1"  # the answers' form: a new kind when what the helper answers changes
MAX_ENTRY_BYTES = 8 << 20
MAX_ADDRESSES = 50_000  # kept per file; past that, new answers are not


class LocatedNames:
    """(The symbolizer's thread.) Each file's answers, read on first use and written back at the end."""

    def __init__(self) -> None:
        self._files: dict[str, dict[int, NativeSymbol | None]] = {}
        self._changed: set[str] = set()

    def known(self, key: str) -> dict[int, NativeSymbol | None]:
        """The answers kept for the file (None: blazesym names nothing there)."""
        found = self._files.get(key)
        if found is None:
            found = self._files[key] = _read(key)
        return found

    def add(self, key: str, answers: dict[int, NativeSymbol | None]) -> None:
        found = self.known(key)
        room = MAX_ADDRESSES - len(found)
        new = [(vaddr, symbol) for vaddr, symbol in answers.items() if vaddr not in found]
        if room <= 0 or not new:
            return
        found.update(itertools.islice(new, room))
        self._changed.add(key)

    def save(self) -> None:
        for key in sorted(self._changed):
            found = self._files[key]
            addresses = sorted(found)
            cache.write_json(KIND, key, {"addresses": addresses, "symbols": answer_of([found[vaddr] for vaddr in addresses])})
        self._changed.clear()


def _read(key: str) -> dict[int, NativeSymbol | None]:
    value = cache.read_json(KIND, key, MAX_ENTRY_BYTES)
    if not isinstance(value, dict):
        return {}
    addresses, answer = value.get("addresses"), value.get("symbols")
    if not isinstance(addresses, list) or not isinstance(answer, list) or len(addresses) != len(answer):
        return {}
    if len(addresses) > MAX_ADDRESSES or not all(type(vaddr) is int and 0 <= vaddr < 1 << 64 for vaddr in addresses):
        return {}
    try:
        symbols = symbols_of(answer)
    except (TypeError, ValueError, KeyError):
        return {}
    return dict(zip(addresses, symbols, strict=True))
