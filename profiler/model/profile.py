"""The in-memory profile: samples whose stacks point at interned frames."""

from __future__ import annotations

import enum
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from profiler.kernel.events import MAX_STACK_FRAMES, KernelTraffic, WalkEnd

# A sample's frames, inlined ones and the kernel's included: the walked
# frames with a few inlined functions each. A longer stack is cut at its
# root end by the symbolizer, and refused in a raw file (not one jitprof wrote).
MAX_SAMPLE_FRAMES = 8 * MAX_STACK_FRAMES


class FrameKind(str, enum.Enum):
    NATIVE = "native"
    KERNEL = "kernel"
    JIT = "jit"
    WAIT = "wait"  # --off-cpu: what the thread did off the CPU ("(off-CPU)", "(idle)", ...), not code
    WORK = "work"  # --off-cpu: a threadpool's work, queued by the frames above ("[threadpool] fs.readFile")
    ASYNC = "async"  # an async function awaiting the frames above ("[async] handler app.js:4"), not on the stack
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Frame:
    """One frame of a stack, as shown: a function and where it is."""

    name: str
    module: str
    kind: FrameKind
    file: str = ""
    line: int = 0
    column: int = 0
    tier: str = ""  # for JIT code: interpreted, baseline, maglev, turbofan, builtin, ...
    inlined: bool = False  # compiled into its caller's code (the caller is the frame before)
    line_exact: bool = False  # line/column are where this frame was, not where its function begins
    function_line: int = 0  # where the function begins (1-based), when known
    function_column: int = 0  # and its column (1-based), for JS: where V8 says it begins

    @property
    def symbolized(self) -> bool:
        return self.kind is not FrameKind.UNKNOWN


NO_LABELS = 0  # Sample.labels of a sample without any
# Waits kept one by one (each with its moment, about 200 bytes in memory).
# Past them, a wait with the same thread, stack and labels as an earlier one
# is added into it: a storm of waits (100,000 a second: a server's threads in
# timed waits) keeps jitprof's memory bounded by its distinct stacks.
MAX_SEPARATE_WAITS = 100_000
MAX_LABEL_SETS = 1 << 18  # distinct label sets of one profile


@dataclass(slots=True)  # an hour of a busy machine is millions of these (not frozen: a frozen one is built several times slower)
class Sample:
    """One sample: a thread's stack at a moment (or a wait, with its length)."""

    time_ns: int
    pid: int
    tid: int
    comm: str
    frame_ids: tuple[int, ...]  # root first, leaf last
    walk_end: WalkEnd
    off_cpu_ns: int = 0  # --off-cpu: 0 for a CPU sample, else the nanoseconds the thread waited with this stack
    labels: int = 0  # its label set: an index into Profile.label_sets (NO_LABELS: none)

    @property
    def off_cpu(self) -> bool:
        return self.off_cpu_ns != 0


# Samples' fields as functions: map() and sort keys over hundreds of thousands
# of samples run at C speed, where a loop or a lambda per sample does not.
SAMPLE_TIME_NS, SAMPLE_PID, SAMPLE_TID, SAMPLE_COMM, SAMPLE_FRAME_IDS = (
    attrgetter(name) for name in ("time_ns", "pid", "tid", "comm", "frame_ids")
)
StackKey = tuple[Any, ...]  # a sample's fields (by default its command name and pid), then id(frame_ids)


@dataclass
class RunInfo:
    """What was profiled, how and when."""

    command: list[str]
    pids: list[int]
    frequency_hz: int
    root_by_pid: bool = False  # root frame "comm-PID" instead of "comm"
    started_ns: int = 0
    ended_ns: int = 0
    off_cpu: bool = False  # --off-cpu: samples include waits, weighted by their time
    idle_kept: bool = False  # --idle: waits for work are in the samples too
    shortest_wait_ns: int = 0  # --off-cpu-min: shorter waits are summed per thread, not recorded one by one
    warnings: list[str] = field(default_factory=list)  # what the run said after its summary (warnings, hints)

    @property
    def sample_period_ns(self) -> int:
        """The CPU time one CPU sample stands for."""
        return 1_000_000_000 // self.frequency_hz


