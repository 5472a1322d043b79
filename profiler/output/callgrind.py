"""callgrind's format (callgrind.out.*), for KCachegrind, QCachegrind and
callgrind_annotate: per function and file, self samples per source line,
and for each caller line the samples spent in each callee (inclusive cost).
Counts are samples; "calls" are the samples a call was seen in."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import IO

from profiler import __version__
from profiler.model.profile import Frame, FrameKind, Profile
from profiler.safety.terminal import printable


@dataclass(frozen=True)
class FunctionKey:
    file: str
    name: str


@dataclass
class _Costs:
    own: Counter[int] = field(default_factory=Counter)  # line -> samples
    calls: Counter[tuple[FunctionKey, int, int]] = field(default_factory=Counter)  # (callee, its line, call line)


def function_key(frame: Frame) -> FunctionKey:
    name = frame.name + (" [inlined]" if frame.inlined else "") + (" [kernel]" if frame.kind is FrameKind.KERNEL else "")
    # A line break in a name would start a line of the reader's (fl=, fn=, costs).
    return FunctionKey(printable(frame.file or frame.module or "???"), printable(name))


def _line(frame: Frame) -> int:
    return frame.line if frame.line_exact else frame.function_line


def _call_order(item: tuple[tuple[FunctionKey, int, int], int]) -> tuple[str, str, int, int]:
    (callee, callee_line, call_line), _ = item
    return (callee.file, callee.name, callee_line, call_line)


class _Names:
    """callgrind's name compression: `(id) name` the first time, `(id)` after."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}

    def __call__(self, name: str) -> str:
        known = self._ids.get(name)
        if known is not None:
            return f"({known})"
        self._ids[name] = len(self._ids) + 1
        return f"({len(self._ids)}) {name}"


def write_callgrind(profile: Profile, stream: IO[bytes]) -> None:
    costs: dict[FunctionKey, _Costs] = defaultdict(_Costs)
    keys = [function_key(frame) for frame in profile.frames]
    lines = [_line(frame) for frame in profile.frames]
    for (_, ids), count in profile.stack_counts().items():
        if not ids:
            continue
        costs[keys[ids[-1]]].own[lines[ids[-1]]] += count
        seen: set[tuple[FunctionKey, FunctionKey, int, int]] = set()
        for caller, callee in zip(ids, ids[1:]):
            edge = (keys[caller], keys[callee], lines[callee], lines[caller])
            if edge in seen:  # recursion: a sample counts once per call edge
                continue
            seen.add(edge)
            costs[keys[caller]].calls[(keys[callee], lines[callee], lines[caller])] += count
    files, functions = _Names(), _Names()
    command = " ".join(profile.info.command) or "pid " + ", ".join(map(str, profile.info.pids))
    out = [
        "# callgrind format",
        "version: 1",
        f"creator: jitprof {__version__}",
        f"cmd: {printable(command)}",
        "positions: line",
        "events: Samples",
        f"summary: {len(profile.samples)}",
        "",
    ]
    for key, cost in sorted(costs.items(), key=lambda item: (item[0].file, item[0].name)):
        out.append(f"fl={files(key.file)}")
        out.append(f"fn={functions(key.name)}")
        for line, count in sorted(cost.own.items()):
            out.append(f"{line} {count}")
        for (called, callee_line, call_line), count in sorted(cost.calls.items(), key=_call_order):
            out.append(f"cfl={files(called.file)}")
            out.append(f"cfn={functions(called.name)}")
            out.append(f"calls={count} {callee_line}")
            out.append(f"{call_line} {count}")
        out.append("")
    stream.write("\n".join(out).encode("utf-8", "surrogatepass"))
