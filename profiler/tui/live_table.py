"""The live view's table, without a terminal: own and total samples per
function (or per source line), percentages over a recent window, times
cumulative since the start (as py-spy top shows them); with --off-cpu, the
time off the CPU under each function too (cumulative, inclusive).
"""

from __future__ import annotations

import enum
import heapq
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from profiler.kernel.address_spaces import JIT_MODULE
from profiler.model.profile import Frame, FrameKind

DEFAULT_WINDOW_S = 5.0
MAX_CACHED_STACKS = 200_000
MAX_ROUTES = 64  # per row: past that, a new route's samples are not told apart


class SortColumn(enum.IntEnum):
    OWN_PERCENT = 1
    TOTAL_PERCENT = 2
    OWN_TIME = 3
    TOTAL_TIME = 4
    OFF_CPU_TIME = 5  # --off-cpu: time off the CPU under the function


@dataclass(frozen=True)
class RowKey:
    function: str
    file: str
    line: int  # 0 in per-function rows, and for frames without a known line


@dataclass(frozen=True)
class Row:
    key: RowKey
    own_percent: float  # of the window's samples
    total_percent: float
    own_seconds: float  # cumulative CPU time
    total_seconds: float
    tier: str
    off_cpu_seconds: float = 0.0  # cumulative, under this function (its callees' waits included)
    route: str = ""  # the request route most of its labelled CPU samples served, with its share

    @property
    def location(self) -> str:
        if not self.key.file:
            return ""
        return f"{self.key.file}:{self.key.line}" if self.key.line else self.key.file


@dataclass
class _Counts:
    own: Counter[RowKey] = field(default_factory=Counter)
    total: Counter[RowKey] = field(default_factory=Counter)

    def add(self, own: RowKey | None, total: frozenset[RowKey], sign: int = 1) -> None:
        if own is not None:
            self.own[own] += sign
        for key in total:
            self.total[key] += sign

    def prune(self) -> None:
        for counter in (self.own, self.total):
            for key in [key for key, count in counter.items() if count <= 0]:
                del counter[key]


@dataclass(frozen=True)
class _StackParts:
    """What one distinct stack adds to the counts (worked out once per stack)."""

    own_function: RowKey | None
    total_functions: frozenset[RowKey]
    own_line: RowKey | None
    total_lines: frozenset[RowKey]
    frames: int
    unknown_frames: int
    jit_frames: int
    unnamed_jit_frames: int


@dataclass(frozen=True)
class _Entry:
    time_ns: int
    parts: _StackParts


def tier_label(frame: Frame) -> str:
    if frame.inlined:
        return "inlined"
    if frame.kind is FrameKind.KERNEL:
        return "kernel"
    if frame.kind is FrameKind.UNKNOWN:
        return "unknown"
    if frame.kind is FrameKind.ASYNC:
        return "async"
    labels = {"maglev": "Maglev", "turbofan": "TurboFan", "unoptimized": "JIT"}
    if frame.tier:
        return labels.get(frame.tier, frame.tier)
    return "JIT" if frame.kind is FrameKind.JIT else "native"


_OWN_SORTS = (SortColumn.OWN_PERCENT, SortColumn.OWN_TIME)


