"""callgrind's format (callgrind.out.*), for KCachegrind, QCachegrind and
callgrind_annotate: per function and file, self samples per source line,
and for each caller line the samples spent in each callee (inclusive cost).
Counts are samples; "calls" are the samples a call was seen in. With
--off-cpu two events instead: CPU and OffCPU, both in microseconds."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import IO, Any

from profiler import __version__
from profiler.model.profile import Frame, FrameKind, Profile, microseconds
from profiler.safety.terminal import printable


@dataclass(frozen=True)
class FunctionKey:
    file: str
    name: str


@dataclass
class _Costs:
    own: dict[int, list[int]] = field(default_factory=dict)  # line -> cost per event
    calls: dict[tuple[FunctionKey, int, int], list[int]] = field(default_factory=dict)  # (callee, its line, call line)
    call_counts: Counter[tuple[FunctionKey, int, int]] = field(default_factory=Counter)  # stacks the call was seen in


def _add(costs: dict[Any, list[int]], key: Any, values: list[int]) -> None:
    total = costs.get(key)
    if total is None:
        costs[key] = list(values)
    else:
        for index, value in enumerate(values):
            total[index] += value


def _stack_costs(profile: Profile) -> tuple[list[str], dict[tuple[str, tuple[int, ...]], list[int]]]:
    """The events, and their costs per stack: samples, or CPU and off-CPU microseconds."""
    if not profile.info.off_cpu:
        return ["Samples"], {key: [count] for key, count in profile.stack_counts().items()}
    period_ns = profile.info.sample_period_ns
    return ["CPU", "OffCPU"], {
        key: [microseconds(weight.cpu_samples * period_ns), microseconds(weight.off_cpu_ns)]
        for key, weight in profile.stack_weights().items()
    }


def function_key(frame: Frame) -> FunctionKey:
    name = frame.name + (" [inlined]" if frame.inlined else "") + (" [kernel]" if frame.kind is FrameKind.KERNEL else "")
    # A line break in a name would start a line of the reader's (fl=, fn=, costs).
    return FunctionKey(printable(frame.file or frame.module or "???"), printable(name))


def _line(frame: Frame) -> int:
    return frame.line if frame.line_exact else frame.function_line


def _call_order(item: tuple[tuple[FunctionKey, int, int], list[int]]) -> tuple[str, str, int, int]:
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
    events, stack_costs = _stack_costs(profile)
    for (_, ids), values in stack_costs.items():
        if not ids:
            continue
        _add(costs[keys[ids[-1]]].own, lines[ids[-1]], values)
        seen: set[tuple[FunctionKey, FunctionKey, int, int]] = set()
        for caller, callee in zip(ids, ids[1:]):
            edge = (keys[caller], keys[callee], lines[callee], lines[caller])
            if edge in seen:  # recursion: a sample counts once per call edge
                continue
            seen.add(edge)
            call = (keys[callee], lines[callee], lines[caller])
            _add(costs[keys[caller]].calls, call, values)
            costs[keys[caller]].call_counts[call] += values[0] if len(values) == 1 else 1
    files, functions = _Names(), _Names()
    command = " ".join(profile.info.command) or "pid " + ", ".join(map(str, profile.info.pids))
    out = [
        "# callgrind format",
        "version: 1",
        f"creator: jitprof {__version__}",
        f"cmd: {printable(command)}",
        "positions: line",
    ]
    if profile.info.off_cpu:
        out += ["event: CPU : time on the CPU (µs)", "event: OffCPU : time off the CPU, waiting (µs)"]
    summary = [sum(values[index] for values in stack_costs.values()) for index in range(len(events))]
    out += [
        f"events: {' '.join(events)}",
        f"summary: {' '.join(map(str, summary))}" if profile.info.off_cpu else f"summary: {len(profile.samples)}",
        "",
    ]
    for key, cost in sorted(costs.items(), key=lambda item: (item[0].file, item[0].name)):
        out.append(f"fl={files(key.file)}")
        out.append(f"fn={functions(key.name)}")
        for line, values in sorted(cost.own.items()):
            out.append(f"{line} {' '.join(map(str, values))}")
        for call, values in sorted(cost.calls.items(), key=_call_order):
            called, callee_line, call_line = call
            out.append(f"cfl={files(called.file)}")
            out.append(f"cfn={functions(called.name)}")
            out.append(f"calls={cost.call_counts[call]} {callee_line}")
            out.append(f"{call_line} {' '.join(map(str, values))}")
        out.append("")
    stream.write("\n".join(out).encode("utf-8", "surrogatepass"))
