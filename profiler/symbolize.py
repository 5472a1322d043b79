"""The symbolizer thread: raw samples in, samples of named frames out.

Each unique (address space, address) is resolved once and memoised; the
symbol sources are pluggable so perf maps, jitdump and V8 logs can join the
ELF source, and a blazesym backend can replace it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from profiler.elf import UnreadableElf
from profiler.events import RawSample
from profiler.mappings import KnownMapping, MappingTracker
from profiler.profile import Frame, FrameKind, Profile, Sample

KERNEL_SUFFIX_MODULE = "[kernel]"
V8_EMBEDDED_BUILTIN = "Builtins_"


class SymbolSource(Protocol):
    """Names the code at an address of a mapping, or says it cannot."""

    def resolve(self, pid: int, mapping: KnownMapping, address: int) -> Frame | None: ...


class JitExpander(Protocol):
    """Names JIT code as one or more source frames (inlined functions), outermost first."""

    def expand(self, pid: int, time_ns: int, address: int) -> tuple[Frame, ...] | None: ...


class ElfSymbols:
    """Function names from the mapped file's .symtab/.dynsym."""

    def resolve(self, pid: int, mapping: KnownMapping, address: int) -> Frame | None:
        image = mapping.image
        if image is None:
            return None
        vaddr = image.vaddr_for_file_offset(address - mapping.entry.start + mapping.entry.offset)
        if vaddr is None:
            return None
        try:
            hit = image.symbols().lookup(vaddr)
        except (UnreadableElf, OSError):
            return None
        if hit is None:
            return None
        if hit.name.startswith(V8_EMBEDDED_BUILTIN):  # V8 builtins in node's own text
            return Frame(f"[builtin] {hit.name[len(V8_EMBEDDED_BUILTIN):]}", mapping.module_name, FrameKind.NATIVE, tier="builtin")
        return Frame(hit.name, mapping.module_name, FrameKind.NATIVE)


@dataclass(frozen=True)
class _MemoKey:
    pid: int
    generation: int
    address: int


class Symbolizer:
    """Runs on its own thread; the main thread only submits."""

    def __init__(
        self,
        profile: Profile,
        tracker: MappingTracker,
        kernel_stack: Callable[[int], list[int]] | None = None,
        kernel_symbol: Callable[[int], str] | None = None,
    ) -> None:
        self._profile = profile
        self._tracker = tracker
        self._kernel_stack = kernel_stack
        self._kernel_symbol = kernel_symbol
        self.sources: list[SymbolSource] = [ElfSymbols()]
        self.jit_expanders: list[JitExpander] = []
        self._memo: dict[_MemoKey, int] = {}
        self._kernel_memo: dict[int, int] = {}
        self._queue: queue.Queue[RawSample | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="jitprof-symbolizer", daemon=True)
        self.errors: list[str] = []

    def start(self) -> None:
        self._thread.start()

    def submit(self, sample: RawSample) -> None:
        self._queue.put(sample)

    def backlog(self) -> int:
        return self._queue.qsize()

    def finish(self) -> None:
        """Resolve everything submitted, then stop the thread."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while True:
            raw = self._queue.get()
            if raw is None:
                return
            try:
                self._profile.add(self.resolve_sample(raw))
            except Exception as error:  # a bug here must not lose the run
                self.errors.append(f"{type(error).__name__}: {error}")

    def resolve_sample(self, raw: RawSample) -> Sample:
        user_ids: list[int] = []
        for depth, address in enumerate(raw.addresses):  # leaf first
            user_ids.extend(reversed(self._resolve_user(raw.pid, raw.time_ns, address, caller=depth > 0)))
        user_ids.reverse()  # root first
        kernel_ids: list[int] = []
        if raw.kernel_stack_id >= 0 and self._kernel_stack is not None:
            kernel_ids = [self._resolve_kernel(address) for address in self._kernel_stack(raw.kernel_stack_id)]
            kernel_ids.reverse()
        return Sample(raw.time_ns, raw.pid, raw.tid, raw.comm, tuple(user_ids + kernel_ids), raw.walk_end)

    def _resolve_user(self, pid: int, time_ns: int, address: int, caller: bool) -> list[int]:
        """The frame ids at one return address, outermost first (more than
        one where JIT code inlined functions)."""
        # A caller's address is a return address: the call is the byte before.
        lookup_address = address - 1 if caller else address
        # The memo comes first: a native frame seen before costs no mapping search.
        key = _MemoKey(pid, self._tracker.generation_at(pid, time_ns), lookup_address)
        frame_id = self._memo.get(key)
        if frame_id is not None:
            return [frame_id]
        mapping = self._tracker.find(pid, time_ns, lookup_address).mapping
        if mapping is not None and mapping.entry.is_anonymous_exec:
            # JIT code: addresses are reused, so no memo here; the JIT
            # sources memoise per code object instead.
            for expander in self.jit_expanders:
                frames = expander.expand(pid, time_ns, lookup_address)
                if frames:
                    return [self._profile.intern(frame) for frame in frames]
            return [self._profile.intern(self._name(pid, mapping, lookup_address))]
        frame = self._name(pid, mapping, lookup_address)
        if caller and not frame.symbolized and mapping is not None:
            # A signal trampoline is "returned" to at its first byte: the
            # byte before belongs to no function.
            frame = self._name(pid, mapping, address)
        frame_id = self._profile.intern(frame)
        if mapping is not None:  # no mapping yet may only mean its maps are not read yet
            self._memo[key] = frame_id
        return [frame_id]

    def _name(self, pid: int, mapping: KnownMapping | None, address: int) -> Frame:
        if mapping is None:
            return Frame("[unknown]", "", FrameKind.UNKNOWN)
        for source in self.sources:
            frame = source.resolve(pid, mapping, address)
            if frame is not None:
                return frame
        return Frame(f"[unknown] ({mapping.module_name})", mapping.module_name, FrameKind.UNKNOWN)

    def _resolve_kernel(self, address: int) -> int:
        frame_id = self._kernel_memo.get(address)
        if frame_id is None:
            name = self._kernel_symbol(address) if self._kernel_symbol else ""
            if not name or name == "[unknown]":
                frame = Frame("[unknown]", KERNEL_SUFFIX_MODULE, FrameKind.UNKNOWN)
            else:
                frame = Frame(name, KERNEL_SUFFIX_MODULE, FrameKind.KERNEL)
            frame_id = self._profile.intern(frame)
            self._kernel_memo[address] = frame_id
        return frame_id
