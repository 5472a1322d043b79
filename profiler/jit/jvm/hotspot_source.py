"""Java frames named from HotSpot's own structures, in any JVM started with
-XX:+PreserveFramePointer, with no agent, no attach and no file: compiled
frames (C1, C2) from the nmethod the pc is in, with the methods it inlined
there restored from its scope descriptors and each one's line; interpreted
frames from the Method* and bytecode pointer the kernel reads from the
frame (bpf/hotspot_frames.bpf.h: note_hotspot_frame); stubs by their blob's name.
All of it read from /proc/PID/mem (jit/jvm/hotspot/), read-only.

Code moves: the code cache frees an nmethod once no thread runs it, and
another may be compiled in its place. A blob is read as samples in it
arrive (on a thread of its own), and it names a sample only if it was
there at the sample's time: read no more than EARLY_SLACK_NS after it, and
seen again (its header unchanged) at or after it. Anything else, and any
object that does not check out, stays unnamed rather than misnamed.
"""

from __future__ import annotations

import bisect
import collections
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from profiler.jit.jvm.hotspot import compressed, flag_writer
from profiler.jit.jvm.hotspot.layout import (
    LAYOUT_SETTLE_S,
    BuildRefused,
    HotSpotLayout,
    LayoutError,
    forget_layout,
    layout_of,
    remembered_failure,
)
from profiler.jit.jvm.hotspot.objects import (
    NMETHOD_NAMES,
    CodeBlob,
    CodeHeap,
    CompiledCode,
    HotSpotReader,
    JavaMethod,
    UnloadingCount,
    plausible,
)
from profiler.jit.symbol_source import JitSymbolSource, RecordedFrames
from profiler.kernel.address_spaces import JIT_MODULE
from profiler.kernel.events import (
    HOTSPOT_FP_BCP,
    HOTSPOT_FP_METHOD,
    MAX_FRAMES,
    MAX_STACK_FRAMES,
    V8_NO_BYTECODE_OFFSET,
    RawSample,
    StackCopy,
    V8FrameSlots,
)
from profiler.kernel.kernel_maps import HotSpotCode
from profiler.kernel.late_walks import WalkedFrame
from profiler.kernel.process_memory import MemoryThread, ProcessMemory
from profiler.kernel.procmaps import read_maps
from profiler.model.profile import Frame, FrameKind
from profiler.native import elf_format
from profiler.native.elf import MAX_ELF_BYTES
from profiler.native.hotspot_code import CODE_BYTES, epilogue_words
from profiler.safety import files

# A blob read this long after a sample still names it (samples come up the
# ring buffer four times a second), unless other code was seen there before.
EARLY_SLACK_NS = 600_000_000
SETUP_RETRY_S = 0.2  # a JVM still starting (no code heaps yet) is looked at again after this
SETUP_GIVE_UP_S = 120.0
AHEAD_PAUSE_S = 0.05  # the reader takes the samples queued meanwhile together: one check of a blob for all
AHEAD_WAIT_S = 0.5  # how long naming a sample newer than its blob's last sight waits for the reader's check
MAX_CHECKED_PER_TRIP = 4096  # blobs seen again, checked in one trip to the memory thread
MAX_METHODS_PER_TRIP = 256  # Methods read in one trip (a batch's interpreted ones, a compiled method's scopes')
MAX_BLOBS_PER_TRIP = 1024  # new code a batch of samples ran in, read in one trip
MAX_NO_BLOB = 4096  # addresses found in no blob, remembered (free space sampled as code is made there)
MAX_AHEAD = 8192  # samples waiting for the reader
MAX_BLOBS = 100_000  # per JVM (a big server has 20 k nmethods)
MAX_RETIRED = 4096  # blobs gone, kept for the samples taken while they were there
MAX_METHODS = 200_000
MAX_INTERPRETED_FRAMES = 50_000  # per JVM: (method, bytecode index) pairs named
METHODS_LIFETIME_S = 60.0
MAX_FRAMES_PER_BLOB = 4096
MAX_REFUSALS_SAID = 64  # refusals remembered for the end of the run
MAX_REFUSALS_LISTED = 4  # said one by one there
_TIERS = {1: "c1", 2: "c1", 3: "c1", 4: "c2"}
UNKNOWN_JIT = Frame(f"[unknown] ({JIT_MODULE})", JIT_MODULE, FrameKind.UNKNOWN)
# Below a compiled method whose inlined methods at the pc HotSpot did not
# record (without -XX:+DebugNonSafepoints it records them at safepoints and
# calls only): the nearest record may be another inlined method's.
INLINED_UNKNOWN = Frame("(inlined methods unknown)", JIT_MODULE, FrameKind.JIT, tier="unknown")


class HotSpotKernel(Protocol):
    """What this source asks of the kernel half: to send a JVM's interpreted
    frames, and to step over its compiled ones by their size when they keep
    no frame pointer."""

    def hotspot_walker_problem(self) -> str | None: ...

    def set_hotspot_process(self, pid: int, interpreter: tuple[int, int], gc_count_at: int) -> bool: ...

    def set_hotspot_code(self, pid: int, code: HotSpotCode) -> bool: ...

    def clear_v8_process(self, pid: int) -> None: ...


@dataclass
class _Blob:
    start: int  # its code: [start, end)
    end: int
    address: int
    name: str
    identity: bytes | None  # its header's words that change when another blob takes its place
    code: CompiledCode | None
    first_seen_ns: int
    confirmed_ns: int  # it was there from valid_from_ns to confirmed_ns
    valid_from_ns: int
    frames: dict[tuple[int, bool], tuple[Frame, ...]] = field(default_factory=dict)  # by (address, caller)
    gone: bool = False  # replaced, or freed: it names only the samples it was read for
    inlines: bool | None = None  # does any of its pcs have an inlined method (None: not looked yet)
    pc_index: compressed.PcIndex | None = None  # its code's descriptors by pc (None: not made yet)

    def names_sample_at(self, time_ns: int) -> bool:
        """Did it hold its code at time_ns, as far as is known now? (A stub,
        an adapter or the interpreter is made once and never moves.)"""
        if self.gone:
            return False
        return self.code is None or self.valid_from_ns <= time_ns <= self.confirmed_ns


@dataclass
class _MethodEntry:
    method: JavaMethod | None
    confirmed_ns: int  # it was there from valid_from_ns to confirmed_ns
    valid_from_ns: int
    collections: int | None = None  # the JVM's GC count when it was read or confirmed (None: unknown)


@dataclass(frozen=True)
class _BlobsRead:
    """New code read ahead of _blob: by address, its blob (None: none there)."""

    read_ns: int  # taken before the trip
    found: dict[int, tuple[CodeBlob, CompiledCode | None] | None]