@dataclass
class LossCounts:
    """Samples lost, by why."""

    ringbuf_full: int = 0
    malformed: int = 0
    kernel_stack_failed: int = 0
    process_events_lost: int = 0
    not_symbolised_in_time: int = 0  # the run could not wait for them at the end
    backlog_full: int = 0  # taken from the ring while too many others waited to be named

    @property
    def lost_samples(self) -> int:
        return self.ringbuf_full + self.malformed + self.not_symbolised_in_time + self.backlog_full


@dataclass
class StackWeight:
    """What the samples of one stack add up to."""

    cpu_samples: int = 0
    off_cpu_ns: int = 0
    waits: int = 0  # off-CPU records

    def total_ns(self, period_ns: int) -> int:
        return self.cpu_samples * period_ns + self.off_cpu_ns


@dataclass
class WaitTotals:
    """--off-cpu: time off the CPU that is not in the samples as stacks of its own."""

    idle_ns: int = 0  # waits for work left out (without --idle)
    idle_waits: int = 0
    short_ns: int = 0  # waits under --off-cpu-min (in the samples, as one frame per thread)
    short_waits: int = 0
    untracked: int = 0  # waits not timed: the kernel's thread table was full
    runnable_ns: int = 0  # preempted, waiting for a CPU (in the samples, as one frame per thread)


@dataclass(frozen=True)
class ModuleFile:
    """The file behind a module name, for naming its frames later (jitprof report)."""

    path: str
    build_id: str


