"""Executable mappings of followed processes, exec by exec: brought in line
with /proc/PID/maps (the installer puts them in the BPF trie, with their
files and unwind tables) and remembered, so samples resolve after munmap,
exec or exit: the lookups of the symbolizer and late walks, by sample time.
"""

from __future__ import annotations

import threading
import time

from profiler.kernel.address_spaces import (  # (the records are imported from here too)
    AddressSpace,
    KnownMapping,
    MappingLookup,
    SpaceView,
    TrackerStats,
    TrieSink,
    UnwindSource,
)
from profiler.kernel.mapping_installer import MappingInstaller
from profiler.kernel.procmaps import MapEntry, read_maps
from profiler.kernel.trie import TriePrefix

MAX_PROVISIONAL_RANGES = 4096  # per exec of a process
PRUNE_IMAGES_S = 5.0


class MappingTracker:
    """Main thread updates; the symbolizer thread looks up (under the lock)."""

    def __init__(self, trie: TrieSink, unwind_tables: UnwindSource | None = None, lazy_tables: bool = False) -> None:
        self._trie = trie  # the maps-read handshake; the installer writes its entries
        self.stats = TrackerStats()
        self._installer = MappingInstaller(trie, unwind_tables, lazy_tables, self.stats)
        self._wanted: dict[int, tuple[int, KnownMapping]] = {}
        # pid -> the exec count its maps were read at, the kernel's walks not
        # yet told to trust them (see refresh's hold_walks)
        self._held_walks: dict[int, int] = {}
        self._lock = threading.Lock()
        self._spaces: dict[int, list[AddressSpace]] = {}
        self._exited: set[int] = set()
        self._next_prune = 0.0

    # Updates (main thread) -------------------------------------------------

    def add_process(self, pid: int, parent: int | None = None, read_maps_now: bool = True, hold_walks: bool = False) -> None:
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
            self.refresh(pid, hold_walks=hold_walks)

    def process_exec(self, pid: int, now_ns: int, exec_count: int, hold_walks: bool = False) -> bool:
        """A new program image (the kernel's exec_count-th since followed):
        drop the old trie entries, start a new space; or date the space a
        refresh already opened for it (its maps read before this event came),
        and return True."""
        with self._lock:
            spaces = self._spaces.setdefault(pid, [])
            last = spaces[-1] if spaces else None
            if last is not None and not last.dated and exec_count <= last.exec_count:
                known = exec_count == last.exec_count
                if known:
                    last.started_ns, last.dated = now_ns, True
                else:  # an exec before the one whose maps were read: nothing known of it
                    spaces.insert(len(spaces) - 1, AddressSpace(pid, len(spaces), now_ns, exec_count=exec_count))
                for space in spaces:
                    space.revision += 1  # a sample time may fall in another space now
            else:
                known = False
                if last is not None:
                    self._installer.uninstall(last)
                spaces.append(AddressSpace(pid, len(spaces), now_ns, exec_count=exec_count))
        self.refresh(pid, hold_walks=hold_walks)
        return known

    def process_exit(self, pid: int) -> None:
        """Trie entries go; what is needed to symbolise its samples stays."""
        with self._lock:
            self._exited.add(pid)
            self._held_walks.pop(pid, None)
            for space in self._spaces.get(pid, []):
                self._installer.uninstall(space)

    def forget(self, pid: int) -> None:
        """An exited process none of whose samples wait any more: its state
        goes, and (every PRUNE_IMAGES_S) the files no process maps any more
        are closed, their symbols with them: a run of days with programs
        coming and going keeps what is running, not all it ever saw."""
        with self._lock:
            if pid in self._exited:
                self._exited.discard(pid)
                self._spaces.pop(pid, None)
                self._held_walks.pop(pid, None)
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
        self._installer.prune_images(held)

    def refresh(self, pid: int, provisional: list[TriePrefix] | None = None, hold_walks: bool = False) -> list[MapEntry]:
        """Bring pid's trie entries in line with /proc/PID/maps; provisional
        prefixes the BPF program added for new executable memory go. Then the
        kernel's walks trust the entries, unless pid exec'd meanwhile (its
        exec count, read before the maps, tells), or hold_walks: until
        release_walks, its samples still carry their stacks (for a runtime's
        frames the kernel cannot record yet), while its code is known at once,
        even if it exits before then. Returns the executable mappings read."""
        exec_count = self._trie.begin_maps_read(pid)
        read_ns = time.monotonic_ns()
        entries = read_maps(pid, executable_only=True)
        with self._lock:
            spaces = self._spaces.get(pid)
            if not spaces or not entries:
                return entries
            space = spaces[-1]
            if exec_count is not None and exec_count > space.exec_count:
                # Read after an exec whose event is still on its way (a fork
                # event read late): the maps are that exec's. A process that
                # exits before the event is read keeps its code known.
                self._installer.uninstall(space)
                space = AddressSpace(pid, len(spaces), read_ns, exec_count=exec_count, dated=False)
                spaces.append(space)
            space.maps_read_ns = max(space.maps_read_ns, read_ns)
            if pid in self._exited:
                self._note_exiting_maps(pid, space, entries)
                return entries
            seen = {(entry.start, entry.end): entry for entry in entries}
            gone = [key for key, mapping in space.current.items() if seen.get(key) != mapping.entry]
            removed = [space.current.pop(key) for key in gone]
            # New entries first: a file whose mapping only changed shape keeps
            # its unwind table live, and shared trie blocks are not dropped.
            added = []
            for key, entry in seen.items():
                if key not in space.current:
                    space.current[key] = self._installer.install(pid, entry)
                    added.append(space.current[key])
            self._installer.added(pid, added)
            if added or removed:
                space.revision += 1
            if removed or provisional:
                in_use = {prefix for mapping in space.current.values() for prefix in mapping.prefixes}
                for mapping in removed:
                    self._installer.remove(mapping, keep=in_use)
                    space.retired.append(mapping)
                    if not mapping.entry.is_anonymous_exec:
                        space.files_replaced += 1
                self._trie.remove_prefixes([prefix for prefix in provisional or [] if prefix not in in_use])
            if exec_count is None or pid in self._exited:
                return entries
            if hold_walks:
                self._held_walks[pid] = exec_count
                return entries
            self._held_walks.pop(pid, None)
            self._trie.mark_maps_read(pid, exec_count)
        return entries

    def exec_unread(self, pid: int) -> bool:
        """Has pid exec'd since the exec its newest space is of (the event on its way)?"""
        exec_count = self._trie.exec_count(pid)
        with self._lock:
            spaces = self._spaces.get(pid)
            if not spaces or not isinstance(exec_count, int):
                return False
            return exec_count > spaces[-1].exec_count

    def release_walks(self, pid: int) -> None:
        """The kernel may walk pid's stacks with the maps a held refresh read."""
        with self._lock:
            exec_count = self._held_walks.pop(pid, None)
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
            mapping = KnownMapping(entry, [], None, attached=not self._installer.waits_for_table(entry))
            self._installer.open_image(pid, mapping)  # (None for JIT memory)
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

    def refresh_all(self, only: set[int] | None = None) -> None:
        """Read again the maps of every live process followed, or of those in only."""
        with self._lock:
            pids = [pid for pid in self._spaces if pid not in self._exited and (only is None or pid in only)]
        for pid in pids:
            self.refresh(pid)

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
                    self._installer.attach_file(pid, mapping)
                    spaces[-1].revision += 1
                else:
                    self._installer.prepare_for_late_walks(pid, mapping)

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

    def space_state(self, pid: int, time_ns: int) -> tuple[tuple[int, int], int]:
        """((generation, files replaced), revision) of pid's exec running at a
        sample time: while the first stays the same, a file's address names
        the same code (a library closed and another opened in its place
        changes it); while both do, its addresses resolve to the same mappings."""
        with self._lock:
            space = self._space_at(pid, time_ns)
            return ((space.generation, space.files_replaced), space.revision) if space is not None else ((0, 0), 0)

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
            self._installer.close()