@dataclass(frozen=True)
class _MethodRead:
    """A Method read ahead of _method, with the JVM's count read just before it."""

    read_ns: int  # taken before the trip
    collections: int | None
    method: JavaMethod | None


@dataclass
class _Jvm:
    pid: int
    watched_at: float
    reader: HotSpotReader | None = None
    thread: MemoryThread | None = None
    interpreter: tuple[int, int] = (0, 0)
    heaps: tuple[tuple[int, int], ...] = ()
    unloading: UnloadingCount | None = None  # what counts the JVM's chances to unload classes (None: nothing does)
    gc_seen: tuple[int, int] | None = None  # (that count, when read): one read serves a batch's Methods
    starts: list[int] = field(default_factory=list)  # of blobs, sorted
    blobs: list[_Blob] = field(default_factory=list)
    retired: collections.deque[_Blob] = field(default_factory=lambda: collections.deque(maxlen=MAX_RETIRED))
    methods: dict[int, _MethodEntry] = field(default_factory=dict)
    retired_methods: dict[int, collections.deque[_MethodEntry]] = field(default_factory=dict)  # by address: those replaced
    methods_since: float = field(default_factory=time.monotonic)
    # Interpreted frames named, by (id of their Method's record, bci): the record is kept with them.
    interpreted_frames: dict[tuple[int, int], tuple[JavaMethod, RecordedFrames]] = field(default_factory=dict)
    revision: int = 0
    news_ns: int = 0
    ahead_queued_ns: int = 0  # the latest sample given to the reader
    no_blob: dict[int, int] = field(default_factory=dict)  # addresses in no blob, and when that was seen
    ahead_done_ns: int = 0  # the latest sample whose blobs the reader has read or checked
    ahead_done: threading.Condition = field(default_factory=threading.Condition)
    next_setup: float = 0.0
    preserves_frame_pointers: bool | None = None
    records_non_safepoints: bool | None = None  # -XX:+DebugNonSafepoints
    turned_on_non_safepoints: bool | None = None  # jitprof turned it on (True), or could not (False)
    unknown_inlining: int = 0  # frames named without their inlined methods (not recorded)
    walked_by_frame_size: bool = False  # without frame pointers: the kernel steps over compiled frames by their size
    # Since when the kernel steps its compiled code (by frame size, or a leaf
    # in a prologue or epilogue); None: not yet, or never.
    kernel_steps_since_ns: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    setting_up: threading.Lock = field(default_factory=threading.Lock)  # one thread sets it up; the others go on
    libjvm_path: str = ""  # its map_files entry

    def in_code(self, address: int) -> bool:
        for low, high in self.heaps:  # (a loop: asked for each compiled frame; a generator cost twice as much)
            if low <= address < high:
                return True
        return False


def frame_size_walk(layout: HotSpotLayout, heaps: tuple[CodeHeap, ...], frame_pointers: bool = False) -> HotSpotCode:
    """What the kernel needs to step over this JVM's compiled frames by their
    size (frame_pointers: only a leaf caught in a prologue or epilogue)."""
    return HotSpotCode(
        heaps=tuple((heap.low, heap.high, heap.segmap) for heap in heaps),
        log2_segment=heaps[0].log2_segment if heaps else 0,
        block_header=layout.heap_block_size,
        frame_size_at=layout.blob_frame_size,
        frame_complete_at=layout.blob_frame_complete,
        frame_complete_bytes=layout.blob_frame_complete_bytes,
        code_begin_at=layout.blob_code_begin,
        code_begin_is_offset=layout.blob_offsets,
        frame_pointers=frame_pointers,
        name_at=layout.blob_name if layout.blob_name > 0 else 0,
    )


