"""Executable mappings into the kernel's view: trie entries (JIT memory,
files walked with their unwind tables, files waiting for theirs), the files
opened behind them and their unwind tables, and taking them out again. The
tracker (kernel/mappings.py) decides when; this does it (under its lock)."""

from __future__ import annotations

from profiler.kernel.address_spaces import MAPPING_ELF_PENDING, AddressSpace, KnownMapping, TrackerStats, TrieSink, UnwindSource
from profiler.kernel.file_images import VDSO, FileImages, has_image
from profiler.kernel.procmaps import MapEntry
from profiler.kernel.trie import TriePrefix, split_range
from profiler.native.elf import ElfImage
from profiler.native.library import MAPPING_ELF, MAPPING_JIT


class MappingInstaller:
    def __init__(self, trie: TrieSink, unwind_tables: UnwindSource | None, lazy_tables: bool, stats: TrackerStats) -> None:
        self._trie = trie
        self._unwind_tables = unwind_tables
        # --all: a file gets its unwind table when a sample first needs it
        # (its walks are deferred meanwhile), not because some process on the
        # machine maps it: the row array holds what is running.
        self._lazy_tables = lazy_tables
        self._files = FileImages()
        self.stats = stats
        stats.unreadable_files = self._files.unreadable

    def added(self, pid: int, mappings: list[KnownMapping]) -> None:
        """New mappings installed: their files attached now, or (lazily) opened only."""
        for mapping in mappings:
            if not self._lazy_tables or self.table_held(mapping):
                self.attach_file(pid, mapping)
            else:
                self.open_image(pid, mapping)

    def prune_images(self, held: set[int]) -> None:
        """Close the images no mapping holds (by id), unless a table build may still read it."""
        tables = self._unwind_tables
        self._files.prune(held, lambda image: tables is not None and tables.holds(image.cache_key))

    def close(self) -> None:
        self._files.close()

    def install(self, pid: int, entry: MapEntry) -> KnownMapping:
        """In the trie at once: JIT memory walkable by frame pointers, a file
        deferring walks until _attach_file gives it its unwind table."""
        waits_for_table = self.waits_for_table(entry)
        kind = MAPPING_JIT if entry.is_anonymous_exec else MAPPING_ELF_PENDING if waits_for_table else MAPPING_ELF
        prefixes = split_range(pid, entry.start, entry.end)
        self.stats.trie_rejected += self._trie.add_prefixes(prefixes, kind, 0, 0)
        return KnownMapping(entry, prefixes, None, attached=not waits_for_table)

    def waits_for_table(self, entry: MapEntry) -> bool:
        """Does a walk through this mapping need its file's unwind table?"""
        return has_image(entry) and self._unwind_tables is not None

    def prepare_for_late_walks(self, pid: int, mapping: KnownMapping) -> None:
        """A file of a process gone (or of an exec replaced): rows for the walks
        still waiting, without trie entries or a table slot (the rows are built
        and kept in memory, then released at once)."""
        image = mapping.image or self.open_image(pid, mapping)
        if image is not None and self._unwind_tables is not None:
            self._unwind_tables.release(self._unwind_tables.acquire(image))
        mapping.attached = True

    def open_image(self, pid: int, mapping: KnownMapping) -> ElfImage | None:
        """The mapped file (symbols, load bias), opened while the process is
        alive: its /proc/PID/map_files entry goes with it."""
        entry = mapping.entry
        if not has_image(entry):
            return None
        image = self._files.image_for(pid, entry)
        if image is not None:
            mapping.image = image
            vaddr = image.vaddr_for_mapping(entry.offset, entry.end - entry.start)
            mapping.load_bias = entry.start - vaddr if vaddr is not None else 0
        return image

    def table_held(self, mapping: KnownMapping) -> bool:
        """Is the file's table in the row array already (another process maps it)?"""
        entry = mapping.entry
        if entry.path == VDSO:
            return True  # small, and in every process
        image = mapping.image or self._files.known(entry)
        return image is not None and self._unwind_tables is not None and self._unwind_tables.holds(image.cache_key)

    def attach_file(self, pid: int, mapping: KnownMapping) -> None:
        """Open the mapped ELF file (slow for a large binary) and give the
        mapping its load bias and unwind table."""
        if not has_image(mapping.entry):
            return
        image = self.open_image(pid, mapping)
        if self._unwind_tables is None:
            return  # frame pointers only: the trie entry needs nothing more
        if image is not None:
            mapping.table_id = self._unwind_tables.acquire(image)
        # Unreadable: frame-pointer steps, no longer deferred.
        self._trie.add_prefixes(mapping.prefixes, MAPPING_ELF, mapping.load_bias, mapping.table_id)
        mapping.attached = True

    def remove(self, mapping: KnownMapping, keep: set[TriePrefix] | None = None) -> None:
        self._trie.remove_prefixes([prefix for prefix in mapping.prefixes if keep is None or prefix not in keep])
        if self._unwind_tables is not None:
            self._unwind_tables.release(mapping.table_id)
        mapping.table_id = 0

    def uninstall(self, space: AddressSpace) -> None:
        for mapping in space.current.values():
            self.remove(mapping)
            space.retired.append(mapping)
        space.current.clear()
        space.revision += 1
