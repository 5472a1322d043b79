"""What blazesym's helper said of a file's addresses, kept on disk by the
file's cache key (its build-id, or its identity; "-d": with its debug file):
a later run names those addresses without asking. The helper's first answer
for a file with large DWARF (libc's debug file: 0.17 s) was most of a short
program's run's end, at every run. The entry is ours, not trusted: read
within a size cap and checked as an answer from the helper is, each answer
when it is first asked for (a file's entry grows with every run to
MAX_ADDRESSES, and a run asks for a few hundred of them).
"""

from __future__ import annotations

from typing import Any

from profiler.native import cache
from profiler.native.blazesym import NativeSymbol
from profiler.native.locator_process import answer_of, symbols_of

KIND = "located-1"  # the answers' form: a new kind when what the helper answers changes
MAX_ENTRY_BYTES = 8 << 20
MAX_ADDRESSES = 50_000  # kept per file; past that, new answers are not


class KeptAnswers:
    """One file's answers by file virtual address (None: blazesym names
    nothing there): those of earlier runs as they were kept, checked and
    converted when asked for; an answer that is not one is not known."""

    def __init__(self, kept: dict[int, Any] | None = None) -> None:
        self._kept = kept or {}  # as read, not checked yet
        self._answers: dict[int, NativeSymbol | None] = {}

    def __contains__(self, vaddr: object) -> bool:
        if vaddr in self._answers:
            return True
        if not isinstance(vaddr, int) or vaddr not in self._kept:
            return False
        raw = self._kept.pop(vaddr)
        try:
            (self._answers[vaddr],) = symbols_of([raw])
        except (TypeError, ValueError, KeyError):
            return False  # asked again
        return True

    def __getitem__(self, vaddr: int) -> NativeSymbol | None:
        if vaddr not in self:
            raise KeyError(vaddr)
        return self._answers[vaddr]

    def __len__(self) -> int:
        return len(self._answers) + len(self._kept)

    def add(self, vaddr: int, symbol: NativeSymbol | None) -> None:
        self._kept.pop(vaddr, None)
        self._answers[vaddr] = symbol

    def as_saved(self) -> tuple[list[int], list[Any]]:
        """(Addresses, answers in the helper's form), by address: those never
        asked for written back as they were read."""
        answers = dict(zip(self._answers, answer_of(list(self._answers.values())), strict=True))
        answers.update(self._kept)
        addresses = sorted(answers)
        return addresses, [answers[vaddr] for vaddr in addresses]


class LocatedNames:
    """(The symbolizer's thread.) Each file's answers, read on first use and written back at the end."""

    def __init__(self) -> None:
        self._files: dict[str, KeptAnswers] = {}
        self._changed: set[str] = set()

    def known(self, key: str) -> KeptAnswers:
        """The answers kept for the file."""
        found = self._files.get(key)
        if found is None:
            found = self._files[key] = _read(key)
        return found

    def add(self, key: str, answers: dict[int, NativeSymbol | None]) -> None:
        found = self.known(key)
        new = [(vaddr, symbol) for vaddr, symbol in answers.items() if vaddr not in found]
        room = MAX_ADDRESSES - len(found)
        if room <= 0 or not new:
            return
        for vaddr, symbol in new[:room]:
            found.add(vaddr, symbol)
        self._changed.add(key)

    def save(self) -> None:
        for key in sorted(self._changed):
            addresses, answer = self._files[key].as_saved()
            cache.write_json(KIND, key, {"addresses": addresses, "symbols": answer})
        self._changed.clear()


def _read(key: str) -> KeptAnswers:
    value = cache.read_json(KIND, key, MAX_ENTRY_BYTES)
    if not isinstance(value, dict):
        return KeptAnswers()
    addresses, answer = value.get("addresses"), value.get("symbols")
    if not isinstance(addresses, list) or not isinstance(answer, list) or len(addresses) != len(answer):
        return KeptAnswers()
    if len(addresses) > MAX_ADDRESSES or not all(type(vaddr) is int and 0 <= vaddr < 1 << 64 for vaddr in addresses):
        return KeptAnswers()
    return KeptAnswers(dict(zip(addresses, answer, strict=True)))