class HotSpotStructures(JitSymbolSource):
    def __init__(
        self,
        kernel: HotSpotKernel | None,
        is_jvm: Callable[[int], bool],
        expand_inlining: bool = True,
        turn_on_non_safepoints: bool = False,
    ) -> None:
        self._kernel = kernel
        self._is_jvm = is_jvm
        self._expand_inlining = expand_inlining
        self._turn_on_non_safepoints = turn_on_non_safepoints  # the user asked: write the flag in each JVM
        self._jvms: dict[int, _Jvm] = {}
        self._refused: dict[int, str] = {}
        self._refusals: dict[int, str] = {}  # every refusal of the run (they outlive their JVMs), for the end
        self._refusals_said: set[int] = set()
        self._flag_turned_on: dict[int, bool] = {}  # JVMs whose flag jitprof turned on (or failed to), for the end
        self._lock = threading.Lock()
        self._ahead: queue.SimpleQueue[tuple[int, int, tuple[int, ...], tuple[V8FrameSlots, ...]] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # Which processes ----------------------------------------------------

    def watch(self, pid: int) -> None:
        """A followed process (or one that exec'd): a JVM is read from as soon
        as its code heaps exist (a JVM just started has none yet)."""
        self.forget(pid)
        if not self._is_jvm(pid):
            return
        jvm = _Jvm(pid, time.monotonic())
        with self._lock:
            self._jvms[pid] = jvm
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="jitprof-hotspot", daemon=True)
                self._thread.start()
        self._set_up(jvm)

    def _set_up(self, jvm: _Jvm) -> bool:
        """Read the JVM's layout, code heaps and interpreter; True once done."""
        if jvm.heaps:
            return True
        if not jvm.setting_up.acquire(blocking=False):
            return False
        try:
            return self._try_set_up(jvm)
        finally:
            jvm.setting_up.release()

    def _try_set_up(self, jvm: _Jvm) -> bool:
        now = time.monotonic()
        if now < jvm.next_setup:
            return False
        jvm.next_setup = now + SETUP_RETRY_S
        if now - jvm.watched_at > SETUP_GIVE_UP_S:
            self._refuse(jvm, "its code heaps never appeared")
            return False
        try:
            if jvm.reader is None:
                found = libjvm_of(jvm.pid)
                if found is None:
                    return False  # the launcher has not loaded it yet
                path, bias = found
                jvm.libjvm_path = path
                waiting = remembered_failure(path)
                if waiting is not None:
                    raise waiting
                memory = ProcessMemory(jvm.pid)
                opened = MemoryThread(memory)
                try:
                    layout = opened.run(lambda: layout_of(memory, path, bias))
                except BaseException:
                    opened.close()
                    raise
                if layout is None:
                    opened.close()
                    self._refuse(jvm, "its memory did not answer")
                    return False
                jvm.reader, jvm.thread = HotSpotReader(memory, layout, bias), opened
            reader, thread = jvm.reader, jvm.thread
            assert thread is not None
            state = thread.run(
                lambda: (
                    reader.code_heaps(),
                    reader.interpreter_range(),
                    reader.unloading_count(),
                    reader.preserves_frame_pointers(),
                    reader.records_non_safepoints(),
                )
            )
            heaps, interpreter, unloading, preserves_frame_pointers, non_safepoints = (
                state if state is not None else ((), None, None, None, None)
            )
        except LayoutError as error:
            if now - jvm.watched_at < LAYOUT_SETTLE_S and not isinstance(error, BuildRefused):
                return False  # a libjvm.so being loaded reads as nonsense until it is relocated: again later
            self._refuse(jvm, str(error))
            return False
        except (OSError, ValueError) as error:
            self._refuse(jvm, f"cannot read its memory ({error})")
            return False
        if not heaps or interpreter is None:
            if now - jvm.watched_at < LAYOUT_SETTLE_S and jvm.thread is not None:
                # Still starting: its layout may have been read from tables
                # not all relocated yet. Read again with what comes next.
                jvm.thread.close()
                jvm.reader = jvm.thread = None
                forget_layout(jvm.libjvm_path)
            return False
        walker_problem = self._kernel.hotspot_walker_problem() if self._kernel is not None else None
        if walker_problem is not None:
            self._refuse(jvm, walker_problem)
            return False
        if self._kernel is not None and not self._kernel.set_hotspot_process(
            jvm.pid, interpreter, unloading.address if unloading is not None else 0
        ):
            self._refuse(jvm, "the kernel's table of JIT processes is full")
            return False
        if preserves_frame_pointers is False and self._kernel is not None and jvm.reader is not None:
            jvm.walked_by_frame_size = self._kernel.set_hotspot_code(jvm.pid, frame_size_walk(jvm.reader.layout, heaps))
        elif preserves_frame_pointers and self._kernel is not None and jvm.reader is not None:
            # A leaf in a compiled method's prologue or epilogue: its rbp is its
            # caller's, and the frame-pointer step would skip that caller.
            if self._kernel.set_hotspot_code(jvm.pid, frame_size_walk(jvm.reader.layout, heaps, frame_pointers=True)):
                jvm.kernel_steps_since_ns = time.monotonic_ns()  # samples taken before were walked without it
        jvm.interpreter = interpreter
        jvm.unloading = unloading
        jvm.preserves_frame_pointers = preserves_frame_pointers
        if non_safepoints is False and self._turn_on_non_safepoints and jvm.reader is not None and jvm.thread is not None:
            flag_at = jvm.reader.layout.debug_non_safepoints_at + jvm.reader.bias
            jvm.turned_on_non_safepoints = bool(jvm.thread.run(lambda: flag_writer.turn_on(jvm.pid, flag_at)))
            non_safepoints = True if jvm.turned_on_non_safepoints else non_safepoints
            with self._lock:
                if len(self._flag_turned_on) < MAX_REFUSALS_SAID:
                    self._flag_turned_on[jvm.pid] = jvm.turned_on_non_safepoints
        jvm.records_non_safepoints = non_safepoints
        jvm.heaps = tuple((heap.low, heap.high) for heap in heaps)  # last: it says the JVM is ready
        return True

    def _refuse(self, jvm: _Jvm, why: str) -> None:
        with self._lock:
            self._jvms.pop(jvm.pid, None)
            self._refused[jvm.pid] = why
            if len(self._refusals) < MAX_REFUSALS_SAID:
                self._refusals[jvm.pid] = why
        if jvm.thread is not None:
            jvm.thread.close()

    def refused(self, pid: int) -> str:
        """Why a JVM's structures cannot be read ("" if they can, or may yet);
        the caller says it (a refusal nobody asked about is said at the end)."""
        why = self._refused.get(pid, "")
        if why:
            self._refusals_said.add(pid)
        return why

    def reads(self, pid: int) -> bool:
        """Are pid's frames named from its structures (or will be, once it has started)?"""
        with self._lock:
            return pid in self._jvms

    def has_source(self, pid: int) -> bool:
        return self._ready(pid) is not None

    def _ready(self, pid: int) -> _Jvm | None:
        with self._lock:
            jvm = self._jvms.get(pid)
        if jvm is None or not self._set_up(jvm):
            return None
        return jvm

    def forget(self, pid: int, remove_as: int | None = None) -> list[str]:
        with self._lock:
            jvm = self._jvms.pop(pid, None)
        self._refused.pop(pid, None)
        if jvm is not None:
            if jvm.thread is not None:
                jvm.thread.close()
            if self._kernel is not None and jvm.heaps:
                self._kernel.clear_v8_process(pid)
        return []

    def close(self) -> None:
        self._stop.set()
        self._ahead.put(None)
        for pid in list(self._jvms):
            self.forget(pid)

    def epoch(self, pid: int) -> tuple[int, int]:
        """A blob found replaced by another is news: what was named from it is named anew."""
        with self._lock:
            jvm = self._jvms.get(pid)
        return (jvm.revision, jvm.news_ns) if jvm is not None else (0, 0)

    def warnings(self) -> list[str]:
        with self._lock:
            without = [jvm.pid for jvm in self._jvms.values() if jvm.preserves_frame_pointers is False]
            by_size = {jvm.pid for jvm in self._jvms.values() if jvm.walked_by_frame_size}
            unrecorded = [jvm.pid for jvm in self._jvms.values() if jvm.unknown_inlining]
            turned_on = dict(self._flag_turned_on)
            unsaid = [(pid, why) for pid, why in self._refusals.items() if pid not in self._refusals_said]
        return (
            [
                f"jitprof: note: the JVM (pid {pid}) runs without -XX:+PreserveFramePointer: its compiled frames were "
                f"walked by their sizes, and stacks deeper than {MAX_FRAMES} frames cut; restart it with that flag "
                "(or under jitprof -- java ...) for whole deep stacks"
                if pid in by_size
                else f"jitprof: warning: the JVM (pid {pid}) runs without -XX:+PreserveFramePointer, so its stacks "
                "stop at the first compiled Java frame; restart it with that flag (or under jitprof -- java ...)"
                for pid in without
            ]
            + [
                f"jitprof: note: turned -XX:+DebugNonSafepoints on in the JVM (pid {pid}), as asked: the methods "
                "HotSpot compiled from then on name their inlined methods at every instruction (a larger debug "
                "record per compiled method, the same code); it stays on after jitprof"
                if done
                else f"jitprof: warning: could not turn -XX:+DebugNonSafepoints on in the JVM (pid {pid}): its flag "
                "was not in libjvm.so's data or its memory could not be written; start it with "
                "-XX:+UnlockDiagnosticVMOptions -XX:+DebugNonSafepoints"
                for pid, done in turned_on.items()
            ]
            + [
                f"jitprof: note: the JVM (pid {pid}): methods compiled before jitprof turned -XX:+DebugNonSafepoints on "
                "keep HotSpot's records at safepoints and calls only: where they ran between those, their inlined "
                f"methods are shown as '{INLINED_UNKNOWN.name}' until HotSpot compiles them again"
                if turned_on.get(pid)
                else f"jitprof: note: the JVM (pid {pid}) runs without -XX:+DebugNonSafepoints: where its compiled code "
                "ran between safepoints and calls, HotSpot did not record which inlined methods it was in, shown as "
                f"'{INLINED_UNKNOWN.name}'; start it with -XX:+UnlockDiagnosticVMOptions -XX:+DebugNonSafepoints "
                "(or under jitprof -- java ...), or attach with --jvm-debug-nonsafepoints, to see them"
                for pid in unrecorded
            ]
            + [
                f"jitprof: note: the JVM (pid {pid}): its structures could not be read once it had started ({why}); "
                "its Java frames were named from a perf map where one could be asked for, without inlined methods or lines"
                for pid, why in unsaid[:MAX_REFUSALS_LISTED]
            ]
            + ([f"jitprof: note: and {len(unsaid) - MAX_REFUSALS_LISTED} more JVMs"] if len(unsaid) > MAX_REFUSALS_LISTED else [])
        )

    # Reading ahead of the symbolizer ----------------------------------------

    def note_sample(self, sample: RawSample) -> None:
        """(Sampling thread.) Queue a JVM's sample for the reader: its blobs are read while they are there."""
        jvm = self._jvms.get(sample.pid)
        if jvm is None or not jvm.heaps or self._ahead.qsize() >= MAX_AHEAD:
            return
        self._ahead.put((sample.pid, sample.time_ns, sample.addresses, sample.v8_frames))
        jvm.ahead_queued_ns = max(jvm.ahead_queued_ns, sample.time_ns)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                item = self._ahead.get(timeout=SETUP_RETRY_S)
            except queue.Empty:
                self._set_up_pending()  # a JVM starting: its interpreter goes to the kernel as soon as it is there
                continue
            if item is None:
                return
            batch = [item]
            self._stop.wait(AHEAD_PAUSE_S)
            while True:
                try:
                    more = self._ahead.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    return
                batch.append(more)
            self._read_ahead(batch)
            self._set_up_pending()

    def _set_up_pending(self) -> None:
        with self._lock:
            pending = [jvm for jvm in self._jvms.values() if not jvm.heaps]
        for jvm in pending:
            self._set_up(jvm)

    def _read_ahead(self, batch: list[tuple[int, int, tuple[int, ...], tuple[V8FrameSlots, ...]]]) -> None:
        """Each blob the batch's samples ran in read, or seen again, once."""
        latest: dict[int, dict[tuple[int, bool], int]] = {}  # pid -> (address, caller) -> the latest sample's time in it
        methods: dict[int, dict[int, tuple[int, int]]] = {}  # pid -> Method* -> the earliest sample's time and GC count
        for pid, time_ns, addresses, records in batch:
            wanted = latest.setdefault(pid, {})
            for depth, address in enumerate(addresses):
                lookup = (address, False) if depth == 0 else (address - 1, True)
                wanted[lookup] = max(wanted.get(lookup, 0), time_ns)
            sampled = methods.setdefault(pid, {})
            for record in records:
                if record.interpreter and (record.shared not in sampled or time_ns < sampled[record.shared][0]):
                    sampled[record.shared] = (time_ns, record.code)
        for pid, wanted in latest.items():
            with self._lock:
                jvm = self._jvms.get(pid)
            if jvm is None:
                continue
            if jvm.heaps and jvm.thread is not None:
                self._check_seen(jvm, wanted)  # the blobs known, in one trip
                named: dict[int, tuple[_Blob, dict[tuple[int, bool], tuple[Frame, ...]]]] = {}
                in_code = [
                    (address, caller, time_ns) for (address, caller), time_ns in sorted(wanted.items()) if jvm.in_code(address)
                ]
                new_code = self._new_blobs_read(jvm, in_code)  # in one trip
                for address, caller, time_ns in in_code:
                    blob = self._blob(jvm, address, time_ns, read=new_code)  # new code, once for all its addresses
                    if blob is None or blob.gone or (address, caller) in blob.frames:
                        continue
                    frames = self._blob_frames(jvm, blob, address, caller)  # while the process lives
                    named.setdefault(blob.start, (blob, {}))[1][(address, caller)] = frames
                # Their methods were read now: theirs if each blob is still
                # there, checked once per blob after all its pcs were named.
                self._keep_if_still_there(jvm, list(named.values()))
                sampled = methods.get(pid, {})
                read = self._methods_read(jvm, {method: time_ns for method, (time_ns, _count) in sampled.items()})
                for method, (time_ns, gc_count) in sampled.items():
                    self._method(jvm, method, time_ns, time_ns, gc_count, read=read.get(method))
            with jvm.ahead_done:
                jvm.ahead_done_ns = max(jvm.ahead_done_ns, max(wanted.values(), default=0))
                jvm.ahead_done.notify_all()

    def _check_seen(self, jvm: _Jvm, wanted: dict[tuple[int, bool], int]) -> None:
        """The known blobs the batch's samples ran in, newer than their last
        sight, checked in one trip to the memory thread (one trip a blob was
        most of what naming a busy JVM cost): each still the one read, and
        there until now, or retired."""
        due: dict[int, _Blob] = {}
        with jvm.lock:
            for (address, _caller), time_ns in wanted.items():
                blob = _known_blob(jvm, address)
                if blob is not None and blob.code is not None and blob.valid_from_ns <= time_ns and time_ns > blob.confirmed_ns:
                    due[blob.start] = blob
        if not due:
            return
        self._confirm(jvm, list(due.values())[:MAX_CHECKED_PER_TRIP])

    def _confirm(self, jvm: _Jvm, blobs: list[_Blob], unanswered_gone: bool = False) -> list[bool]:
        """Is each blob still the one read? One trip for all: those that are
        were there until now, the others are retired. When the memory stopped
        answering, none is known: retired too only if unanswered_gone."""
        if not blobs:
            return []
        assert jvm.thread is not None and jvm.reader is not None
        reader = jvm.reader
        block_size = reader.layout.heap_block_size
        size = block_size + _identity_bytes(reader)
        now = time.monotonic_ns()
        reads = jvm.thread.run(lambda: [reader.memory.read(blob.address - block_size, size) for blob in blobs])
        if reads is None:
            if unanswered_gone:
                for blob in blobs:
                    self._retire(jvm, blob)
            return [False] * len(blobs)
        there = []
        for blob, read in zip(blobs, reads, strict=True):
            there.append(self._same_blob(reader, blob, read))
            if there[-1]:
                blob.confirmed_ns = max(blob.confirmed_ns, now)
            else:
                self._retire(jvm, blob)
        return there

    def _keep_if_still_there(self, jvm: _Jvm, named: list[tuple[_Blob, dict[tuple[int, bool], tuple[Frame, ...]]]]) -> None:
        """Keep frames named from blobs' methods where the blob is still there
        after they were read (stubs never move: kept as they are)."""
        compiled = [(blob, frames) for blob, frames in named if blob.code is not None]
        for blob, frames in named:
            if blob.code is None:
                _keep_frames(blob, frames)
        for start in range(0, len(compiled), MAX_CHECKED_PER_TRIP):
            chunk = compiled[start : start + MAX_CHECKED_PER_TRIP]
            for (blob, frames), there in zip(chunk, self._confirm(jvm, [blob for blob, _frames in chunk]), strict=True):
                if there:
                    _keep_frames(blob, frames)

    def _wait_for_ahead(self, jvm: _Jvm, time_ns: int) -> bool:
        """Wait (a while) for the reader to have checked the blobs of the
        samples up to time_ns; whether it has. Every sample of a JVM goes to
        the reader before it is named: naming waits for its trip rather than
        making one of its own for each blob."""
        if self._thread is None or not self._thread.is_alive() or self._stop.is_set() or time_ns > jvm.ahead_queued_ns:
            return False  # no reader, or the sample never went to it (its queue was full)
        with jvm.ahead_done:
            return (
                jvm.ahead_done.wait_for(lambda: jvm.ahead_done_ns >= time_ns or self._stop.is_set(), timeout=AHEAD_WAIT_S)
                and not self._stop.is_set()
            )

    # Blobs ----------------------------------------------------------------

    def _new_blobs_read(self, jvm: _Jvm, wanted: list[tuple[int, bool, int]]) -> _BlobsRead | None:
        """The blobs at the addresses (address, caller, sample's time) in no
        blob known, read in one trip: a compiling JVM's batch of samples
        runs in tens of new nmethods, each a trip of its own otherwise."""
        with jvm.lock:
            unknown = sorted(
                {
                    address
                    for address, _caller, time_ns in wanted
                    if _known_blob(jvm, address) is None and jvm.no_blob.get(address, 0) < time_ns
                }
            )[:MAX_BLOBS_PER_TRIP]
        if len(unknown) < 2:
            return None  # one read is one trip either way
        assert jvm.thread is not None and jvm.reader is not None
        reader = jvm.reader

        def read_all() -> dict[int, tuple[CodeBlob, CompiledCode | None] | None]:
            found: dict[int, tuple[CodeBlob, CompiledCode | None] | None] = {}
            last: tuple[CodeBlob, CompiledCode | None] | None = None
            for address in unknown:  # sorted: a blob read covers the addresses after it in its code
                if last is not None and last[0].code_begin <= address < last[0].code_end:
                    found[address] = last
                    continue
                found[address] = _read_blob(reader, address)
                last = found[address] or last
            return found

        read_ns = time.monotonic_ns()
        found = jvm.thread.run(read_all)
        return _BlobsRead(read_ns, found) if found is not None else None

    def _blob(
        self, jvm: _Jvm, address: int, time_ns: int, wait_for_ahead: bool = False, read: _BlobsRead | None = None
    ) -> _Blob | None:
        """The blob that held address at time_ns, or None when that cannot be
        known. wait_for_ahead: new code, or a blob not seen since the sample,
        is read or checked by the reader, which this waits for. read: new
        code read already (its read is taken for address, if it has it)."""
        with jvm.lock:
            blob = _known_blob(jvm, address)
        if blob is not None:
            if blob.code is None:
                return blob  # stubs, adapters, the interpreter: made once, never moved
            if time_ns < blob.valid_from_ns:
                return self._retired_at(jvm, address, time_ns)
            if time_ns > blob.confirmed_ns and wait_for_ahead and self._wait_for_ahead(jvm, time_ns):
                return self._blob(jvm, address, time_ns)  # checked, retired or replaced meanwhile: looked up again
            if time_ns <= blob.confirmed_ns or self._still_there(jvm, blob):
                return blob
        elif wait_for_ahead and self._wait_for_ahead(jvm, time_ns):
            return self._blob(jvm, address, time_ns)  # new code: the reader has read it, or tried
        ahead = read is not None and address in read.found
        now = read.read_ns if read is not None and ahead else time.monotonic_ns()
        if time_ns < now - EARLY_SLACK_NS:
            return self._retired_at(jvm, address, time_ns)  # read too late: something else may have been there then
        if jvm.no_blob.get(address, 0) >= time_ns:
            return None  # looked for since the sample (by the reader), and not found
        assert jvm.thread is not None and jvm.reader is not None
        reader = jvm.reader
        found = read.found[address] if read is not None and ahead else jvm.thread.run(lambda: _read_blob(reader, address))
        if found is None:
            if len(jvm.no_blob) >= MAX_NO_BLOB:
                jvm.no_blob.clear()
            jvm.no_blob[address] = now
            return None
        code_blob, compiled = found
        blob = _Blob(
            code_blob.code_begin,
            code_blob.code_end,
            code_blob.address,
            code_blob.name,
            _identity(reader, code_blob.header),
            compiled,
            now,
            now,
            now - EARLY_SLACK_NS,
        )
        with jvm.lock:
            if len(jvm.blobs) >= MAX_BLOBS:
                jvm.starts.clear()
                jvm.blobs.clear()
            index = bisect.bisect_left(jvm.starts, blob.start)
            overlapped = []  # blobs read before over the same code: gone
            while index < len(jvm.blobs) and jvm.blobs[index].start < blob.end:
                overlapped.append(jvm.blobs[index])
                del jvm.starts[index], jvm.blobs[index]
            if index > 0 and jvm.blobs[index - 1].end > blob.start:
                index -= 1
                overlapped.append(jvm.blobs[index])
                del jvm.starts[index], jvm.blobs[index]
            for old in overlapped:
                old.gone = True
                if old.code is not None:
                    jvm.retired.append(old)
            # Where other code was seen, when this one took its place is not
            # known: it names no sample from before it was read.
            if any(old.start < blob.end and blob.start < old.end for old in jvm.retired):
                blob.valid_from_ns = now
            jvm.starts.insert(index, blob.start)
            jvm.blobs.insert(index, blob)
            # News: stacks named before may have had this code unnamed.
            jvm.revision += 1
            jvm.news_ns = now
        if time_ns < blob.valid_from_ns:
            return self._retired_at(jvm, address, time_ns)  # found replaced after the sample: whose it was is not known
        return blob

    def _retired_at(self, jvm: _Jvm, address: int, time_ns: int) -> _Blob | None:
        """A blob gone since, that held address at time_ns (a sample named after the code was replaced)."""
        with jvm.lock:
            for old in reversed(jvm.retired):
                if old.start <= address < old.end and old.valid_from_ns <= time_ns <= old.confirmed_ns:
                    return old
        return None

    def _still_there(self, jvm: _Jvm, blob: _Blob) -> bool:
        """Is the blob still the one read (its heap block in use, its header's
        identity unchanged)? Then it was there until now; if not, it is
        retired (so too when its memory no longer answers). A freed blob's
        bytes stay as they were: HotSpot carves new code from the end of a
        free block, so a blob's header outlives it in free space at the
        block's start, while other code runs at its pcs; only the block's
        used flag says it is gone."""
        return self._confirm(jvm, [blob], unanswered_gone=True)[0]

    @staticmethod
    def _same_blob(reader: HotSpotReader, blob: _Blob, read: bytes | None) -> bool:
        """Do the block header and blob header read (at the blob's block) say it is still the one read?"""
        layout = reader.layout
        if read is None or blob.identity is None:
            return False
        if 0 <= layout.heap_block_used < layout.heap_block_size and read[layout.heap_block_used] != 1:
            return False
        return _identity(reader, read[layout.heap_block_size :]) == blob.identity

    def _retire(self, jvm: _Jvm, blob: _Blob) -> None:
        """The blob is gone (another in its place, or free space): it still names its samples up to when it was last seen."""
        with jvm.lock:
            index = bisect.bisect_left(jvm.starts, blob.start)
            if index < len(jvm.blobs) and jvm.blobs[index] is blob:
                del jvm.starts[index], jvm.blobs[index]
            blob.gone = True
            jvm.retired.append(blob)
            jvm.revision += 1
            jvm.news_ns = time.monotonic_ns()

    # Naming -----------------------------------------------------------------

    def expand(self, pid: int, time_ns: int, address: int, caller: bool = False) -> tuple[Frame, ...] | None:
        """The Java frames of the code at address (a leaf's pc, or a caller's
        return address - 1): the nmethod's method and what it inlined there,
        outermost first; a stub's name; unknown when the code there at
        time_ns cannot be known."""
        jvm = self._ready(pid)
        if jvm is None or not jvm.in_code(address):
            return None
        blob = self._blob(jvm, address, time_ns, wait_for_ahead=True)
        if blob is None:
            return (UNKNOWN_JIT,)
        if (address, caller) not in blob.frames:
            self._wait_for_ahead(jvm, time_ns)  # the reader names its batch's pcs, a trip per blob, not per pc
        return self._frames_at(jvm, blob, address, caller)

    def code_lifetime(self, pid: int, address: int) -> _Blob | None:
        """The blob read for address: its frames hold while it was seen there
        (see _blob); a blob found gone or replaced says so."""
        with self._lock:
            jvm = self._jvms.get(pid)
        if jvm is None:
            return None
        with jvm.lock:
            return _known_blob(jvm, address)

    def leaf_caller_skipped(self, pid: int, time_ns: int, leaf: int) -> bool:
        """A JVM keeping frame pointers, sampled before the kernel stepped its
        compiled code (it learns of it once the code heaps are read): a leaf
        in a compiled method's prologue or epilogue had its caller skipped,
        as the kernel's own check would have found."""
        if self._kernel is None:
            return False  # nothing is known of how the samples were walked
        with self._lock:
            jvm = self._jvms.get(pid)
        if jvm is None or not jvm.heaps or not jvm.preserves_frame_pointers or not jvm.in_code(leaf):
            return False
        if jvm.kernel_steps_since_ns is not None and time_ns >= jvm.kernel_steps_since_ns:
            return False
        with jvm.lock:
            blob = _known_blob(jvm, leaf)  # named just before: read if it could be
        if blob is None or blob.code is None or jvm.reader is None or jvm.thread is None:
            return False
        reader = jvm.reader
        complete = _frame_complete(reader.layout, blob.code.blob.header)
        if complete is not None and leaf < blob.start + complete:
            return True
        code = jvm.thread.run(lambda: reader.memory.read(leaf, CODE_BYTES))
        return code is not None and len(code) == CODE_BYTES and epilogue_words(code) != 0

    def _frames_at(self, jvm: _Jvm, blob: _Blob, address: int, caller: bool) -> tuple[Frame, ...]:
        frames = blob.frames.get((address, caller))
        if frames is None:
            if blob.gone:
                return (UNKNOWN_JIT,)  # gone: its methods may be too
            frames = self._blob_frames(jvm, blob, address, caller)
            # Its methods were read now: they were its methods if it is still there.
            if blob.code is not None and not self._still_there(jvm, blob):
                return (UNKNOWN_JIT,)
            _keep_frames(blob, {(address, caller): frames})
        return frames

    def _blob_frames(self, jvm: _Jvm, blob: _Blob, address: int, caller: bool) -> tuple[Frame, ...]:
        code = blob.code
        if code is None:
            if blob.name == "Interpreter":
                return (Frame("[interpreter]", JIT_MODULE, FrameKind.JIT, tier="interpreted"),)
            return (Frame(f"[stub] {blob.name}", JIT_MODULE, FrameKind.JIT, tier="stub"),)
        tier = "native" if blob.name == "native nmethod" else _TIERS.get(code.level, "compiled")
        reader = jvm.reader
        assert reader is not None
        layout = reader.layout
        # A caller's descriptor is at its return address (address + 1), or it
        # has none. A leaf's is the first after its pc: HotSpot records where
        # a scope's instructions end, so one at the leaf's own pc is the end
        # of the instruction before it, maybe another inlined method's (as
        # HotSpot's own sampler looks it up: pc_desc_near(pc + 1)); but a
        # safepoint poll's is at the poll itself (where it faults; a call's
        # oop map is at its return address, the next instruction's start).
        relative = address - blob.start
        if caller or relative not in code.safepoints or not self._polls_at(jvm, address):
            relative += 1

        if blob.pc_index is None:
            blob.pc_index = compressed.pc_index(
                code.scopes_pcs, layout.pc_desc_size, layout.pc_desc_pc_offset, layout.pc_desc_scope
            ) or compressed.PcIndex((), ())
        decode = blob.pc_index.scope_at(relative, exact=caller)
        if decode is None and caller and code.records_every_pc:
            decode = blob.pc_index.scope_at(relative)  # a leaf call into the runtime: the instructions' record, dense
        recorded = code.records_every_pc or (caller and decode is not None)
        if not recorded and self._inlines(blob, code, layout):
            # Where HotSpot recorded nothing, the nearest record is often another inlined method's.
            method = self._method(jvm, code.method, blob.first_seen_ns)
            if method is None:
                return (UNKNOWN_JIT,)
            jvm.unknown_inlining += 1
            outer = _java_frame(method, -1, tier, False)
            return (outer, INLINED_UNKNOWN) if self._expand_inlining else (outer,)
        scopes = compressed.scope_chain(code.scopes_data, decode, reader.layout.excluded_byte) if decode else ()
        if not scopes:
            method = self._method(jvm, code.method, blob.first_seen_ns)
            return (_java_frame(method, -1, tier, False),) if method is not None else (UNKNOWN_JIT,)
        frames: list[Frame] = []
        read = self._methods_read(jvm, {code.method_at(scope.method_index): blob.first_seen_ns for scope in scopes})
        for depth, scope in enumerate(reversed(scopes)):  # outermost first
            address = code.method_at(scope.method_index)
            method = self._method(jvm, address, blob.first_seen_ns, read=read.get(address))
            if method is None:
                break  # the rest is not known: the frames so far, the last one's line where it called on
            frames.append(_java_frame(method, scope.bci, tier, depth > 0))
        if not frames:
            return (UNKNOWN_JIT,)
        if not self._expand_inlining:
            return (frames[0],)
        return tuple(frames)

    @staticmethod
    def _polls_at(jvm: _Jvm, address: int) -> bool:
        """Is the instruction at address a safepoint poll, `test` of the
        polling page (x86-64: 85, after a REX prefix or not)?"""
        reader = jvm.reader
        if jvm.thread is None or reader is None:
            return False
        code = jvm.thread.run(lambda: reader.memory.read(address, 2))
        return code is not None and (code[0] == 0x85 or (0x40 <= code[0] <= 0x4F and code[1] == 0x85))

    @staticmethod
    def _inlines(blob: _Blob, code: CompiledCode, layout: HotSpotLayout) -> bool:
        """Has the compiled method any inlined method at any recorded pc?"""
        if blob.inlines is None:
            blob.inlines = compressed.has_inlined_scopes(
                code.scopes_pcs, code.scopes_data, layout.pc_desc_size, layout.pc_desc_scope, layout.excluded_byte
            )
        return blob.inlines

    def _methods_read(self, jvm: _Jvm, wanted: dict[int, int]) -> dict[int, _MethodRead]:
        """Methods (address: known alive since then) that _method would read,
        or read again, read in one trip with the JVM's count before them: a
        batch's interpreted frames, an inlining method's scopes, name a
        handful each, a trip each otherwise. One the count vouches for is
        not read (the count is kept: _method confirms it from that)."""
        due: list[tuple[int, int | None]] = []
        with jvm.lock:
            for address, alive_since_ns in wanted.items():
                if not plausible(address):
                    continue
                entry = jvm.methods.get(address)
                if entry is None or entry.confirmed_ns < alive_since_ns:
                    due.append((address, entry.collections if entry is not None else None))
        if len(due) < 2:
            return {}  # one read is one trip either way
        due = due[:MAX_METHODS_PER_TRIP]
        assert jvm.thread is not None and jvm.reader is not None
        reader = jvm.reader

        def read_all() -> tuple[int | None, list[tuple[int, JavaMethod | None]]]:
            count = self._unloading_count_now(jvm)
            return count, [(address, reader.method(address)) for address, known in due if count is None or known != count]

        read_ns = time.monotonic_ns()
        found = jvm.thread.run(read_all)
        if found is None:
            return {}
        count, methods = found
        if count is not None:
            jvm.gc_seen = (count, read_ns)  # read after read_ns: vouches from then on
        return {address: _MethodRead(read_ns, count, method) for address, method in methods}

    def _method(
        self,
        jvm: _Jvm,
        address: int,
        alive_since_ns: int,
        sampled_ns: int | None = None,
        sampled_collections: int = 0,
        read: _MethodRead | None = None,
    ) -> JavaMethod | None:
        """The Method at address, known to have been there from alive_since_ns
        on (a compiled method's is alive while its blob is); for a sample's
        (sampled_ns, with the JVM's GC count + 1 then, 0 unknown), there at
        that time. A class unloaded (in a collection) frees its Methods,
        and another class's may take their place: one read before
        alive_since_ns is read again; one replaced still
        names the samples from while it was seen, and its successor none
        from before it was read. read: the Method already read (with the
        count before it, and when), instead of a trip of its own."""
        if not plausible(address):
            return None
        assert jvm.thread is not None and jvm.reader is not None
        reader, thread = jvm.reader, jvm.thread

        def read_now() -> tuple[int | None, JavaMethod | None] | None:
            """(The count, then the Method): the one read ahead, else a trip."""
            if read is not None:
                return read.collections, read.method
            return thread.run(lambda: (self._unloading_count_now(jvm), reader.method(address)))

        now_s = time.monotonic()
        with jvm.lock:
            if now_s - jvm.methods_since > METHODS_LIFETIME_S or len(jvm.methods) >= MAX_METHODS:
                jvm.methods.clear()
                jvm.retired_methods.clear()
                jvm.methods_since = now_s
            entry = jvm.methods.get(address)
        if sampled_ns is not None and entry is not None and sampled_ns < entry.valid_from_ns:
            return self._retired_method(jvm, address, sampled_ns)
        now = time.monotonic_ns() if read is None else read.read_ns
        if entry is not None and entry.confirmed_ns < alive_since_ns and entry.collections is not None:
            # Methods are freed only when a collection unloads their class:
            # with no collection since it was read, it is still there (one
            # read of the count, not of the Method, a whole stack's worth a
            # sample on a busy JVM).
            seen = self._collections_seen(jvm, alive_since_ns)
            if seen is not None and seen[0] == entry.collections:
                entry.confirmed_ns = seen[1]
        if entry is not None and entry.confirmed_ns < alive_since_ns:
            # Read again whole: a class made from the same bytes, in the
            # memory an unloaded one freed, has the same layout at the same
            # addresses, down to its name's Symbol; only what it says differs.
            found_again = read_now()
            collections_then, again = found_again if found_again is not None else (None, None)
            if again is not None and again == entry.method:
                entry.confirmed_ns = now
                entry.collections = collections_then
            else:
                with jvm.lock:
                    jvm.retired_methods.setdefault(address, collections.deque(maxlen=8)).append(entry)
                entry = None
        if entry is None:
            if sampled_ns is not None and sampled_ns < now - EARLY_SLACK_NS and not sampled_collections:
                # Read too late: another method may have been there then. (With
                # the sample's own count, one read now that finds the same count
                # vouches for it: nothing was freed since; a busy naming thread
                # reaches its first samples late.)
                return self._retired_method(jvm, address, sampled_ns)
            found = read_now()
            gc_count, method = found if found is not None else (None, None)
            if sampled_ns is None:
                valid_from = now - EARLY_SLACK_NS  # a compiled method's: its blob says since when
            elif sampled_collections and gc_count is not None and gc_count + 1 == sampled_collections:
                valid_from = sampled_ns  # no collection since the sample: nothing was freed
            else:
                valid_from = now  # since the sample, a collection may have freed it and put another there
            with jvm.lock:
                for old in jvm.retired_methods.get(address, ()):
                    valid_from = max(valid_from, old.confirmed_ns + 1)
            entry = _MethodEntry(method, now, valid_from, gc_count)
            with jvm.lock:
                jvm.methods[address] = entry
        if sampled_ns is not None and sampled_ns < entry.valid_from_ns:
            return self._retired_method(jvm, address, sampled_ns)
        return entry.method

    @staticmethod
    def _collections_seen(jvm: _Jvm, since_ns: int) -> tuple[int, int] | None:
        """(The JVM's GC count, when it was read), read at or after since_ns:
        one read serves the samples of a batch, all taken before it."""
        seen = jvm.gc_seen
        if seen is not None and seen[1] >= since_ns:
            return seen
        assert jvm.thread is not None
        count = jvm.thread.run(lambda: HotSpotStructures._unloading_count_now(jvm))
        if count is None:
            return None
        jvm.gc_seen = (count, time.monotonic_ns())
        return jvm.gc_seen

    @staticmethod
    def _unloading_count_now(jvm: _Jvm) -> int | None:
        assert jvm.reader is not None
        unloading = jvm.unloading
        data = jvm.reader.memory.read(unloading.address, 4) if unloading is not None else None
        value = int.from_bytes(data, "little") if data is not None else None
        return value if value is not None and unloading is not None and unloading.vouches(value) else None

    def _retired_method(self, jvm: _Jvm, address: int, sampled_ns: int) -> JavaMethod | None:
        with jvm.lock:
            for old in reversed(jvm.retired_methods.get(address, ())):
                if old.valid_from_ns <= sampled_ns <= old.confirmed_ns:
                    return old.method
        return None

    def expand_recorded(
        self, pid: int, address: int, record: V8FrameSlots, leaf: bool, time_ns: int = 0
    ) -> RecordedFrames | None:
        """An interpreted frame, from its Method* and bytecode pointer."""
        if not record.interpreter:
            return None
        jvm = self._ready(pid)
        if jvm is None:
            return None
        method = self._method(jvm, record.shared, time_ns, time_ns, record.code)
        if method is not None and not method.bytecode_start <= record.bytecode_array < method.bytecode_start + max(
            method.bytecode_size, 1
        ):
            method = None  # not in its bytecodes: a frame being built (its slots its caller's)
        if method is None:
            return None
        # A busy interpreter is at the same few bytecodes sample after sample.
        bci = record.bytecode_array - method.bytecode_start
        known = jvm.interpreted_frames.get((id(method), bci))
        if known is not None and known[0] is method:
            return known[1]
        frames = RecordedFrames((_java_frame(method, bci, "interpreted", False),), False)
        if len(jvm.interpreted_frames) >= MAX_INTERPRETED_FRAMES:
            jvm.interpreted_frames.clear()
        jvm.interpreted_frames[(id(method), bci)] = (method, frames)
        return frames

    def record_walked_frames(self, pid: int, frames: list[WalkedFrame], stack: StackCopy) -> tuple[V8FrameSlots, ...]:
        """Interpreted frames walked in user space from a stack copy: their slots from the copy."""
        with self._lock:
            jvm = self._jvms.get(pid)
        if jvm is None or not jvm.heaps:
            return ()
        start, end = jvm.interpreter
        records: list[V8FrameSlots] = []
        for frame in frames[:MAX_STACK_FRAMES]:
            lookup = frame.pc if frame.index == 0 and stack.exact_pc else frame.pc - 1
            if not start <= lookup < end:
                continue
            method, bcp = stack.word_at(frame.fp + HOTSPOT_FP_METHOD), stack.word_at(frame.fp + HOTSPOT_FP_BCP)
            if method is None or bcp is None:
                continue
            records.append(V8FrameSlots(frame.index, method, 0, bcp, V8_NO_BYTECODE_OFFSET, True, late=True))
        return tuple(records)


