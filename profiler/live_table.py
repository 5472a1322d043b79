"""The live view's table, without a terminal: own and total samples per
function (or per source line), percentages over a recent window, times
cumulative since the start (as py-spy top shows them).
"""

from __future__ import annotations

import enum
from collections import Counter, deque
from dataclasses import dataclass, field

from profiler.profile import Frame, FrameKind

DEFAULT_WINDOW_S = 5.0


class SortColumn(enum.IntEnum):
    OWN_PERCENT = 1
    TOTAL_PERCENT = 2
    OWN_TIME = 3
    TOTAL_TIME = 4


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
class _Entry:
    time_ns: int
    own_function: RowKey | None
    total_functions: frozenset[RowKey]
    own_line: RowKey | None
    total_lines: frozenset[RowKey]


def tier_label(frame: Frame) -> str:
    if frame.inlined:
        return "inlined"
    if frame.kind is FrameKind.KERNEL:
        return "kernel"
    if frame.kind is FrameKind.UNKNOWN:
        return "unknown"
    labels = {"maglev": "Maglev", "turbofan": "TurboFan", "unoptimized": "JIT"}
    if frame.tier:
        return labels.get(frame.tier, frame.tier)
    return "JIT" if frame.kind is FrameKind.JIT else "native"


class LiveTable:
    def __init__(self, frequency_hz: int, window_s: float = DEFAULT_WINDOW_S) -> None:
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

    def _frame_keys(self, frame: Frame) -> tuple[RowKey, RowKey]:
        keys = self._keys.get(frame)
        if keys is None:
            file = frame.file or (frame.module if frame.kind is not FrameKind.JIT else "")
            function_key = RowKey(frame.name, file, 0)
            line_key = RowKey(frame.name, file, frame.line if frame.line_exact else 0)
            keys = self._keys[frame] = (function_key, line_key)
        return keys

    def add(self, time_ns: int, stack: list[Frame]) -> None:
        """One sample; stack is root first."""
        self.samples += 1
        for frame in stack:
            self.frames += 1
            unknown = frame.kind is FrameKind.UNKNOWN
            self.unknown_frames += unknown
            if frame.kind is FrameKind.JIT or frame.module == "[jit]":
                self.jit_frames += 1
                self.unnamed_jit_frames += unknown
        function_keys = [self._frame_keys(frame)[0] for frame in stack]
        line_keys = [self._frame_keys(frame)[1] for frame in stack]
        for frame, key in zip(stack, line_keys):
            self._tiers[key] = self._tiers[RowKey(key.function, key.file, 0)] = tier_label(frame)
        entry = _Entry(
            time_ns,
            function_keys[-1] if function_keys else None,
            frozenset(function_keys),
            line_keys[-1] if line_keys else None,
            frozenset(line_keys),
        )
        self._all_counts[0].add(entry.own_function, entry.total_functions)
        self._all_counts[1].add(entry.own_line, entry.total_lines)
        if time_ns >= self._window_start_ns:
            self._window.append(entry)
            self._window_counts[0].add(entry.own_function, entry.total_functions)
            self._window_counts[1].add(entry.own_line, entry.total_lines)

    def expire(self, now_ns: int) -> None:
        """Drop window samples older than the window."""
        cutoff = now_ns - self.window_ns
        dropped = False
        while self._window and self._window[0].time_ns < cutoff:
            entry = self._window.popleft()
            self._window_counts[0].add(entry.own_function, entry.total_functions, -1)
            self._window_counts[1].add(entry.own_line, entry.total_lines, -1)
            dropped = True
        if dropped:
            for counts in self._window_counts:
                counts.prune()

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
        rows = []
        for key, total in cumulative.total.items():
            if needle and needle not in key.function.lower() and needle not in key.file.lower():
                continue
            rows.append(
                Row(
                    key,
                    100.0 * window.own.get(key, 0) / in_window,
                    100.0 * window.total.get(key, 0) / in_window,
                    cumulative.own.get(key, 0) * self.seconds_per_sample,
                    total * self.seconds_per_sample,
                    self._tiers.get(key, ""),
                )
            )
        sort_key = {
            SortColumn.OWN_PERCENT: lambda row: (row.own_percent, row.own_seconds),
            SortColumn.TOTAL_PERCENT: lambda row: (row.total_percent, row.total_seconds),
            SortColumn.OWN_TIME: lambda row: (row.own_seconds, row.own_percent),
            SortColumn.TOTAL_TIME: lambda row: (row.total_seconds, row.total_percent),
        }[sort]
        rows.sort(key=lambda row: (sort_key(row), row.key.function), reverse=True)
        return rows[:limit] if limit is not None else rows
