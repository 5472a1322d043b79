"""Executable mappings of followed processes: kept in the BPF trie and
remembered (with their ELF files) so samples resolve after munmap, exec or exit.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

from profiler.kernel.file_images import VDSO, FileImages, has_image
from profiler.kernel.procmaps import MapEntry, read_maps
from profiler.kernel.trie import TriePrefix, split_range
from profiler.native.elf import ElfImage
from profiler.native.library import MAPPING_ELF, MAPPING_JIT, MAPPING_PENDING

# Trie entry kinds (bpf/jitprof_abi.h): a file whose unwind table is not
# attached yet defers the walks reaching it.
MAPPING_ELF_PENDING = MAPPING_PENDING

JIT_MODULE = "[jit]"  # the module of anonymous executable memory: JIT code
MAX_PROVISIONAL_RANGES = 4096  # per exec of a process
PRUNE_IMAGES_S = 5.0


class UnwindSource(Protocol):
    def acquire(self, image: ElfImage) -> int: ...

    def release(self, table_id: int) -> None: ...

    def holds(self, cache_key: str) -> bool: ...


class TrieSink(Protocol):
    def add_prefixes(self, prefixes: list[TriePrefix], kind: int, load_bias: int, table_id: int = 0) -> int: ...

    def remove_prefixes(self, prefixes: list[TriePrefix]) -> None: ...

    def begin_maps_read(self, pid: int) -> int | None: ...

    def mark_maps_read(self, pid: int, exec_count: int) -> None: ...


@dataclass
class KnownMapping:
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

    def find(self, address: int) -> KnownMapping | None:
        for mapping in self.current.values():
            if mapping.entry.contains(address):
                return mapping
        for mapping in reversed(self.retired):
            if mapping.entry.contains(address):
                return mapping
        for mapping in reversed(self.provisional):
            if mapping.entry.contains(address):
                return mapping
        return None

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
    generation: int
    mapping: KnownMapping | None


@dataclass
class TrackerStats:
    trie_rejected: int = 0
    unreadable_files: dict[str, tuple[int, str]] = field(default_factory=dict)  # path: (a pid mapping it, why)


class MappingTracker:
    """Main thread updates; the symbolizer thread looks up (under the lock)."""

    def __init__(self, trie: TrieSink, unwind_tables: UnwindSource | None = None, lazy_tables: bool = False) -> None:
        self._trie = trie
        self._unwind_tables = unwind_tables
        # --all: a file gets its unwind table when a sample first needs it
        # (its walks are deferred meanwhile), not because some process on the
        # machine maps it: the row array holds what is running.
        self._lazy_tables = lazy_tables
        self._wanted: dict[int, tuple[int, KnownMapping]] = {}
        self._lock = threading.Lock()
        self._spaces: dict[int, list[AddressSpace]] = {}
        self._files = FileImages()
        self._exited: set[int] = set()
        self._next_prune = 0.0
        self.stats = TrackerStats(unreadable_files=self._files.unreadable)

    # Updates (main thread) -------------------------------------------------

    def add_process(self, pid: int, parent: int | None = None, read_maps_now: bool = True) -> None:
        """Start tracking pid; a forked child starts with its parent's code."""
        with self._lock:
            if pid not in self._spaces:
                space = AddressSpace(pid, 0, 0)
                parent_spaces = self._spaces.get(parent) if parent is not None else None
                if parent_spaces:
                    # Lookup only (no trie entries): covers samples taken before
                    # the child's own maps are read, or after it is gone.
                    space.retired = list(parent_spaces[-1].current.values())
                self._spaces[pid] = [space]
        if read_maps_now:
            self.refresh(pid)

    def process_exec(self, pid: int, now_ns: int) -> None:
        """A new program image: drop the old trie entries, start a new space."""
        with self._lock:
            spaces = self._spaces.setdefault(pid, [])
            if spaces:
                self._uninstall(spaces[-1])
            spaces.append(AddressSpace(pid, len(spaces), now_ns))
        self.refresh(pid)

    def process_exit(self, pid: int) -> None:
        """Trie entries go; what is needed to symbolise its samples stays."""
        with self._lock:
            self._exited.add(pid)
            for space in self._spaces.get(pid, []):
                self._uninstall(space)

    def forget(self, pid: int) -> None:
        """An exited process none of whose samples wait any more: its state
        goes, and (every PRUNE_IMAGES_S) the files no process maps any more
        are closed, their symbols with them: a run of days with programs
        coming and going keeps what is running, not all it ever saw."""
        with self._lock:
            if pid in self._exited:
                self._exited.discard(pid)
                self._spaces.pop(pid, None)
            now = time.monotonic()
            if now >= self._next_prune:
                self._next_prune = now + PRUNE_IMAGES_S
                self._prune_images()

    def _prune_images(self) -> None:
        """(Under the lock.) Close the images no mapping holds, unless a table build may still read it."""
        held = {
            id(mapping.image)
            for spaces in self._spaces.values()
            for space in spaces
            for mapping in (*space.current.values(), *space.retired, *space.provisional)
            if mapping.image is not None
        }
        tables = self._unwind_tables
        self._files.prune(held, lambda image: tables is not None and tables.holds(image.cache_key))

    def refresh(self, pid: int, provisional: list[TriePrefix] | None = None) -> None:
        """Bring pid's trie entries in line with /proc/PID/maps; provisional
        prefixes the BPF program added for new executable memory go. Then the
        kernel's walks trust the entries, unless pid exec'd meanwhile (its
        exec count, read before the maps, tells)."""
        exec_count = self._trie.begin_maps_read(pid)
        read_ns = time.monotonic_ns()
        entries = [entry for entry in read_maps(pid) if entry.executable]
        with self._lock:
            spaces = self._spaces.get(pid)
            if not spaces or not entries:
                return
            space = spaces[-1]
            space.maps_read_ns = max(space.maps_read_ns, read_ns)
            if pid in self._exited:
                self._note_exiting_maps(pid, space, entries)
                return
            seen = {(entry.start, entry.end): entry for entry in entries}
            gone = [key for key, mapping in space.current.items() if seen.get(key) != mapping.entry]
            removed = [space.current.pop(key) for key in gone]
            # New entries first: a file whose mapping only changed shape keeps
            # its unwind table live, and shared trie blocks are not dropped.
            added = []
            for key, entry in seen.items():
                if key not in space.current:
                    space.current[key] = self._install(pid, entry)
                    added.append(space.current[key])
            for mapping in added:
                if not self._lazy_tables or self._table_held(mapping):
                    self._attach_file(pid, mapping)
                else:
                    self._open_image(pid, mapping)
            if added or removed:
                space.revision += 1
            if removed or provisional:
                in_use = {prefix for mapping in space.current.values() for prefix in mapping.prefixes}
                for mapping in removed:
                    self._remove(mapping, keep=in_use)
                    space.retired.append(mapping)
                self._trie.remove_prefixes([prefix for prefix in provisional or [] if prefix not in in_use])
            if exec_count is not None and pid not in self._exited:
                self._trie.mark_maps_read(pid, exec_count)

    def _note_exiting_maps(self, pid: int, space: AddressSpace, entries: list[MapEntry]) -> None:
        """(Under the lock.) Maps read after the exit was (a task still
        exiting): they serve the late walks of its last samples, e.g. code
        compiled just before it ended, for lookups only: no trie entry or
        table that forgetting it would not free."""
        known = {(mapping.entry.start, mapping.entry.end) for mapping in [*space.current.values(), *space.retired]}
        for entry in entries:
            if (entry.start, entry.end) in known:
                continue
            mapping = KnownMapping(entry, [], None, attached=not self._waits_for_table(entry))
            self._open_image(pid, mapping)  # (None for JIT memory)
            space.retired.append(mapping)
        space.revision += 1

    def note_exec_range(self, pid: int, start: int, length: int) -> None:
        """The kernel saw pid make [start, start + length) executable (before
        its maps are read again; it may be gone by then)."""
        if length <= 0 or start + length > 1 << 64:
            return
        with self._lock:
            spaces = self._spaces.get(pid)
            if not spaces:
                return
            space = spaces[-1]
            if len(space.provisional) >= MAX_PROVISIONAL_RANGES:
                del space.provisional[0]
            entry = MapEntry(start, start + length, True, False, True, 0, "00:00", 0, "")
            space.provisional.append(KnownMapping(entry, [], None, attached=True))
            space.revision += 1

    def refresh_all(self) -> None:
        with self._lock:
            pids = [pid for pid in self._spaces if pid not in self._exited]
        for pid in pids:
            self.refresh(pid)

    def _install(self, pid: int, entry: MapEntry) -> KnownMapping:
        """In the trie at once: JIT memory walkable by frame pointers, a file
        deferring walks until _attach_file gives it its unwind table."""
        waits_for_table = self._waits_for_table(entry)
        kind = MAPPING_JIT if entry.is_anonymous_exec else MAPPING_ELF_PENDING if waits_for_table else MAPPING_ELF
        prefixes = split_range(pid, entry.start, entry.end)
        self.stats.trie_rejected += self._trie.add_prefixes(prefixes, kind, 0, 0)
        return KnownMapping(entry, prefixes, None, attached=not waits_for_table)

    def _waits_for_table(self, entry: MapEntry) -> bool:
        """Does a walk through this mapping need its file's unwind table?"""
        return has_image(entry) and self._unwind_tables is not None

    def want_table(self, pid: int, mapping: KnownMapping) -> None:
        """(Any thread.) A walk needs this file's table: attach_wanted gives it."""
        with self._lock:
            self._wanted[id(mapping)] = (pid, mapping)

    def attach_wanted(self) -> None:
        """(Main thread.) Attach the files walks asked for, if still mapped."""
        if not self._wanted:
            return
        with self._lock:
            wanted, self._wanted = list(self._wanted.values()), {}
            for pid, mapping in wanted:
                spaces = self._spaces.get(pid)
                if mapping.attached or not spaces:
                    continue  # (forgotten: none of its samples wait)
                if pid not in self._exited and spaces[-1].current.get((mapping.entry.start, mapping.entry.end)) is mapping:
                    self._attach_file(pid, mapping)
                    spaces[-1].revision += 1
                else:
                    self._prepare_for_late_walks(pid, mapping)

    def _prepare_for_late_walks(self, pid: int, mapping: KnownMapping) -> None:
        """A file of a process gone (or of an exec replaced): rows for the walks
        still waiting, without trie entries or a table slot (the rows are built
        and kept in memory, then released at once)."""
        image = mapping.image or self._open_image(pid, mapping)
        if image is not None and self._unwind_tables is not None:
            self._unwind_tables.release(self._unwind_tables.acquire(image))
        mapping.attached = True

    def _open_image(self, pid: int, mapping: KnownMapping) -> ElfImage | None:
        """The mapped file (symbols, load bias), opened while the process is
        alive: its /proc/PID/map_files entry goes with it."""
        entry = mapping.entry
        if not has_image(entry):
            return None
        image = self._files.image_for(pid, entry)
        if image is not None:
            mapping.image = image
            vaddr = image.vaddr_for_file_offset(entry.offset)
            mapping.load_bias = entry.start - vaddr if vaddr is not None else 0
        return image

    def _table_held(self, mapping: KnownMapping) -> bool:
        """Is the file's table in the row array already (another process maps it)?"""
        entry = mapping.entry
        if entry.path == VDSO:
            return True  # small, and in every process
        image = mapping.image or self._files.known(entry)
        return image is not None and self._unwind_tables is not None and self._unwind_tables.holds(image.cache_key)

    def _attach_file(self, pid: int, mapping: KnownMapping) -> None:
        """Open the mapped ELF file (slow for a large binary) and give the
        mapping its load bias and unwind table."""
        if not has_image(mapping.entry):
            return
        image = self._open_image(pid, mapping)
        if self._unwind_tables is None:
            return  # frame pointers only: the trie entry needs nothing more
        if image is not None:
            mapping.table_id = self._unwind_tables.acquire(image)
        # Unreadable: frame-pointer steps, no longer deferred.
        self._trie.add_prefixes(mapping.prefixes, MAPPING_ELF, mapping.load_bias, mapping.table_id)
        mapping.attached = True

    def _remove(self, mapping: KnownMapping, keep: set[TriePrefix] | None = None) -> None:
        self._trie.remove_prefixes([prefix for prefix in mapping.prefixes if keep is None or prefix not in keep])
        if self._unwind_tables is not None:
            self._unwind_tables.release(mapping.table_id)
        mapping.table_id = 0

    def _uninstall(self, space: AddressSpace) -> None:
        for mapping in space.current.values():
            self._remove(mapping)
            space.retired.append(mapping)
        space.current.clear()
        space.revision += 1

    # Lookups (symbolizer thread) ---------------------------------------

    def find(self, pid: int, time_ns: int, address: int) -> MappingLookup:
        """The mapping holding an address of pid at a sample time."""
        with self._lock:
            space = self._space_at(pid, time_ns)
            if space is None:
                return MappingLookup(0, None)
            return MappingLookup(space.generation, space.find(address))

    def space_view(self, pid: int, time_ns: int) -> SpaceView | None:
        """The mappings of pid's exec running at a sample time, for a late walk."""
        with self._lock:
            space = self._space_at(pid, time_ns)
            if space is None:
                return None
            # An earlier exec, or an exited process: nothing more will be learnt.
            settled = space is not self._spaces[pid][-1] or pid in self._exited
            return SpaceView(pid, space.generation, space.maps_read_ns, settled, space.walkable())

    def space_state(self, pid: int, time_ns: int) -> tuple[int, int]:
        """(generation, revision) of pid's exec running at a sample time: while
        both stay the same, its addresses resolve to the same mappings."""
        with self._lock:
            space = self._space_at(pid, time_ns)
            return (space.generation, space.revision) if space is not None else (0, 0)

    def _space_at(self, pid: int, time_ns: int) -> AddressSpace | None:
        spaces = self._spaces.get(pid)
        if not spaces:
            return None
        space = spaces[0]
        for candidate in spaces:
            if candidate.started_ns <= time_ns:
                space = candidate
        return space

    def close(self) -> None:
        with self._lock:
            self._files.close()