def _java_frame(method: JavaMethod, bci: int, tier: str, inlined: bool) -> Frame:
    line = method.line_at(bci) if bci >= 0 else 0
    first = method.first_line
    return Frame(method.display, JIT_MODULE, FrameKind.JIT, method.source_file, line or first, 0, tier, inlined, line > 0, first)


def _read_blob(reader: HotSpotReader, address: int) -> tuple[CodeBlob, CompiledCode | None] | None:
    blob = reader.blob_at(address)
    if blob is None:
        return None
    compiled = reader.compiled(blob)
    if blob.name in NMETHOD_NAMES and compiled is None:
        return None  # an nmethod that does not add up: freed under the read, or being made
    return blob, compiled


def _identity_fields(reader: HotSpotReader) -> tuple[tuple[int, int], ...]:
    """(offset, width) of a blob's name, code, method and compile id (a stub's fields there are others')."""
    layout = reader.layout
    return (
        (layout.blob_name, 8),
        (layout.blob_code_begin, 4 if layout.blob_offsets else 8),
        (layout.nmethod_method, 8),
        (layout.nmethod_compile_id, 4),
    )


def _frame_complete(layout: HotSpotLayout, header: bytes) -> int | None:
    """Where a compiled method's frame is whole (bytes from its code's start), or None: not known."""
    width = layout.blob_frame_complete_bytes
    at = layout.blob_frame_complete
    if at < 0 or width not in (2, 4) or at + width > len(header):
        return None
    complete = int.from_bytes(header[at : at + width], "little", signed=True)
    return complete if complete >= 0 else None