@dataclass
class Profile:
    """A run's samples, their frames and what went wrong, for every output."""

    info: RunInfo
    frames: list[Frame] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    losses: LossCounts = field(default_factory=LossCounts)
    traffic: KernelTraffic = field(default_factory=KernelTraffic)
    # Files whose frames were left unnamed (file+0x...), by module name.
    modules: dict[str, ModuleFile] = field(default_factory=dict)
    walk_ends: Counter[WalkEnd] = field(default_factory=Counter)
    # A JS frame as its source map has it (original file, line, name), by the generated frame.
    originals: dict[Frame, Frame] = field(default_factory=dict)
    # The GNU build-id of each native module with one, by module name (for formats that carry mappings).
    build_ids: dict[str, str] = field(default_factory=dict)
    taken_samples: int = 0  # handed on and forgotten (--push): see take_samples
    waits: WaitTotals = field(default_factory=WaitTotals)
    # The samples' label sets ((key, value) pairs, in the order their source
    # gave them), interned: a sample's labels index it; the first is none.
    label_sets: list[tuple[tuple[str, str], ...]] = field(default_factory=lambda: [()])
    labels_dropped: int = 0  # samples whose new label set came past MAX_LABEL_SETS
    # Waits kept one by one before the next are summed into earlier ones
    # (0: never; a recording sets MAX_SEPARATE_WAITS, views never sum).
    separate_waits: int = 0
    waits_summed: int = 0  # waits added into an earlier sample (past separate_waits)
    _frame_ids: dict[Frame, int] = field(default_factory=dict, repr=False)
    _label_ids: dict[tuple[tuple[str, str], ...], int] = field(default_factory=lambda: {(): NO_LABELS}, repr=False)
    _stacks: dict[tuple[int, ...], tuple[int, ...]] = field(default_factory=dict, repr=False)
    _taken_frames: tuple[int, int] = field(default=(0, 0), repr=False)  # _frame_counts of the taken samples
    _counted: tuple[tuple[int, int, int, bool, bool], Counter[tuple[str, tuple[int, ...]]]] | None = field(
        default=None, repr=False
    )
    _distinct: tuple[tuple[int, int, int], dict[StackKey, tuple[tuple[int, ...], int]]] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _separate_waits: int = field(default=0, repr=False)
    _summed_into: dict[tuple[Any, ...], Sample] = field(default_factory=dict, repr=False)

    def intern_labels(self, labels: tuple[tuple[str, str], ...]) -> int:
        """labels' id; NO_LABELS once MAX_LABEL_SETS are known (a trace id
        per request: the sets of a long run are bounded, its labels are not kept)."""
        label_id = self._label_ids.get(labels)
        if label_id is None:
            if len(self.label_sets) >= MAX_LABEL_SETS:
                self.labels_dropped += 1
                return NO_LABELS
            with self._lock:
                label_id = self._label_ids.setdefault(labels, len(self.label_sets))
                if label_id == len(self.label_sets):
                    self.label_sets.append(labels)
        return label_id

    def keep_totals_of(self, source: Profile) -> Profile:
        """A view of source (its samples, or copies of them) says what source
        counted beside its samples: the waits left out or summed, the build
        ids, the labels dropped."""
        self.waits = source.waits
        self.build_ids = source.build_ids
        self.waits_summed = source.waits_summed  # a view adds nothing into its samples (separate_waits 0)
        self.labels_dropped = source.labels_dropped
        return self.share_labels(source)

    def share_labels(self, source: Profile) -> Profile:
        """A view of source's samples (a copy of the profile) reads their labels from source's sets."""
        self.label_sets, self._label_ids = source.label_sets, source._label_ids
        return self

    def labels_of(self, sample: Sample) -> dict[str, str]:
        return dict(self.label_sets[sample.labels]) if sample.labels else {}

    def intern(self, frame: Frame) -> int:
        frame_id = self._frame_ids.get(frame)
        if frame_id is None:
            with self._lock:
                frame_id = self._frame_ids.setdefault(frame, len(self.frames))
                if frame_id == len(self.frames):
                    self.frames.append(frame)
        return frame_id

    def intern_stack(self, frame_ids: tuple[int, ...]) -> tuple[int, ...]:
        """One tuple for every sample with this stack (a program repeats its stacks)."""
        return self._stacks.setdefault(frame_ids, frame_ids)

    def add(self, sample: Sample) -> None:
        with self._lock:
            self.walk_ends[sample.walk_end] += 1
            if sample.off_cpu_ns and self.separate_waits:
                if self._separate_waits < self.separate_waits:
                    self._separate_waits += 1
                else:
                    key = (sample.pid, sample.tid, sample.comm, sample.frame_ids, sample.walk_end, sample.labels)
                    earlier = self._summed_into.setdefault(key, sample)
                    if earlier is not sample:
                        earlier.off_cpu_ns += sample.off_cpu_ns
                        self.waits_summed += 1
                        return
            self.samples.append(sample)

    def reindex_frames(self) -> None:
        """After frames were loaded into the list directly (a saved profile)."""
        self._frame_ids = {frame: frame_id for frame_id, frame in enumerate(self.frames)}

    def samples_since(self, index: int) -> list[Sample]:
        """Samples added after the first `index` (for readers that follow along)."""
        with self._lock:
            return self.samples[index:]

    def take_samples(self) -> list[Sample]:
        """The samples so far, which the profile then forgets (--push keeps
        none after sending them); their frame ids stay valid until
        reset_frames."""
        with self._lock:
            taken, self.samples = self.samples, []
            self.taken_samples += len(taken)
            self._stacks = {}
            self._summed_into = {}
            total, unknown = _frame_counts(self.frames, self.distinct_stacks(taken))
            self._taken_frames = (self._taken_frames[0] + total, self._taken_frames[1] + unknown)
        return taken

    def reset_frames(self) -> None:
        """A new frame table (the old list stays with whoever holds it): only
        on the thread that interns, with every remembered id forgotten."""
        with self._lock:
            self.frames = []
            self._frame_ids = {}

    def snapshot(self) -> list[Sample]:
        with self._lock:
            return list(self.samples)

    def root_label(self, sample: Sample) -> str:
        """The process frame at the root of every stack."""
        return self.process_label(sample.comm, sample.pid)

    def process_label(self, comm: str, pid: int) -> str:
        comm = comm or str(pid)
        return f"{comm}-{pid}" if self.info.root_by_pid else comm

    @property
    def weight_unit(self) -> str:
        """What stack_counts counts: samples, or with --off-cpu time (µs)."""
        return "µs" if self.info.off_cpu else "samples"

    def stack_counts(self) -> Counter[tuple[str, tuple[int, ...]]]:
        """Samples per (root label, frame ids) (with --off-cpu, microseconds
        on and off the CPU): writers walk each distinct stack once, however
        many samples share it."""
        # Every format asks (six for one `jitprof report`): counted once for
        # the samples so far (they are only ever appended, or all taken).
        key = (self.taken_samples, len(self.samples), self.waits_summed, self.info.root_by_pid, self.info.off_cpu)
        if self._counted is not None and self._counted[0] == key:
            return Counter(self._counted[1])
        counts: Counter[tuple[str, tuple[int, ...]]] = Counter()
        if self.info.off_cpu:
            period_ns = self.info.sample_period_ns
            for stack_key, weight in self.stack_weights().items():
                counts[stack_key] = microseconds(weight.total_ns(period_ns))
        else:
            for (comm, pid, _), (frame_ids, count) in self.samples_by_stack().items():
                counts[(self.process_label(comm, pid), frame_ids)] += count
        self._counted = (key, counts)
        return Counter(counts)

    @staticmethod
    def stack_keys(
        samples: list[Sample], by: tuple[Callable[[Sample], Any], ...] = (SAMPLE_COMM, SAMPLE_PID)
    ) -> Iterator[StackKey]:
        """Each sample's key in distinct_stacks, in order."""
        return zip(*(map(field_of, samples) for field_of in by), map(id, map(SAMPLE_FRAME_IDS, samples)))

    @staticmethod
    def distinct_stacks(
        samples: list[Sample], by: tuple[Callable[[Sample], Any], ...] = (SAMPLE_COMM, SAMPLE_PID)
    ) -> dict[StackKey, tuple[tuple[int, ...], int]]:
        """(frame ids, samples) per (the by fields: command name and pid,
        unless told; id of the frame-id tuple), in order of first appearance.
        Counted by the tuple's identity (samples share one per distinct
        stack: intern_stack, and the saved profile's reader), so no stack is
        hashed per sample; equal stacks in distinct tuples are separate
        entries, which callers add up."""
        identities = list(map(id, map(SAMPLE_FRAME_IDS, samples)))
        counted = Counter(zip(*(map(field_of, samples) for field_of in by), identities))  # stack_keys, ids made once
        stacks = dict(zip(identities, map(SAMPLE_FRAME_IDS, samples)))
        return {key: (stacks[key[-1]], count) for key, count in counted.items()}

    def samples_by_stack(self) -> dict[StackKey, tuple[tuple[int, ...], int]]:
        """distinct_stacks of all the samples, counted once for every output
        while they stay as they are (only ever appended to, or all taken).
        Callers do not change what it returns."""
        key = (id(self.samples), self.taken_samples, len(self.samples))
        if self._distinct is None or self._distinct[0] != key:
            self._distinct = (key, self.distinct_stacks(self.samples))
        return self._distinct[1]

    def stack_weights(self) -> dict[tuple[str, tuple[int, ...]], StackWeight]:
        """CPU samples and time off the CPU per (root label, frame ids)."""
        weights: dict[tuple[str, tuple[int, ...]], StackWeight] = {}
        for sample in self.samples:
            key = (self.root_label(sample), sample.frame_ids)
            weight = weights.get(key)
            if weight is None:
                weight = weights[key] = StackWeight()
            if sample.off_cpu_ns:
                weight.off_cpu_ns += sample.off_cpu_ns
                weight.waits += 1
            else:
                weight.cpu_samples += 1
        return weights

    def stack(self, sample: Sample) -> list[Frame]:
        return [self.frames[frame_id] for frame_id in sample.frame_ids]

    def unsymbolized_share(self) -> float:
        """Share of frame occurrences (over all samples, taken ones too) left unnamed."""
        total, unknown = _frame_counts(self.frames, self.samples_by_stack())
        total += self._taken_frames[0]
        unknown += self._taken_frames[1]
        return unknown / total if total else 0.0


def microseconds(nanoseconds: int) -> int:
    return (nanoseconds + 500) // 1000


def _frame_counts(frames: list[Frame], stacks: dict[StackKey, tuple[tuple[int, ...], int]]) -> tuple[int, int]:
    """(frame occurrences, of which unnamed): counted per distinct stack."""
    unnamed = [not frame.symbolized for frame in frames]
    total = unknown = 0
    for frame_ids, count in stacks.values():
        total += len(frame_ids) * count
        unknown += sum(unnamed[frame_id] for frame_id in frame_ids) * count
    return total, unknown
