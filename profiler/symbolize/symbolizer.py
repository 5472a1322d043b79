"""The symbolizer thread: raw samples in, samples of named frames out.

Each unique (address space, address) is resolved once and memoised; the
symbol sources are pluggable so perf maps, jitdump and V8 logs can join the
ELF source, and a blazesym backend can replace it.

Runtimes describe JIT code after it starts running (a perf map line is
written after the code is installed, a jitdump can sit in a 2 MiB stdio
buffer, the JVM writes its map when asked), so a sample with JIT code nobody
can name yet is parked and retried, until it is named, PARK_MAX_S passes (or,
for a jitdump, records newer than the sample arrive), or the run ends and
every source has been read to its end.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from profiler.jit import registry
from profiler.jit.sources import JitSources
from profiler.jit.symbol_source import CodeLifetime, JitSymbolSource, RecordedFrames
from profiler.kernel.address_spaces import KnownMapping
from profiler.kernel.events import RawSample, V8FrameSlots, WalkEnd
from profiler.kernel.late_walks import LateWalks
from profiler.kernel.mappings import MappingTracker
from profiler.model.profile import MAX_SAMPLE_FRAMES, Frame, FrameKind, ModuleFile, Profile, Sample
from profiler.native.blazesym import NativeSymbol, SourcePlace
from profiler.native.demangle import PLT_SUFFIX
from profiler.native.elf import ElfImage, UnreadableElf
from profiler.native.located_names import LocatedNames
from profiler.native.locator_process import CodeLocator
from profiler.symbolize.waits import WaitRecorder, is_wait_record, needs_stack
from profiler.symbolize.work_charges import WorkCharges

KERNEL_SUFFIX_MODULE = "[kernel]"
FINAL_TABLES_WAIT_S = 2.0  # at the end, how long walks wait for unwind tables still being built
FINAL_TABLES_POLL_S = 0.02
PARK_MAX_S = 3.0  # a JIT frame still unnamed after this is shown as unknown
PARK_RETRY_S = 0.2
MAX_PARKED = 200_000  # beyond this, samples are resolved at once, named or not
HOLD_CHECK_S = 0.05  # how often held samples ask whether they may wait still


MAX_STACKS = 20_000  # stacks' callers remembered (see resolve_sample): a few MiB
EPOCHS_REUSE_S = 0.01  # as often as the JIT sources read what their processes write
MAX_MEMO = 1_000_000  # named addresses remembered
MAX_JIT_SEEN = 200_000  # addresses found in JIT code, not looked up again for the names asked ahead
MAX_JIT_KEPT = 200_000  # JIT addresses whose frames are kept with what says when they hold
MAX_INTERNED_TUPLES = 20_000  # JIT sources' frame tuples whose ids are kept
MAX_FUNCTION_LINES = 100_000
MAX_NAMED_AHEAD = 65_536  # addresses named ahead and not yet taken (a stack that never came back)
MAX_BUILD_IDS = 1 << 16  # modules remembered with their build-id
MAX_HELD_ADDRESSES = 1 << 18  # addresses of a process whose samples wait, named ahead once each


class SampleLabels(Protocol):
    """Each sample's labels (profiler/labels/label_sources.py)."""

    def label_id(self, pid: int, record: bytes, kind: int = 0) -> int: ...

    def look_again(self, pid: int) -> None: ...

    def note_sample(self, pid: int, record: bytes, kind: int) -> None: ...


class _NotNamedYet(Exception):
    """A JIT frame no source names yet: the sample waits (see the module doc)."""


@dataclass(frozen=True)
class _Retire:
    """After the samples before it: finish the process's waiting samples, then forget it."""

    pid: int
    forget: Callable[[], None]


@dataclass(frozen=True)
class _Call:
    """After the samples before it: call this on the symbolizer thread."""

    action: Callable[[], None]


@dataclass
class _Parked:
    """A sample waiting for its process's code to be known."""

    raw: RawSample
    since: float  # time.monotonic() when first tried