def _keep_frames(blob: _Blob, frames: dict[tuple[int, bool], tuple[Frame, ...]]) -> None:
    for key, named in frames.items():
        if len(blob.frames) >= MAX_FRAMES_PER_BLOB:
            return
        blob.frames[key] = named


def _known_blob(jvm: _Jvm, address: int) -> _Blob | None:
    """The blob read before whose code holds address (the caller holds jvm.lock)."""
    index = bisect.bisect_right(jvm.starts, address) - 1
    return jvm.blobs[index] if index >= 0 and address < jvm.blobs[index].end else None


def _identity_bytes(reader: HotSpotReader) -> int:
    return max(offset + width for offset, width in _identity_fields(reader))


def _identity(reader: HotSpotReader, header: bytes) -> bytes | None:
    """The words of a blob's header that another blob in its place would not share."""
    if len(header) < _identity_bytes(reader):
        return None
    return b"".join(header[offset : offset + width] for offset, width in _identity_fields(reader))


def libjvm_of(pid: int) -> tuple[str, int] | None:
    """Where the process's libjvm.so is (its map_files entry) and its load bias; None if not loaded."""
    maps = read_maps(pid)
    entries = [entry for entry in maps if entry.is_file_backed and os.path.basename(entry.path) == "libjvm.so"]
    executable = [entry for entry in entries if entry.executable]
    if not executable:
        return None
    entry = executable[0]
    path = f"/proc/{pid}/map_files/{entry.start:x}-{entry.end:x}"
    with files.open_regular(path, MAX_ELF_BYTES) as handle:
        segments, _build_id = elf_format.read_load_segments_and_build_id(handle)
    return path, elf_format.load_bias(entry.start, entry.offset, segments)