class LiveTable:
    def __init__(
        self,
        frequency_hz: int,
        window_s: float = DEFAULT_WINDOW_S,
        stack_view: Callable[[list[Frame]], list[Frame]] | None = None,
    ) -> None:
        self.stack_view = stack_view  # what each stack is shown as (the JS view), or as it is
        self.seconds_per_sample = 1.0 / frequency_hz
        self.window_ns = int(window_s * 1e9)
        self.samples = 0
        self.frames = self.unknown_frames = self.jit_frames = self.unnamed_jit_frames = 0
        self._window_start_ns = 0  # a reset empties the window from then on
        self._window: deque[_Entry] = deque()
        self._window_counts = (_Counts(), _Counts())  # per function, per line
        self._all_counts = (_Counts(), _Counts())
        self._tiers: dict[RowKey, str] = {}
        self._keys: dict[Frame, tuple[RowKey, RowKey]] = {}
        self._stacks: dict[tuple[int, ...], _StackParts] = {}  # by frame ids
        self._off_cpu_ns: tuple[Counter[RowKey], Counter[RowKey]] = (Counter(), Counter())  # per function, per line
        # CPU samples per route under each row (labels' http.route), cumulative.
        self._routes: tuple[dict[RowKey, Counter[str]], dict[RowKey, Counter[str]]] = ({}, {})

    def _frame_keys(self, frame: Frame) -> tuple[RowKey, RowKey]:
        keys = self._keys.get(frame)
        if keys is None:
            file = frame.file or (frame.module if frame.kind is not FrameKind.JIT else "")
            function_key = RowKey(frame.name, file, 0)
            line_key = RowKey(frame.name, file, frame.line if frame.line_exact else 0)
            keys = self._keys[frame] = (function_key, line_key)
        return keys

    def _parts(self, stack: Sequence[Frame]) -> _StackParts:
        function_keys = [self._frame_keys(frame)[0] for frame in stack]
        line_keys = [self._frame_keys(frame)[1] for frame in stack]
        for frame, function_key, line_key in zip(stack, function_keys, line_keys):
            self._tiers[line_key] = self._tiers[function_key] = tier_label(frame)
        unknown = sum(frame.kind is FrameKind.UNKNOWN for frame in stack)
        jit = [frame for frame in stack if frame.kind is FrameKind.JIT or frame.module == JIT_MODULE]
        return _StackParts(
            function_keys[-1] if function_keys else None,
            frozenset(function_keys),
            line_keys[-1] if line_keys else None,
            frozenset(line_keys),
            len(stack),
            unknown,
            len(jit),
            sum(frame.kind is FrameKind.UNKNOWN for frame in jit),
        )

    def add(self, time_ns: int, stack: Sequence[Frame]) -> None:
        """One sample; stack is root first."""
        self._count(time_ns, self._parts(stack))

    def forget_stacks(self) -> None:
        """The frames' names changed (their originals found): stacks are named anew."""
        self._stacks.clear()

    def add_ids(
        self, time_ns: int, frame_ids: tuple[int, ...], frames: Sequence[Frame], off_cpu_ns: int = 0, route: str = ""
    ) -> None:
        """One sample by frame ids (a stack seen before costs one lookup); a
        wait's off_cpu_ns go to the off-CPU column, not the CPU's; route:
        the request route it served (its http.route label), if any."""
        parts = self._stacks.get(frame_ids)
        if parts is None:
            if len(self._stacks) >= MAX_CACHED_STACKS:
                self._stacks.clear()
            stack = [frames[frame_id] for frame_id in frame_ids]
            parts = self._stacks[frame_ids] = self._parts(self.stack_view(stack) if self.stack_view else stack)
        if off_cpu_ns:
            for counter, keys in zip(self._off_cpu_ns, (parts.total_functions, parts.total_lines)):
                for key in keys:
                    counter[key] += off_cpu_ns
            return
        self._count(time_ns, parts)
        if route:
            for routes, keys in zip(self._routes, (parts.total_functions, parts.total_lines)):
                for key in keys:
                    counts = routes.setdefault(key, Counter())
                    if route in counts or len(counts) < MAX_ROUTES:
                        counts[route] += 1

    @property
    def has_routes(self) -> bool:
        return bool(self._routes[0])

    def _route(self, index: int, key: RowKey) -> str:
        counts = self._routes[index].get(key)
        if not counts:
            return ""
        route, count = counts.most_common(1)[0]
        return f"{route} {100 * count / sum(counts.values()):.0f}%"

    def _count(self, time_ns: int, parts: _StackParts) -> None:
        self.samples += 1
        self.frames += parts.frames
        self.unknown_frames += parts.unknown_frames
        self.jit_frames += parts.jit_frames
        self.unnamed_jit_frames += parts.unnamed_jit_frames
        self._all_counts[0].add(parts.own_function, parts.total_functions)
        self._all_counts[1].add(parts.own_line, parts.total_lines)
        if time_ns >= self._window_start_ns:
            self._window.append(_Entry(time_ns, parts))
            self._window_counts[0].add(parts.own_function, parts.total_functions)
            self._window_counts[1].add(parts.own_line, parts.total_lines)

    def expire(self, now_ns: int) -> None:
        """Drop window samples older than the window."""
        cutoff = now_ns - self.window_ns
        dropped = False
        while self._window and self._window[0].time_ns < cutoff:
            parts = self._window.popleft().parts
            self._window_counts[0].add(parts.own_function, parts.total_functions, -1)
            self._window_counts[1].add(parts.own_line, parts.total_lines, -1)
            dropped = True
        if dropped:
            for counts in self._window_counts:
                counts.prune()

    @property
    def window_start_ns(self) -> int:
        return self._window_start_ns

    def reset_window(self, now_ns: int) -> None:
        self._window_start_ns = now_ns
        self._window.clear()
        self._window_counts = (_Counts(), _Counts())

    @property
    def window_samples(self) -> int:
        return len(self._window)

    def rows(self, by_line: bool, sort: SortColumn, filter_text: str = "", limit: int | None = None) -> list[Row]:
        index = 1 if by_line else 0
        window, cumulative = self._window_counts[index], self._all_counts[index]
        in_window = max(len(self._window), 1)
        needle = filter_text.lower()
        off_cpu = self._off_cpu_ns[index]
        first, second = {
            SortColumn.OWN_PERCENT: (window.own, cumulative.own),
            SortColumn.TOTAL_PERCENT: (window.total, cumulative.total),
            SortColumn.OWN_TIME: (cumulative.own, window.own),
            SortColumn.TOTAL_TIME: (cumulative.total, window.total),
            SortColumn.OFF_CPU_TIME: (off_cpu, cumulative.total),
        }[sort]

        def wanted(key: RowKey) -> bool:
            return not needle or needle in key.function.lower() or needle in key.file.lower()

        def order(key: RowKey) -> tuple[int, int, str]:
            return (first.get(key, 0), second.get(key, 0), key.function)

        # Sorting by own time, only leaves can lead: rank those first (a
        # service has thousands of functions; the screen shows a few dozen).
        if sort is SortColumn.OFF_CPU_TIME:
            pool: Counter[RowKey] | dict[RowKey, int] = off_cpu
        else:
            pool = cumulative.own if sort in _OWN_SORTS else cumulative.total
        candidates = [key for key in pool if wanted(key)]
        if limit is None or len(candidates) < limit:
            candidates += (
                [key for key in cumulative.total if key not in cumulative.own and wanted(key)] if sort in _OWN_SORTS else []
            )
        chosen = (
            heapq.nlargest(limit, candidates, key=order) if limit is not None else sorted(candidates, key=order, reverse=True)
        )
        return [
            Row(
                key,
                100.0 * window.own.get(key, 0) / in_window,
                100.0 * window.total.get(key, 0) / in_window,
                cumulative.own.get(key, 0) * self.seconds_per_sample,
                cumulative.total.get(key, 0) * self.seconds_per_sample,
                self._tiers.get(key, ""),
                off_cpu.get(key, 0) / 1e9,
                self._route(index, key),
            )
            for key in chosen
        ]