class ElfSymbols:
    """Native code's functions, from the mapped file: a file with DWARF (or a
    debug file) through blazesym, with source lines and the functions the
    compiler inlined; a file without, and what blazesym cannot name, from the
    file's .symtab/.dynsym."""

    def __init__(self, profile: Profile | None = None, locator: CodeLocator | None = None, expand_inlining: bool = True) -> None:
        self._profile = profile  # told which files had unnamed functions
        self._locator = locator
        self._expand_inlining = expand_inlining  # else inlined code counts in its caller, at the call
        self._function_lines: dict[tuple[str, int], int] = {}
        # Addresses named ahead in one request per file (a new stack's frames),
        # taken by resolve_chain: the helper's round trip, not blazesym, is
        # most of what naming one address costs.
        self._named_ahead: dict[tuple[str, int], NativeSymbol | None] = {}
        self._located = LocatedNames()  # what the helper said, in this run and earlier ones
        self.requests = 0  # to blazesym's helper
        self._tables_read: set[str] = set()  # files whose symbol tables were had ahead

    def name_ahead(self, wanted: list[tuple[KnownMapping, int]], even_one: bool = False) -> None:
        """Name these (mapping, address) pairs now, one request per file for
        their functions and one for the lines those functions begin on
        (even_one: also for a file with one address)."""
        if self._locator is None:
            return
        by_image: dict[int, tuple[ElfImage, list[int]]] = {}
        for mapping, address in wanted:
            image = mapping.image
            if image is None or not image.has_dwarf():
                continue  # its symbol table names it, here
            vaddr = image.vaddr_for_file_offset(address - mapping.entry.start + mapping.entry.offset)
            if vaddr is not None and self._by_blazesym(image, vaddr) and (image.cache_key, vaddr) not in self._named_ahead:
                by_image.setdefault(id(image), (image, []))[1].append(vaddr)
        if len(self._named_ahead) >= MAX_NAMED_AHEAD:
            self._named_ahead.clear()
        for image, vaddrs in by_image.values():
            if len(vaddrs) < 2 and not even_one:
                continue  # asked when it is named, as it would be
            located = self._locate(image, sorted(set(vaddrs)))
            if located is None:
                continue
            starts = set()
            for vaddr, symbol in located.items():
                self._named_ahead[(image.cache_key, vaddr)] = symbol
                if symbol is not None and (image.cache_key, symbol.start) not in self._function_lines:
                    starts.add(symbol.start)
            for start, symbol in (self._locate(image, sorted(starts)) or {}).items() if starts else ():
                self._keep_function_line(image, start, symbol)

    def read_symbol_tables(self, wanted: list[tuple[KnownMapping, int]]) -> None:
        """Have now the symbol tables that will name these addresses (those
        of files without DWARF): node's is read in 0.4 s, or loaded from what
        an earlier run kept in 0.07 s."""
        for mapping, _address in wanted:
            image = mapping.image
            if image is None or image.cache_key in self._tables_read or image.has_dwarf():
                continue
            self._tables_read.add(image.cache_key)
            try:
                image.symbols()
            except (UnreadableElf, OSError):
                continue  # named as it can be, later

    @staticmethod
    def _by_blazesym(image: ElfImage, vaddr: int) -> bool:
        """(A file with DWARF.) Is the address named by blazesym, not by the file's symbol table here?"""
        return image.dwarf_covers(vaddr) or not image.symbols_at_hand()

    def _locate(self, image: ElfImage, vaddrs: list[int]) -> dict[int, NativeSymbol | None] | None:
        """blazesym's names for these addresses: as an earlier run was told
        them, else asked now; None when the file cannot be read by it."""
        assert self._locator is not None
        handle = image.debug_handle() or image.handle  # first: the debug file is part of the key
        key = image.names_key()
        known = self._located.known(key)
        missing = sorted({vaddr for vaddr in vaddrs if vaddr not in known})
        asked: dict[int, NativeSymbol | None] = {}
        if missing:
            self.requests += 1
            try:
                asked = dict(zip(missing, self._locator.locate(handle, missing, image.path), strict=True))
            except (OSError, ValueError):
                return None
            self._located.add(key, asked)
        return {vaddr: asked[vaddr] if vaddr in asked else known[vaddr] for vaddr in vaddrs}

    def resolve_chain(self, pid: int, mapping: KnownMapping, address: int) -> list[Frame] | None:
        """The frames at an address, outermost first: the function, then what
        was inlined into it there."""
        image = mapping.image
        if image is None:
            return None
        vaddr = image.vaddr_for_file_offset(address - mapping.entry.start + mapping.entry.offset)
        if vaddr is None:
            return None
        if self._profile is not None and image.build_id and mapping.module_name not in self._profile.build_ids:
            if len(self._profile.build_ids) < MAX_BUILD_IDS:
                self._profile.build_ids[mapping.module_name] = image.build_id
        linkage = image.linkage().lookup(vaddr)
        if linkage is not None and linkage.name.endswith(PLT_SUFFIX):
            return [Frame(linkage.name, mapping.module_name, FrameKind.NATIVE)]
        # A file without DWARF is named by its symbol table, here, as blazesym
        # would name it (but for which of a folded function's names): its
        # helper's round trip per address cost a compiling JVM 0.2 ms a frame.
        # So is an address its DWARF does not describe (node's, but libuv's),
        # once the file's symbol table is at hand.
        if self._locator is not None and image.has_dwarf() and self._by_blazesym(image, vaddr):
            key = (image.cache_key, vaddr)
            if key in self._named_ahead:
                located = self._named_ahead.pop(key)
            else:
                located = (self._locate(image, [vaddr]) or {}).get(vaddr)
            if located is not None and located.name:
                frames = _located_frames(located, mapping.module_name)
                frames[0] = dataclasses.replace(frames[0], function_line=self._function_line(image, located.start))
                return frames if self._expand_inlining else frames[:1]
        if linkage is not None:  # a stripped program's entry point
            return [Frame(linkage.name, mapping.module_name, FrameKind.NATIVE)]
        go_functions = image.go_functions()
        go_located = go_functions.locate(vaddr) if go_functions is not None else None
        if go_functions is not None and go_located is not None:
            frames = _located_frames(go_located, mapping.module_name)
            frames[0] = dataclasses.replace(frames[0], function_line=go_functions.function_line(go_located.start))
            return frames if self._expand_inlining else frames[:1]
        frame = self._from_symbol_table(image, vaddr, mapping)
        return [frame] if frame is not None else None

    def _function_line(self, image: ElfImage, start: int) -> int:
        """The line a function begins on: its first address's (for formats
        that show one line per function: speedscope, .cpuprofile)."""
        line = self._function_lines.get((image.cache_key, start))
        if line is None:
            line = self._keep_function_line(image, start, (self._locate(image, [start]) or {}).get(start))
        return line

    def _keep_function_line(self, image: ElfImage, start: int, located: NativeSymbol | None) -> int:
        line = located.place.line if located is not None and located.place is not None else 0
        if len(self._function_lines) >= MAX_FUNCTION_LINES:
            self._function_lines.clear()
        self._function_lines[(image.cache_key, start)] = line
        return line

    def resolve(self, pid: int, mapping: KnownMapping, address: int) -> Frame | None:
        frames = self.resolve_chain(pid, mapping, address)
        return frames[-1] if frames else None

    def _from_symbol_table(self, image: ElfImage, vaddr: int, mapping: KnownMapping) -> Frame | None:
        try:
            hit = image.symbols().lookup(vaddr)
        except (UnreadableElf, OSError):
            return None
        if hit is None:
            # No name: the function's start keeps it apart from its neighbours;
            # with no unwind tables to tell it (Bun's binary), the address
            # itself, so the frame can still be named later by build-id.
            start = image.function_start(vaddr)
            if start is None:
                start = vaddr
            # A symbol at the function's start (an assembly label without a
            # size, say) names it, as `jitprof report` would later.
            at_start = image.symbols().lookup(start)
            if at_start is not None:
                return Frame(at_start.name, mapping.module_name, FrameKind.NATIVE)
            if self._profile is not None and image.build_id and mapping.module_name not in self._profile.modules:
                self._profile.modules[mapping.module_name] = ModuleFile(image.path, image.build_id)
            return Frame(f"{mapping.module_name}+{start:#x}", mapping.module_name, FrameKind.UNKNOWN)
        return registry.native_symbol_frame(hit.name, mapping.module_name)

    def naming_failures(self) -> dict[str, str]:
        """Files blazesym could not read (its helper crashed, hung or refused), and why."""
        return dict(self._locator.failures) if self._locator is not None else {}

    def close(self) -> None:
        if self._locator is not None:
            self._located.save()
            self._locator.close()


