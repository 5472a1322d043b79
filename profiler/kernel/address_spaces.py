"""What is known of a followed process's executable mappings, exec by exec:
the records the tracker (kernel/mappings.py), the installer
(kernel/mapping_installer.py), late walks and the symbolizer share."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Protocol

from profiler.kernel.procmaps import MapEntry
from profiler.kernel.trie import TriePrefix
from profiler.native.elf import ElfImage
from profiler.native.library import MAPPING_PENDING

# Trie entry kinds (bpf/jitprof_abi.h): a file whose unwind table is not
# attached yet defers the walks reaching it.
MAPPING_ELF_PENDING = MAPPING_PENDING

JIT_MODULE = "[jit]"  # the module of anonymous executable memory: JIT code


class UnwindSource(Protocol):
    def acquire(self, image: ElfImage) -> int: ...

    def release(self, table_id: int) -> None: ...

    def holds(self, cache_key: str) -> bool: ...


class TrieSink(Protocol):
    def add_prefixes(self, prefixes: list[TriePrefix], kind: int, load_bias: int, table_id: int = 0) -> int: ...

    def remove_prefixes(self, prefixes: list[TriePrefix]) -> None: ...

    def begin_maps_read(self, pid: int) -> int | None: ...

    def exec_count(self, pid: int) -> int | None: ...

    def mark_maps_read(self, pid: int, exec_count: int) -> None: ...


@dataclass
class KnownMapping:
    """An executable mapping of a process, as the trie and the walkers know it."""

    entry: MapEntry
    prefixes: list[TriePrefix]
    image: ElfImage | None  # None for JIT memory and unreadable files
    table_id: int = 0  # unwind table in the kernel; 0: frame pointers only
    load_bias: int = 0  # address minus ELF vaddr
    attached: bool = False  # the file (and its table) is known: walks through it need not wait

    @property
    def module_name(self) -> str:
        if self.entry.is_anonymous_exec:
            return JIT_MODULE
        path = self.entry.path
        return path.rsplit("/", 1)[-1] if path else JIT_MODULE


@dataclass
class AddressSpace:
    """One exec of one process: every executable mapping it has had."""

    pid: int
    generation: int
    started_ns: int
    current: dict[tuple[int, int], KnownMapping] = field(default_factory=dict)
    retired: list[KnownMapping] = field(default_factory=list)
    maps_read_ns: int = 0  # when /proc/PID/maps was last read for this exec (monotonic, as sample times)
    # Ranges the kernel saw made executable, as JIT memory: the last resort
    # for code mapped and gone (or the process gone) before the maps were read.
    provisional: list[KnownMapping] = field(default_factory=list)
    revision: int = 0  # changes with any of the above: an address may resolve differently
    files_replaced: int = 0  # file mappings gone from current: an address may name another file's code now
    exec_count: int = 0  # the kernel's count of the process's execs, for this one
    # Maps read after an exec whose event had not come: started_ns is when
    # they were read, until the event tells when the exec was.
    dated: bool = True

    # The current mappings by start, for find (a JVM has hundreds, and every
    # frame of every sample looks one up): made again when they change.
    _sorted_for: tuple[int, int] = field(default=(-1, -1), init=False, repr=False, compare=False)
    _starts: list[int] = field(default_factory=list, init=False, repr=False, compare=False)
    _by_start: list[KnownMapping] = field(default_factory=list, init=False, repr=False, compare=False)

    def find(self, address: int) -> KnownMapping | None:
        mapping = self._current_at(address)
        if mapping is not None:
            return mapping
        for mapping in reversed(self.retired):
            if mapping.entry.contains(address):
                return mapping
        for mapping in reversed(self.provisional):
            if mapping.entry.contains(address):
                return mapping
        return None

    def _current_at(self, address: int) -> KnownMapping | None:
        """The current mapping holding address (they never overlap)."""
        if self._sorted_for != (self.revision, len(self.current)):
            self._by_start = sorted(self.current.values(), key=lambda mapping: mapping.entry.start)
            self._starts = [mapping.entry.start for mapping in self._by_start]
            self._sorted_for = (self.revision, len(self.current))
        index = bisect.bisect_right(self._starts, address) - 1
        if index < 0:
            return None
        mapping = self._by_start[index]
        if not mapping.entry.contains(address):
            return None
        return mapping if self.current.get((mapping.entry.start, mapping.entry.end)) is mapping else None

    def walkable(self) -> list[KnownMapping]:
        """Every mapping a stack walk may step through, sorted by start, one
        per address: current mappings first, then the most recent retired."""
        chosen: list[KnownMapping] = []
        taken: list[tuple[int, int]] = []
        for mapping in [*self.current.values(), *reversed(self.retired), *reversed(self.provisional)]:
            start, end = mapping.entry.start, mapping.entry.end
            if any(start < other_end and other_start < end for other_start, other_end in taken):
                continue
            chosen.append(mapping)
            taken.append((start, end))
        return sorted(chosen, key=lambda mapping: mapping.entry.start)


@dataclass(frozen=True)
class SpaceView:
    """What a late walk needs of one exec of a process, at a sample time."""

    pid: int
    generation: int
    maps_read_ns: int  # 0: never
    settled: bool  # an earlier exec, or exited: nothing more will be learnt of it
    mappings: list[KnownMapping]


@dataclass(frozen=True)
class MappingLookup:
    """The mapping an address was in, and the maps' generation then."""

    generation: int
    mapping: KnownMapping | None


@dataclass
class TrackerStats:
    """What the mapping tracker could not do, for the end of a run."""

    trie_rejected: int = 0
    unreadable_files: dict[str, tuple[int, str]] = field(default_factory=dict)  # path: (a pid mapping it, why)
