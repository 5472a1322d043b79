"""Executable mappings of followed processes: kept in the BPF trie and
remembered (with their ELF files) so samples resolve after munmap, exec or exit.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol

from profiler.kernel.procmaps import MapEntry, read_maps
from profiler.kernel.trie import TriePrefix, split_range
from profiler.native.elf import ElfImage, UnreadableElf, open_elf

MAPPING_ELF = 1
MAPPING_JIT = 2

JIT_MODULE = "[jit]"  # the module of anonymous executable memory: JIT code


class UnwindSource(Protocol):
    def acquire(self, image: ElfImage) -> int: ...

    def release(self, table_id: int) -> None: ...


class TrieSink(Protocol):
    def add_prefixes(self, prefixes: list[TriePrefix], kind: int, load_bias: int, table_id: int = 0) -> int: ...

    def remove_prefixes(self, prefixes: list[TriePrefix]) -> None: ...


@dataclass(frozen=True)
class FileKey:
    device: str
    inode: int


@dataclass
class KnownMapping:
    entry: MapEntry
    prefixes: list[TriePrefix]
    image: ElfImage | None  # None for JIT memory and unreadable files
    table_id: int = 0  # unwind table in the kernel; 0: frame pointers only

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

    def find(self, address: int) -> KnownMapping | None:
        for mapping in self.current.values():
            if mapping.entry.contains(address):
                return mapping
        for mapping in reversed(self.retired):
            if mapping.entry.contains(address):
                return mapping
        return None


@dataclass(frozen=True)
class MappingLookup:
    generation: int
    mapping: KnownMapping | None


@dataclass
class TrackerStats:
    trie_rejected: int = 0
    unreadable_files: dict[str, str] = field(default_factory=dict)


class MappingTracker:
    """Main thread updates; the symbolizer thread looks up (under the lock)."""

    def __init__(self, trie: TrieSink, unwind_tables: UnwindSource | None = None) -> None:
        self._trie = trie
        self._unwind_tables = unwind_tables
        self._lock = threading.Lock()
        self._spaces: dict[int, list[AddressSpace]] = {}
        self._images: dict[FileKey, ElfImage] = {}
        self._exited: set[int] = set()
        self.stats = TrackerStats()

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

    def refresh(self, pid: int, provisional: list[TriePrefix] | None = None) -> None:
        """Bring pid's trie entries in line with /proc/PID/maps; provisional
        prefixes the BPF program added for new executable memory go."""
        entries = [entry for entry in read_maps(pid) if entry.executable]
        with self._lock:
            spaces = self._spaces.get(pid)
            if not spaces or not entries:
                return
            space = spaces[-1]
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
                self._attach_file(pid, mapping)
            if removed or provisional:
                in_use = {prefix for mapping in space.current.values() for prefix in mapping.prefixes}
                for mapping in removed:
                    self._remove(mapping, keep=in_use)
                    space.retired.append(mapping)
                self._trie.remove_prefixes([prefix for prefix in provisional or [] if prefix not in in_use])

    def refresh_all(self) -> None:
        with self._lock:
            pids = [pid for pid in self._spaces if pid not in self._exited]
        for pid in pids:
            self.refresh(pid)

    def _install(self, pid: int, entry: MapEntry) -> KnownMapping:
        """Walkable at once (frame pointers); unwind table attached by _attach_file."""
        kind = MAPPING_JIT if entry.is_anonymous_exec else MAPPING_ELF
        prefixes = split_range(pid, entry.start, entry.end)
        self.stats.trie_rejected += self._trie.add_prefixes(prefixes, kind, 0, 0)
        return KnownMapping(entry, prefixes, None)

    def _attach_file(self, pid: int, mapping: KnownMapping) -> None:
        """Open the mapped ELF file (slow for a large binary) and give the
        mapping its load bias and unwind table."""
        entry = mapping.entry
        if not entry.is_file_backed:
            return
        image = self._image_for(pid, entry)
        if image is None:
            return
        mapping.image = image
        if self._unwind_tables is None:
            return  # frame pointers only: the trie entry needs nothing more
        vaddr = image.vaddr_for_file_offset(entry.offset)
        load_bias = entry.start - vaddr if vaddr is not None else 0
        mapping.table_id = self._unwind_tables.acquire(image)
        self._trie.add_prefixes(mapping.prefixes, MAPPING_ELF, load_bias, mapping.table_id)

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

    def _image_for(self, pid: int, entry: MapEntry) -> ElfImage | None:
        key = FileKey(entry.device, entry.inode)
        image = self._images.get(key)
        if image is not None:
            return image
        if entry.path in self.stats.unreadable_files:
            return None
        # map_files reaches the exact mapped file, even deleted or in another
        # mount namespace; /proc/PID/root is the container-aware fallback.
        candidates = [
            f"/proc/{pid}/map_files/{entry.start:x}-{entry.end:x}",
            f"/proc/{pid}/root{entry.path}",
        ]
        try:
            image = open_elf(candidates, entry.path, root=f"/proc/{pid}/root")
        except UnreadableElf as error:
            self.stats.unreadable_files[entry.path] = str(error)
            return None
        self._images[key] = image
        return image

    # Lookups (symbolizer thread) ---------------------------------------

    def find(self, pid: int, time_ns: int, address: int) -> MappingLookup:
        """The mapping holding an address of pid at a sample time."""
        with self._lock:
            space = self._space_at(pid, time_ns)
            if space is None:
                return MappingLookup(0, None)
            return MappingLookup(space.generation, space.find(address))

    def generation_at(self, pid: int, time_ns: int) -> int:
        """Which exec of pid was running at a sample time (cheap: no mapping search)."""
        with self._lock:
            space = self._space_at(pid, time_ns)
            return space.generation if space is not None else 0

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
            for image in self._images.values():
                image.close()
            self._images.clear()