def _located_frames(located: NativeSymbol, module: str) -> list[Frame]:
    """blazesym's answer as frames: each function at the line it is on
    (the call of the next one in, or the line executing)."""
    frames = [_at_place(registry.native_symbol_frame(located.name, module), located.place)]
    for call in located.inlined:
        frame = Frame(call.name or "[inlined]", module, FrameKind.NATIVE, inlined=True, function_line=call.start_line)
        frames.append(_at_place(frame, call.place))
    return frames


def _at_place(frame: Frame, place: SourcePlace | None) -> Frame:
    if place is None:
        return frame
    return dataclasses.replace(frame, file=place.file, line=place.line, column=place.column, line_exact=True)


class Symbolizer:
    """Runs on its own thread; the main thread only submits."""

    def __init__(
        self,
        profile: Profile,
        tracker: MappingTracker,
        kernel_stack: Callable[[int], list[int]] | None = None,
        kernel_symbol: Callable[[int], str] | None = None,
        late_walks: LateWalks | None = None,
        locator: CodeLocator | None = None,
        expand_inlining: bool = True,
    ) -> None:
        self._profile = profile
        self._tracker = tracker
        self._late_walks = late_walks  # finishes the walks the kernel deferred
        self._kernel_stack = kernel_stack
        self._kernel_symbol = kernel_symbol
        self.elf = ElfSymbols(profile, locator, expand_inlining)  # names native code, first
        # --off-cpu: wait records become samples there
        self.waits = WaitRecorder(profile, registry.waits_for_work) if profile.info.off_cpu else None
        self.work = WorkCharges(profile) if profile.info.off_cpu else None  # threadpool work charged to who queued it
        self.labels: SampleLabels | None = None  # each sample's labels, where processes publish them
        self.jit_sources: list[JitSymbolSource] = []
        # By process, so that a process's entries go with it: (era, address) -> frame ids, an era
        # the exec's generation and how many of its file mappings were replaced (space_state)
        self._memo: dict[int, dict[tuple[tuple[int, int], int], tuple[int, ...]]] = {}
        self._memo_entries = 0
        # By pid: (era, address) found in JIT code, which is never named
        # ahead (a compiling JVM's samples are mostly such frames, each looked
        # up twice more). An address mapped as a file since, in the same era,
        # is only named on its own, as before the batches.
        self._jit_seen: dict[int, set[tuple[tuple[int, int], int]]] = {}
        self._jit_seen_entries = 0
        # By pid: (address, caller) in JIT code -> (what says when its frames
        # hold, their ids). A compiling JVM's samples are mostly compiled
        # frames at a few thousand return addresses, each asked of every
        # JIT source in turn and its frames interned, sample after sample.
        self._jit_kept: dict[int, dict[tuple[int, bool], tuple[CodeLifetime, tuple[int, ...]]]] = {}
        self._jit_kept_entries = 0
        # id of a frame tuple a JIT source handed out -> (that tuple, its frame ids). The
        # sources keep one tuple per code and pc (a compiling JVM's 50 JIT frames a
        # sample), so its frames are interned once; holding it keeps its id unused.
        self._interned_tuples: dict[int, tuple[tuple[Frame, ...], tuple[int, ...]]] = {}
        self._asked_ahead: set[int] = set()  # ids of the batch's samples whose native frames were asked ahead
        # pid -> (era, the callers' words) -> (what was known then, the callers' frame ids)
        self._stacks: dict[int, dict[tuple[tuple[int, int], object], tuple[object, tuple[int, ...]]]] = {}
        self._stack_entries = 0
        self.stack_hits = 0
        # pid -> the JIT sources' epochs and latest news, while a batch is named (see _epochs)
        self._epoch_memo: dict[int, tuple[tuple[tuple[int, int], ...], int]] | None = None
        self._epochs_asked = 0.0
        self._kernel_memo: dict[int, int] = {}
        self._queue: queue.Queue[list[RawSample] | _Retire | _Call | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="jitprof-symbolizer", daemon=True)
        self._parked: list[_Parked] = []
        # May this process's samples be named once it has exited? (Its names
        # come from files that outlive it: naming them meanwhile takes the CPU
        # from the program; perf names after the program too.) Asked again
        # as its held samples wait: held until the answer turns False.
        self.hold: Callable[[int], bool] | None = None
        self._held: dict[int, list[RawSample]] = {}  # by pid, in order
        self._named_live: set[int] = set()  # pids whose samples carry labels read from the live process
        self._held_addresses: dict[int, set[tuple[tuple[int, int], int]]] = {}  # by pid: (era, address) named while held
        self._held_checked = 0.0
        self.errors: list[str] = []
        self.parked_then_named = 0
        self._abandoned = threading.Event()
        self._given_up = 0
        # Called with (pid, frames) for the frames each sample added to the profile's table.
        self.on_new_frames: Callable[[int, Sequence[Frame]], None] | None = None
        self._frames_noted = 0

    def add_jit_sources(self, jit: JitSources) -> None:
        """The JIT sources of a run, in the order they are asked."""
        for source in jit.symbol_sources():
            self.add_jit_source(source)
        jit.on_sources_changed = self._jit_sources_changed

    def _jit_sources_changed(self, sources: list[JitSymbolSource]) -> None:
        """(A run's first process of a runtime brought its sources.) Replaced
        whole: a lookup under way goes on over the list it took."""
        self.jit_sources = sources

    def add_jit_source(self, source: JitSymbolSource) -> None:
        self.jit_sources.append(source)

    def start(self) -> None:
        self._thread.start()

    def note(self, sample: RawSample) -> None:
        """A sample as it comes up the ring buffer: the JIT sources start on
        what it needs (reading a process's memory before it changes)."""
        for source in self.jit_sources:
            source.note_sample(sample)
        if self.labels is not None and sample.thread_context:
            self.labels.note_sample(sample.pid, sample.thread_context, sample.context_kind)

    def submit(self, samples: list[RawSample]) -> None:
        """Samples in the order taken, each noted already, as one item: the
        thread wakes once for them."""
        self._queue.put(samples)

    def retire(self, pid: int, forget: Callable[[], None]) -> None:
        """pid exited a while ago: once the samples submitted so far are in,
        name what of it still waits as well as can be, then call forget (on
        this thread, so no source is closed under a lookup) and drop what is
        remembered of it."""
        self._queue.put(_Retire(pid, forget))

    def call_in_order(self, action: Callable[[], None]) -> None:
        """Call action on this thread once the samples submitted so far are in
        (parked ones may come later)."""
        self._queue.put(_Call(action))

    def forget_frame_ids(self) -> None:
        """(On this thread.) The profile's frame table was started anew: no
        id remembered may be used again."""
        self._memo.clear()
        self._memo_entries = 0
        self._jit_kept.clear()
        self._jit_kept_entries = 0
        self._stacks.clear()
        self._stack_entries = 0
        self._kernel_memo.clear()
        self._frames_noted = 0

    def backlog(self) -> int:
        """Samples submitted and not yet in the profile."""
        with self._queue.mutex:
            queued = sum(len(item) for item in self._queue.queue if isinstance(item, list))
        return queued + len(self._parked) + sum(len(samples) for samples in list(self._held.values()))

    def finish(self, budget_s: float | None = None, abandon: Callable[[], bool] = lambda: False) -> None:
        """Resolve everything submitted, then stop the thread: within budget_s,
        and at once when abandon() turns true (the user insisted). What is
        left then is given up and counted, so the outputs are still written."""
        self._queue.put(None)
        deadline = time.monotonic() + budget_s if budget_s is not None else None
        while self._thread.is_alive():
            self._thread.join(0.1)
            if abandon() or (deadline is not None and time.monotonic() > deadline):
                self._abandoned.set()
                self._thread.join(1.0)  # it stops between two samples
                break
        if not self._thread.is_alive():
            self.elf.close()  # what blazesym parsed goes; a thread still naming keeps it

    @property
    def given_up(self) -> int:
        """Samples not symbolised because the run could not wait for them."""
        return self._given_up

    def _run(self) -> None:
        next_retry = time.monotonic() + PARK_RETRY_S
        while True:
            try:
                raw = self._queue.get(timeout=PARK_RETRY_S if self._parked or self._held else None)
            except queue.Empty:
                pass  # nothing new: a chance to retry what is parked
            else:
                if self._abandoned.is_set():
                    self._give_up(raw)
                    return
                if raw is None:
                    held, self._held = self._held, {}
                    if not self._name_batch([sample for samples in held.values() for sample in samples]):
                        return
                    self._final_pass()
                    return
                if isinstance(raw, _Retire):
                    self._release_held(raw.pid)
                    self._retire(raw)
                elif isinstance(raw, _Call):
                    self._call(raw)
                elif not self._name_batch(self._held_back(raw)):
                    return
            now = time.monotonic()
            if self._held and now - self._held_checked >= HOLD_CHECK_S:
                self._held_checked = now
                self._release_held()
            if self._parked and now >= next_retry:
                next_retry = now + PARK_RETRY_S
                self._start_batch()
                self._retry_parked(now, final=False)
            self._epoch_memo = None

    def _name_batch(self, batch: list[RawSample]) -> bool:
        """Name a batch of samples; False when the run was abandoned meanwhile."""
        if not batch:
            return True
        self._start_batch()
        self._name_ahead(batch)
        for index, sample in enumerate(batch):
            if self._abandoned.is_set():
                self._give_up(batch[index:])
                return False
            self._add(sample, time.monotonic(), may_park=True)
        self._asked_ahead.clear()  # its ids may be others' once it is let go
        return True

    def _held_back(self, batch: list[RawSample]) -> list[RawSample]:
        """The batch's samples to name now; those that may wait are held."""
        if self.hold is None:
            return batch
        waiting: dict[int, bool] = {}
        now: list[RawSample] = []
        held_now: list[RawSample] = []
        for sample in batch:
            if sample.thread_context and sample.pid not in self._named_live:
                # Its labels are read from the live process (a span's name
                # and route): its samples are named while it runs, the held ones first.
                self._named_live.add(sample.pid)
                waiting[sample.pid] = False
                now.extend(self._held.pop(sample.pid, []))
            if sample.pid not in waiting:
                waiting[sample.pid] = sample.pid not in self._named_live and self._may_hold(sample.pid)
            if waiting[sample.pid]:
                held_now.append(self._walked_while_held(sample))
                self._held.setdefault(sample.pid, []).append(held_now[-1])
            else:
                now.append(sample)
        until_ns = time.monotonic_ns()
        for pid, held in waiting.items():
            if held:
                self._note_held(pid, until_ns)
        if held_now:
            self._name_native_while_held(held_now)
        return now

    def _walked_while_held(self, raw: RawSample) -> RawSample:
        """A sample whose walk the kernel left to user space, walked now if
        it can be (its frames are then named ahead with the rest)."""
        if raw.stack_copy is None or self._late_walks is None:
            return raw
        try:
            return self._finish_walk(raw, may_park=True)
        except _NotNamedYet:
            return raw  # its file's table is being built: walked when it is named
        except Exception as error:  # a bug here must not lose the run: walked when it is named
            self.errors.append(f"{type(error).__name__}: {error}")
            return raw

    def _name_native_while_held(self, samples: list[RawSample]) -> None:
        """The native frames of samples that wait, named as they come: what
        no earlier run named or kept (blazesym's helper started, DWARF read
        for new functions, a symbol table read) is done beside the program,
        not after it, where the command would wait for it. Each address once."""
        wanted = []
        for raw in samples:
            if not raw.addresses or raw.stack_copy is not None:
                continue  # its callers are known once its walk is finished
            era = self._tracker.space_state(raw.pid, raw.time_ns)[0]
            recorded = {record.frame_index for record in raw.v8_frames}
            wanted.extend(self._unknown_natives(raw, era, recorded, seen=self._held_addresses.setdefault(raw.pid, set())))
        if wanted:
            self.elf.name_ahead(wanted, even_one=True)
            self.elf.read_symbol_tables(wanted)

    def _note_held(self, pid: int, until_ns: int) -> None:
        """pid's samples taken by until_ns wait: what is read of it only as
        its samples are named is read now, while it lives."""
        if self.labels is not None:
            self.labels.look_again(pid)
        for source in self.jit_sources:
            try:
                source.samples_held(pid, until_ns)
            except Exception as error:  # a bug here must not lose the run
                self.errors.append(f"{type(error).__name__}: {error}")

    def _release_held(self, pid: int | None = None) -> None:
        """Name the held samples that may wait no longer (all of pid's)."""
        for held_pid in list(self._held):
            if held_pid == pid or not self._may_hold(held_pid):
                self._name_batch(self._held.pop(held_pid))

    def _may_hold(self, pid: int) -> bool:
        try:
            return self.hold is not None and self.hold(pid)
        except Exception as error:  # a bug here must not lose the run: its samples are named now
            self.errors.append(f"{type(error).__name__}: {error}")
            return False

    def _start_batch(self) -> None:
        """Samples named together ask the JIT sources once per process (_epochs)."""
        self._epoch_memo = {}
        self._epochs_asked = time.monotonic()

    def _retire(self, request: _Retire) -> None:
        waiting = [entry for entry in self._parked if entry.raw.pid == request.pid]
        self._parked = [entry for entry in self._parked if entry.raw.pid != request.pid]
        for entry in waiting:
            self._add(entry.raw, entry.since, may_park=False)
        try:
            request.forget()
        except Exception as error:  # a bug here must not lose the run
            self.errors.append(f"{type(error).__name__}: {error}")
        self._memo_entries -= len(self._memo.pop(request.pid, {}))
        self._jit_seen_entries -= len(self._jit_seen.pop(request.pid, set()))
        self._jit_kept_entries -= len(self._jit_kept.pop(request.pid, {}))
        self._stack_entries -= len(self._stacks.pop(request.pid, {}))
        self._named_live.discard(request.pid)
        self._held_addresses.pop(request.pid, None)

    def _call(self, request: _Call) -> None:
        try:
            request.action()
        except Exception as error:  # a bug here must not lose the run
            self.errors.append(f"{type(error).__name__}: {error}")

    def _give_up(self, current: list[RawSample] | _Retire | _Call | None) -> None:
        left: list[list[RawSample] | _Retire | _Call | None] = [current]
        while True:
            try:
                left.append(self._queue.get_nowait())
            except queue.Empty:
                break
        self._given_up += sum(len(raw) for raw in left if isinstance(raw, list)) + len(self._parked)
        self._given_up += sum(len(samples) for samples in self._held.values())
        self._parked = []
        self._held = {}

    def _add(self, raw: RawSample, since: float, may_park: bool) -> bool:
        """Resolve and record one sample; False when it was parked."""
        # A submitted work item is never parked: the work's samples, coming next, look for its chain.
        may_park = may_park and not raw.submits_work
        try:
            if raw.stack_copy is not None:
                raw = self._finish_walk(raw, may_park)
            if self.labels is not None:
                raw.labels = self.labels.label_id(raw.pid, raw.thread_context, raw.context_kind)
            work = self.work
            if work is not None and raw.submits_work:
                work.submitted(raw, self.resolve_sample(raw))
            elif work is not None and raw.work_started:
                work.started(raw)
            elif self.waits is not None and is_wait_record(raw):
                named = self.resolve_sample(raw, may_park) if needs_stack(raw) else None
                self.waits.add(raw, work.charged(raw, named) if work is not None and named is not None and raw.work else named)
            else:
                named = self.resolve_sample(raw, may_park)
                self._profile.add(work.charged(raw, named) if work is not None and raw.work else named)
            self._note_new_frames(raw.pid)
        except _NotNamedYet:
            self._parked.append(_Parked(raw, since))
            return False
        except Exception as error:  # a bug here must not lose the run
            self.errors.append(f"{type(error).__name__}: {error}")
            self._given_up += 1  # counted as lost, never dropped unseen
        return True

    def _note_new_frames(self, pid: int) -> None:
        """Frames interned since the last sample go to whoever follows them (source maps)."""
        frames = self._profile.frames
        if self.on_new_frames is not None and len(frames) > self._frames_noted:
            self.on_new_frames(pid, frames[self._frames_noted :])
        self._frames_noted = len(frames)

    def _retry_parked(self, now: float, final: bool) -> None:
        parked, self._parked = self._parked, []
        for index, entry in enumerate(parked):
            if self._abandoned.is_set():
                self._given_up += len(parked) - index
                return
            may_park = not final and (
                now - entry.since < PARK_MAX_S
                or any(source.waiting_for(entry.raw.pid, entry.raw.time_ns) for source in self.jit_sources)
            )
            if self._add(entry.raw, entry.since, may_park) and may_park:
                self.parked_then_named += 1  # named while it could still have waited

    def _final_pass(self) -> None:
        """The run is over and the runtimes have flushed: read every source
        to its end, then name what waited, or give up on it. Walks waiting
        for a file's unwind table wait for the builds under way, a while: a
        short program's first samples (the loader's, whose code has no frame
        pointers) were walked without it at a cold start on a slow CPU."""
        for source in self.jit_sources:
            try:
                source.read_all()
            except Exception as error:  # a bug here must not lose the run
                self.errors.append(f"{type(error).__name__}: {error}")
        tables_by = time.monotonic() + FINAL_TABLES_WAIT_S
        while (
            self._parked
            and self._late_walks is not None
            and self._late_walks.tables_building()
            and time.monotonic() < tables_by
            and not self._abandoned.is_set()
        ):
            time.sleep(FINAL_TABLES_POLL_S)
        self._retry_parked(time.monotonic(), final=True)

    def _finish_walk(self, raw: RawSample, may_park: bool) -> RawSample:
        """A deferred walk finished; _NotNamedYet while its process's maps or
        tables are not known yet and the sample may wait."""
        if self._late_walks is None:
            return dataclasses.replace(raw, walk_end=WalkEnd.NO_MAPPING, stack_copy=None)
        finished = self._late_walks.finish(raw, final=not may_park or len(self._parked) >= MAX_PARKED)
        if finished is None:
            raise _NotNamedYet()
        return finished

    def resolve_sample(self, raw: RawSample, may_park: bool = False) -> Sample:
        """The sample with named frames; with `may_park`, _NotNamedYet when
        JIT code in it has no name yet."""
        # A program in a steady state repeats its callers, while its leaf moves
        # from instruction to instruction: callers seen before, while nothing
        # new is known of the process's mappings or JIT code (and taken after
        # the latest news, which may have been about earlier times), have the
        # same frames. The leaf is named on its own, from the memos.
        era, revision = self._tracker.space_state(raw.pid, raw.time_ns)  # once a sample, not once a frame
        epochs, latest = self._epochs(raw.pid)
        known = (revision, epochs)
        addresses = raw.addresses
        leaf_ids = self._resolve_frame(raw, era, 0, raw.leaf_v8_frame, may_park)[0] if addresses else []
        if len(addresses) > 1 and self._leaf_caller_skipped(raw):
            # Its callers would read as the leaf's: the walk is cut at the leaf.
            leaf_records = tuple(record for record in raw.v8_frames if record.frame_index == 0)
            raw = dataclasses.replace(
                raw, addresses=addresses[:1], walk_end=WalkEnd.BAD_FRAME, caller_words=b"", v8_frames=leaf_records
            )
            addresses = raw.addresses
        async_ids = self._async_callers(raw) if raw.async_frames else ()
        stacks = self._stacks.setdefault(raw.pid, {})
        callers_key: object = raw.caller_words or (addresses[1:], raw.v8_frames)
        stack_key = (era, (callers_key, raw.async_frames, async_ids) if raw.async_frames else callers_key)
        settled = raw.time_ns >= latest
        remembered = stacks.get(stack_key) if settled else None
        if remembered is not None and remembered[0] == known:
            self.stack_hits += 1
            caller_ids: Sequence[int] = remembered[1]
        else:
            # A frame whose words could not be read now may read right soon
            # (code being made): its callers are not remembered unnamed.
            all_read = True
            collected: list[int] = []
            records = {record.frame_index: record for record in raw.v8_frames}
            if id(raw) not in self._asked_ahead:
                self._name_callers_ahead(raw, era, records)
            frames_at: dict[int, list[int]] = {0: leaf_ids}
            for depth in range(len(addresses) - 1, 0, -1):  # root first
                frame_ids, read = self._resolve_frame(raw, era, depth, records.get(depth), may_park)
                collected.extend(frame_ids)
                if async_ids:
                    frames_at[depth] = frame_ids
                all_read = all_read and read
            if async_ids and addresses:
                collected = self._with_async_callers([frames_at[depth] for depth in range(len(addresses))], async_ids)
            caller_ids = tuple(collected)
            if settled and all_read:
                if self._stack_entries >= MAX_STACKS:
                    self._stacks.clear()
                    self._stack_entries = 0
                    stacks = self._stacks.setdefault(raw.pid, {})
                if stack_key not in stacks:
                    self._stack_entries += 1
                stacks[stack_key] = (known, caller_ids)
        kernel_ids: list[int] = []
        if raw.kernel_stack_id >= 0 and self._kernel_stack is not None:
            kernel_ids = [self._resolve_kernel(address) for address in self._kernel_stack(raw.kernel_stack_id)]
            kernel_ids.reverse()
        stack = (*caller_ids, *leaf_ids, *kernel_ids)
        if len(stack) > MAX_SAMPLE_FRAMES:
            stack = stack[-MAX_SAMPLE_FRAMES:]
        return Sample(raw.time_ns, raw.pid, raw.tid, raw.comm, self._profile.intern_stack(stack), raw.walk_end, labels=raw.labels)

    def _leaf_caller_skipped(self, raw: RawSample) -> bool:
        return any(source.leaf_caller_skipped(raw.pid, raw.time_ns, raw.addresses[0]) for source in self.jit_sources)

    def _async_callers(self, raw: RawSample) -> tuple[int, ...]:
        """The ids of the async functions awaiting the sample's code, outermost first."""
        for source in self.jit_sources:
            frames = source.async_callers(raw)
            if frames:
                return tuple(self._profile.intern(frame) for frame in frames)
        return ()

    def _with_async_callers(self, by_depth: list[list[int]], async_ids: tuple[int, ...]) -> list[int]:
        """The callers' frame ids (by_depth: the frames at each depth, leaf
        first) with the async functions awaiting the running task's code
        put right below its outermost JS frame: past it the stack is the
        microtask runner, V8's builtins then native code (the async callers
        are who wait for the task, not who run it)."""
        frames = self._profile.frames
        outermost_js = None
        for depth, frame_ids in enumerate(by_depth):
            kinds = [frames[frame_id] for frame_id in frame_ids]
            if any(frame.kind is FrameKind.JIT for frame in kinds):
                outermost_js = depth
            elif outermost_js is not None and any(
                frame.kind is FrameKind.KERNEL or (frame.kind is FrameKind.NATIVE and not frame.tier) for frame in kinds
            ):
                break  # native code: the task's JS ends here
        if outermost_js is None:
            return [frame_id for frame_ids in by_depth[:0:-1] for frame_id in frame_ids]
        callers: list[int] = []
        for depth in range(len(by_depth) - 1, 0, -1):  # root first, the leaf's own frames apart
            if depth == outermost_js:
                callers.extend(async_ids)
            callers.extend(by_depth[depth])
        if outermost_js == 0:
            callers.extend(async_ids)
        return callers

    def _epochs(self, pid: int) -> tuple[tuple[tuple[int, int], ...], int]:
        """What each JIT source knows of pid's code, and the time of the
        latest news. Asked once per process per batch of samples, at most
        EPOCHS_REUSE_S apart: the sources read their files no more often."""
        memo = self._epoch_memo
        if memo is not None:
            now = time.monotonic()
            if now - self._epochs_asked > EPOCHS_REUSE_S:
                memo.clear()
                self._epochs_asked = now
            known = memo.get(pid)
            if known is not None:
                return known
        epochs = tuple(source.epoch(pid) for source in self.jit_sources)
        known = (epochs, max((latest for _revision, latest in epochs), default=0))
        if memo is not None:
            memo[pid] = known
        return known

    def _resolve_frame(
        self, raw: RawSample, era: tuple[int, int], depth: int, record: V8FrameSlots | None, may_park: bool
    ) -> tuple[list[int], bool]:
        """The frame ids at one depth of the stack, outermost first, and
        whether the words the kernel read for it (record, if any) could be read."""
        address = raw.addresses[depth]
        if record is not None:
            recorded = self._resolve_recorded(raw.pid, address, record, depth, raw.time_ns)
            if recorded is not None:
                frame_ids = self._interned(recorded.frames)
                if recorded.keep_native:
                    # The address's own frame, an interpreter's handler say, is below them.
                    frame_ids.append(self._resolve_user(raw.pid, raw.time_ns, era, address, depth > 0, False)[-1])
                return frame_ids, True
        return self._resolve_user(raw.pid, raw.time_ns, era, address, depth > 0, may_park), record is None

    def _resolve_recorded(self, pid: int, address: int, record: V8FrameSlots, depth: int, time_ns: int) -> RecordedFrames | None:
        """A frame the kernel read a runtime's words for, named from them."""
        lookup_address = address - 1 if depth > 0 else address
        for source in self.jit_sources:
            recorded = source.expand_recorded(pid, lookup_address, record, depth == 0, time_ns)
            if recorded is not None and recorded.frames:
                return recorded
        return None

    def _name_ahead(self, batch: list[RawSample]) -> None:
        """The native frames of a batch of samples the memo does not know,
        named in one request per file: a busy program's leaf is at a new
        instruction in most samples, a compiler's stacks reach new callers
        sample after sample, and each would be a round trip (a stack's own
        request, per new stack, cost a JVM compiling code one per two samples)."""
        wanted = []
        for raw in batch:
            if not raw.addresses or raw.stack_copy is not None:
                continue  # its callers are known once its walk is finished
            self._asked_ahead.add(id(raw))  # the batch holds it: the id is its own while it is named
            era = self._tracker.space_state(raw.pid, raw.time_ns)[0]
            wanted.extend(self._unknown_natives(raw, era, {record.frame_index for record in raw.v8_frames}))
        if len(wanted) >= 2:
            self.elf.name_ahead(wanted)

    def _name_callers_ahead(self, raw: RawSample, era: tuple[int, int], records: dict[int, V8FrameSlots]) -> None:
        """The native callers the memo does not know, named in a batch."""
        wanted = self._unknown_natives(raw, era, records, first_depth=1)
        if len(wanted) >= 2:
            self.elf.name_ahead(wanted)

    def _unknown_natives(
        self,
        raw: RawSample,
        era: tuple[int, int],
        recorded: Collection[int],
        first_depth: int = 0,
        seen: set[tuple[tuple[int, int], int]] | None = None,
    ) -> list[tuple[KnownMapping, int]]:
        """(file mapping, address looked up) of the sample's frames from
        first_depth on that the memo has not named, but at the depths the
        kernel read a runtime's words for (recorded); with seen, each (era,
        address) once."""
        wanted = []
        for depth in range(first_depth, len(raw.addresses)):
            if depth in recorded:
                continue
            lookup_address = raw.addresses[depth] - 1 if depth > 0 else raw.addresses[depth]  # a caller's: its call
            if seen is not None:
                key = (era, lookup_address)
                if key in seen:
                    continue
                if len(seen) < MAX_HELD_ADDRESSES:
                    seen.add(key)
            mapping = self._unknown_native(raw, era, lookup_address)
            if mapping is not None:
                wanted.append((mapping, lookup_address))
        return wanted

    def _unknown_native(self, raw: RawSample, era: tuple[int, int], lookup_address: int) -> KnownMapping | None:
        """The file mapping of an address the memo has not named, if it is one
        (JIT code is named by the JIT sources, never ahead)."""
        key = (era, lookup_address)
        if key in self._memo.get(raw.pid, {}) or key in self._jit_seen.get(raw.pid, ()):
            return None
        mapping = self._tracker.find(raw.pid, raw.time_ns, lookup_address).mapping
        if mapping is not None and mapping.entry.is_anonymous_exec:
            if self._jit_seen_entries >= MAX_JIT_SEEN:
                self._jit_seen.clear()
                self._jit_seen_entries = 0
            self._jit_seen.setdefault(raw.pid, set()).add(key)
            self._jit_seen_entries += 1
            return None
        return mapping

    def _resolve_user(
        self, pid: int, time_ns: int, era: tuple[int, int], address: int, caller: bool, may_park: bool
    ) -> list[int]:
        """The frame ids at one return address, outermost first (more than
        one where JIT code inlined functions)."""
        # A caller's address is a return address: the call is the byte before.
        lookup_address = address - 1 if caller else address
        # The memo comes first: a native frame seen before costs no mapping search.
        memo = self._memo.setdefault(pid, {})
        key = (era, lookup_address)
        remembered = memo.get(key)
        if remembered is not None:
            return list(remembered)
        kept = self._jit_kept.get(pid)
        held = kept.get((lookup_address, caller)) if kept is not None else None
        if held is not None and held[0].names_sample_at(time_ns):
            return list(held[1])
        # JIT code seen in this era (the names asked ahead saw it) needs no mapping search.
        known_jit = key in self._jit_seen.get(pid, ())
        mapping = None if known_jit else self._tracker.find(pid, time_ns, lookup_address).mapping
        if known_jit or (mapping is not None and mapping.entry.is_anonymous_exec):
            # JIT code: addresses are reused, so no memo here; the JIT
            # sources memoise per code object instead.
            for source in self.jit_sources:
                frames = source.expand(pid, time_ns, lookup_address, caller)
                if frames:
                    named_ids = self._interned(frames)
                    self._keep_jit(pid, time_ns, lookup_address, caller, source, frames, named_ids)
                    return named_ids
            if mapping is None:
                mapping = self._tracker.find(pid, time_ns, lookup_address).mapping
            frame = self._name(pid, mapping, lookup_address, time_ns)
            if not frame.symbolized and may_park and len(self._parked) < MAX_PARKED:
                raise _NotNamedYet()
            return [self._profile.intern(frame)]
        chain = self._name_chain(pid, mapping, lookup_address, time_ns)
        if caller and not chain[-1].symbolized and mapping is not None:
            # A signal trampoline is "returned" to at its first byte: the
            # byte before belongs to no function.
            chain = self._name_chain(pid, mapping, address, time_ns)
        frame_ids = tuple(self._profile.intern(frame) for frame in chain)
        if mapping is not None:  # no mapping yet may only mean its maps are not read yet
            if self._memo_entries >= MAX_MEMO:
                self._memo.clear()
                self._memo_entries = 0
                memo = self._memo.setdefault(pid, {})
            memo[key] = frame_ids
            self._memo_entries += 1
        return list(frame_ids)

    def _keep_jit(
        self,
        pid: int,
        time_ns: int,
        address: int,
        caller: bool,
        source: JitSymbolSource,
        frames: tuple[Frame, ...],
        frame_ids: list[int],
    ) -> None:
        """Keep a JIT address's frames for the samples its code names (the
        source says when that is), if all of them are named."""
        if not all(frame.symbolized for frame in frames):
            return  # not known yet: asked again
        lifetime = source.code_lifetime(pid, address)
        if lifetime is None or not lifetime.names_sample_at(time_ns):
            return  # what the source named from is not (or no longer) the code there now
        if self._jit_kept_entries >= MAX_JIT_KEPT:
            self._jit_kept.clear()
            self._jit_kept_entries = 0
        kept = self._jit_kept.setdefault(pid, {})
        if (address, caller) not in kept:
            self._jit_kept_entries += 1
        kept[(address, caller)] = (lifetime, tuple(frame_ids))

    def _interned(self, frames: tuple[Frame, ...]) -> list[int]:
        """The ids of a JIT source's frames, kept by the tuple's identity."""
        kept = self._interned_tuples.get(id(frames))
        if kept is not None and kept[0] is frames:
            return list(kept[1])
        frame_ids = tuple(self._profile.intern(frame) for frame in frames)
        if len(self._interned_tuples) >= MAX_INTERNED_TUPLES:
            self._interned_tuples.clear()
        self._interned_tuples[id(frames)] = (frames, frame_ids)
        return list(frame_ids)

    def _name_chain(self, pid: int, mapping: KnownMapping | None, address: int, time_ns: int) -> list[Frame]:
        """Native code: its function and what was inlined there, outermost first."""
        if mapping is not None:
            frames = self.elf.resolve_chain(pid, mapping, address)
            if frames and frames[-1].symbolized:
                return frames
            # Code its file does not name may be a runtime's: V8 maps its
            # embedded builtins again from the binary (short builtin calls),
            # and a stripped deno's perf map is all that names them there.
            for named in self.jit_sources:
                frame = named.resolve_file_code(pid, mapping, address, time_ns)
                if frame is not None:
                    return [frame]
            if frames:
                return frames
        return [self._name(pid, mapping, address, time_ns)]

    def _name(self, pid: int, mapping: KnownMapping | None, address: int, time_ns: int) -> Frame:
        """What the JIT sources call the code (a file's was asked for first)."""
        if mapping is None:
            return Frame("[unknown]", "", FrameKind.UNKNOWN)
        for named in self.jit_sources:
            frame = named.resolve(pid, mapping, address, time_ns)
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
