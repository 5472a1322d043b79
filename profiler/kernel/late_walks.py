"""Walks the kernel could not finish, finished in user space.

When a sample reaches code jitprof does not know yet (a process whose maps
are not read since its exec, a file whose unwind table is still being built,
executable memory just mapped), the BPF walker sends the frames it walked,
the registers to resume from and a copy of the stack above them. Once the
process's mappings and tables are known, the native walker (native/walk.c)
goes on over the copy with the kernel's rules and the same rows. A sample is
never dropped for being early: when the run cannot wait any longer, it is
finished with what is known (frame-pointer steps where a table is missing).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from profiler.kernel.address_spaces import KnownMapping
from profiler.kernel.events import MAX_STACK_FRAMES, RawSample, StackCopy, V8FrameSlots, WalkEnd
from profiler.kernel.mappings import MappingTracker
from profiler.native import library
from profiler.native.unwind_tables import RowsState, TableRows

MAX_WAITED_FOR = 4096  # files remembered as waited for (a run's end waits for their builds)


class RowSource(Protocol):
    def rows_for_walk(self, cache_key: str) -> TableRows: ...

    def building(self, cache_keys: set[str] | None = None) -> bool: ...


@dataclass(frozen=True)
class WalkedFrame:
    """A frame the walk in user space found: where its words may be read."""

    index: int  # in the sample's addresses
    pc: int
    fp: int
    in_jit_code: bool  # anonymous executable memory


class FrameRecorder(Protocol):
    def record_walked_frames(self, pid: int, frames: list[WalkedFrame], stack: StackCopy) -> tuple[V8FrameSlots, ...]:
        """What the kernel would have sent of these frames, read from the copy
        (and the live process): the runtime's frame records."""
        ...


@dataclass
class LateWalkStats:
    """How the walks finished in user space went."""

    finished: int = 0
    waited: int = 0  # tries that found the process or a table not known yet
    copy_bytes: int = 0
    ends: Counter[WalkEnd] = field(default_factory=Counter)


class LateWalks:
    """Called from the symbolizer thread; the tracker and the row source lock."""

    def __init__(self, tracker: MappingTracker, tables: RowSource | None) -> None:
        self._tracker = tracker
        self._tables = tables  # None: frame pointers only (--no-dwarf)
        self._waited_for: set[str] = set()  # files whose tables a walk waited for
        self.stats = LateWalkStats()
        self.recorder: FrameRecorder | None = None  # the runtimes' frame records, for frames walked here

    def finish(self, sample: RawSample, final: bool) -> RawSample | None:
        """The sample with its walk finished, or None when what it needs is not
        known yet and the caller may ask again (never when final)."""
        copy = sample.stack_copy
        if copy is None:
            return sample
        view = self._tracker.space_view(sample.pid, sample.time_ns)
        may_wait = not final and (view is None or not view.settled)
        if may_wait and (view is None or not view.maps_read_ns):
            self.stats.waited += 1
            return None
        mappings = [self._walk_mapping(mapping, final) for mapping in view.mappings] if view is not None else []
        result = library.walk_copy(
            mappings,
            library.WalkStack(copy.data, copy.address, copy.reached_end, copy.holes),
            library.WalkRegisters(copy.pc, copy.sp, copy.fp, copy.exact_pc, copy.rbx),
            MAX_STACK_FRAMES - len(sample.addresses),
        )
        # Code mapped just before the sample is in the maps read after it.
        newer_maps_due = result.end == WalkEnd.NO_MAPPING and view is not None and view.maps_read_ns < sample.time_ns
        if result.end == library.WALK_PENDING or (may_wait and newer_maps_due):
            if result.pending_address is not None and view is not None:
                self._want_table_at(view.pid, view.mappings, result.pending_address)
                self._note_waited_for(view.mappings, result.pending_address)
            self.stats.waited += 1
            return None
        end = WalkEnd(result.end)
        self.stats.finished += 1
        self.stats.copy_bytes += len(copy.data)
        self.stats.ends[end] += 1
        records = sample.v8_frames
        if self.recorder is not None and view is not None and result.frames:
            jit_ranges = _jit_ranges(view.mappings)
            walked = [
                WalkedFrame(len(sample.addresses) + index, pc, fp, _in_ranges(jit_ranges, pc if index == 0 else pc - 1))
                for index, (pc, fp) in enumerate(zip(result.frames, result.frame_pointers, strict=False))
            ]
            records = records + self.recorder.record_walked_frames(sample.pid, walked, copy)
        return dataclasses.replace(
            sample,
            addresses=sample.addresses + result.frames,
            walk_end=end,
            stack_copy=None,
            v8_frames=records,
            caller_words=b"",
        )

    def tables_building(self) -> bool:
        """Are tables that walks waited for still being built (those walks
        may yet finish whole)? Other files' builds (--all: many) do not count."""
        return self._tables is not None and bool(self._waited_for) and self._tables.building(self._waited_for)

    def _want_table_at(self, pid: int, mappings: list[KnownMapping], address: int) -> None:
        """The walk waits for the file at address (a return address: the call is
        the byte before): have its table attached, if it is not yet (--all
        attaches tables only when a walk needs them)."""
        for mapping in mappings:
            if not mapping.attached and any(mapping.entry.start <= at < mapping.entry.end for at in (address, address - 1)):
                self._tracker.want_table(pid, mapping)
                return

    def _note_waited_for(self, mappings: list[KnownMapping], address: int) -> None:
        """The walk stopped at address for its file's table: the run's end waits for that build."""
        for mapping in mappings:
            if mapping.image is not None and any(mapping.entry.start <= at < mapping.entry.end for at in (address, address - 1)):
                if len(self._waited_for) < MAX_WAITED_FOR:
                    self._waited_for.add(mapping.image.cache_key)
                return

    def _walk_mapping(self, mapping: KnownMapping, final: bool) -> library.WalkMapping:
        entry = mapping.entry
        if entry.is_anonymous_exec:
            return library.WalkMapping(entry.start, entry.end, 0, library.MAPPING_JIT)
        if not mapping.attached and not final:
            return library.WalkMapping(entry.start, entry.end, 0, library.MAPPING_PENDING)
        rows = b""
        if self._tables is not None and mapping.image is not None:
            table = self._tables.rows_for_walk(mapping.image.cache_key)
            if table.state is RowsState.PENDING and not final:
                return library.WalkMapping(entry.start, entry.end, 0, library.MAPPING_PENDING)
            rows = table.packed
        return library.WalkMapping(entry.start, entry.end, mapping.load_bias, library.MAPPING_ELF, rows)


def _jit_ranges(mappings: list[KnownMapping]) -> list[tuple[int, int]]:
    """The JIT mappings' ranges, found once per walk: a deep stack's frames
    each asked every mapping (a process's dozens) for its kind."""
    return [(mapping.entry.start, mapping.entry.end) for mapping in mappings if mapping.entry.is_anonymous_exec]


def _in_ranges(ranges: list[tuple[int, int]], address: int) -> bool:
    return any(start <= address < end for start, end in ranges)
