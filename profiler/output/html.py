"""report.html: one self-contained page to look at a profile in a browser.

The page holds the profile's distinct stacks per thread (not its samples) as
JSON, and the script and style that draw it (html_page.js, html_page.css,
inlined): a flame graph on a canvas (click to zoom, search), the functions
by self and total time with their files and lines, the run's summary, a
process and thread selector, tiers told apart by colour, and with --off-cpu
views of time on and off the CPU. A diff page draws the new profile
coloured by what grew and shrank against the base.

Nothing is fetched: a Content-Security-Policy forbids every request, and
every text from the profile reaches the page as JSON (with `<` escaped) and
is shown as text, never parsed as markup. A canvas draws hundreds of
thousands of boxes where one DOM element per box (as d3-flame-graph makes)
would not open in seconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, TextIO

from profiler import __version__
from profiler.model.profile import SAMPLE_COMM, SAMPLE_PID, SAMPLE_TID, Frame, FrameKind, Profile
from profiler.output.svg import escape

# How a frame is coloured and counted in the page's tier view.
_OPTIMIZED_TIERS = {"turbofan", "maglev", "dfg", "ftl", "optimized", "c1", "c2"}
_RUNTIME_TIERS = {"builtin", "bytecode handler", "stub", "regexp", "callback"}


def tier_category(frame: Frame) -> str:
    """interpreted, baseline, optimized, inlined, runtime (a JIT runtime's
    builtins and stubs), jit (compiled code of unknown tier), native,
    kernel, unknown, and with --off-cpu wait ("(off-CPU)", "(queued)",
    "(runnable, ...)": not code) and work ("[threadpool] fs.readFile"), and
    async ("[async] handler": awaiting the frames above it, not on the stack)."""
    if frame.kind is FrameKind.WAIT:
        return "wait"
    if frame.kind is FrameKind.WORK:
        return "work"
    if frame.kind is FrameKind.ASYNC:
        return "async"
    if frame.kind is FrameKind.KERNEL:
        return "kernel"
    if frame.kind is FrameKind.UNKNOWN:
        return "unknown"
    if frame.inlined:
        return "inlined"
    if frame.kind is FrameKind.NATIVE:
        return "runtime" if frame.tier in _RUNTIME_TIERS else "native"
    if frame.tier == "interpreted":
        return "interpreted"
    if frame.tier in ("baseline", "unoptimized"):
        return "baseline"
    if frame.tier in _OPTIMIZED_TIERS:
        return "optimized"
    if frame.tier in _RUNTIME_TIERS:
        return "runtime"
    return "jit"


ROUTE_LABEL, TRACE_LABEL = "http.route", "trace_id"  # the requests the page filters by
MAX_REQUESTS = 20_000  # traces on one page; past that, samples are told apart by route alone


@dataclass
class _PageData:
    """What the page is given, as lists the script indexes."""

    functions: list[list[Any]] = field(default_factory=list)  # [name, file, line, module, category, kind]
    function_index: dict[tuple[str, str, str, str, bool], int] = field(default_factory=dict)
    frame_function: dict[int, int] = field(default_factory=dict)  # the profile being added's frame id -> function index
    threads: list[list[Any]] = field(default_factory=list)  # [pid, tid, comm]
    thread_index: dict[tuple[int, int, str], int] = field(default_factory=dict)
    stacks: dict[tuple[int, tuple[int, ...], int], list[float]] = field(default_factory=dict)  # -> [weight a, weight b]
    # The requests samples served (their labels' route and trace; 0: none), for the page's filters.
    requests: list[list[str]] = field(default_factory=lambda: [["", ""]])  # [route, trace id]
    request_index: dict[tuple[str, str], int] = field(default_factory=lambda: {("", ""): 0})
    request_of_labels: dict[int, int] = field(default_factory=dict)  # the profile being added's label set -> request

    def request_of(self, profile: Profile, label_id: int) -> int:
        found = self.request_of_labels.get(label_id)
        if found is None:
            labels = dict(profile.label_sets[label_id]) if label_id else {}
            key = (labels.get(ROUTE_LABEL, ""), labels.get(TRACE_LABEL, ""))
            if key not in self.request_index and len(self.requests) >= MAX_REQUESTS:
                key = (key[0], "")  # past the page's bound, by route alone
            found = self.request_index.get(key)
            if found is None:
                found = self.request_index[key] = len(self.requests)
                self.requests.append(list(key))
            self.request_of_labels[label_id] = found
        return found

    def function_of(self, profile: Profile, frame_id: int) -> int:
        found = self.frame_function.get(frame_id)
        if found is None:
            frame = profile.frames[frame_id]
            # One box per function as the flame graph shows it: its tiers and lines are one.
            key = (frame.name, frame.kind.value, frame.file, frame.module, frame.inlined)
            found = self.function_index.get(key)
            if found is None:
                found = self.function_index[key] = len(self.functions)
                line = frame.function_line or (0 if frame.line_exact else frame.line)
                self.functions.append([frame.name, frame.file, line, frame.module, tier_category(frame), frame.kind.value])
            self.frame_function[frame_id] = found
        return found

    def add(
        self,
        profile: Profile,
        pid: int,
        tid: int,
        comm: str,
        frame_ids: tuple[int, ...],
        weights: tuple[float, float],
        labels: int = 0,
    ) -> None:
        thread_key = (pid, tid, comm)
        thread = self.thread_index.get(thread_key)
        if thread is None:
            thread = self.thread_index[thread_key] = len(self.threads)
            self.threads.append([pid, tid, comm])
        functions = tuple(self.function_of(profile, frame_id) for frame_id in frame_ids)
        totals = self.stacks.setdefault((thread, functions, self.request_of(profile, labels)), [0.0, 0.0])
        totals[0] += weights[0]
        totals[1] += weights[1]


def _collect(data: _PageData, profile: Profile, base_side: bool = False, scale: float = 1.0) -> None:
    """Each thread's distinct stacks: [CPU, off-CPU] weights (samples, or µs
    with --off-cpu), or for a diff [new, base scaled]."""
    period_us = profile.info.sample_period_ns / 1000
    data.frame_function.clear()  # frame ids are a profile's own: a diff's two number their frames apart
    data.request_of_labels.clear()
    # Keyed by the stack tuple's identity (samples share one per distinct
    # stack), so no stack is hashed per sample.
    weights: dict[tuple[int, int, str, int, int], list[int]] = {}
    stacks: dict[int, tuple[int, ...]] = {}
    if profile.info.off_cpu or len(profile.label_sets) > 1:
        for sample in profile.samples:
            key = (sample.pid, sample.tid, sample.comm, id(sample.frame_ids), sample.labels)
            totals = weights.get(key)
            if totals is None:
                totals = weights[key] = [0, 0]
                stacks[key[3]] = sample.frame_ids
            if sample.off_cpu_ns:
                totals[1] += sample.off_cpu_ns
            else:
                totals[0] += 1
    else:
        distinct = Profile.distinct_stacks(profile.samples, by=(SAMPLE_PID, SAMPLE_TID, SAMPLE_COMM))
        weights = {(*key, 0): [count, 0] for key, (_frame_ids, count) in distinct.items()}
        stacks = {key[3]: frame_ids for key, (frame_ids, _count) in distinct.items()}
    for (pid, tid, comm, stack_id, labels), (cpu, off_cpu_ns) in weights.items():
        frame_ids = stacks[stack_id]
        if base_side:
            weight = cpu * period_us + off_cpu_ns / 1000 if profile.info.off_cpu else cpu
            data.add(profile, pid, tid, comm, frame_ids, (0, round(weight * scale, 3)), labels)
        elif profile.info.off_cpu:
            data.add(profile, pid, tid, comm, frame_ids, (round(cpu * period_us), round(off_cpu_ns / 1000)), labels)
        else:
            data.add(profile, pid, tid, comm, frame_ids, (cpu, 0), labels)


def _summary(profile: Profile, title: str) -> dict[str, Any]:
    info = profile.info
    duration_s = (info.ended_ns - info.started_ns) / 1e9 if info.ended_ns > info.started_ns else 0
    return {
        "title": title,
        "command": " ".join(info.command) if info.command else "pids " + ", ".join(map(str, info.pids)),
        "frequency_hz": info.frequency_hz,
        "duration_s": round(duration_s, 3),
        "samples": len(profile.samples) + profile.taken_samples,
        "lost": profile.losses.lost_samples,
        "unsymbolized": round(profile.unsymbolized_share(), 4),
        "off_cpu": info.off_cpu,
        "unit": profile.weight_unit,
        "incomplete_walks": sum(count for end, count in profile.walk_ends.items() if end.name != "COMPLETE"),
        # --off-cpu: waits for work not drawn (without --idle), said as the command line says it.
        "idle_left_out_s": round(profile.waits.idle_ns / 1e9, 3) if info.off_cpu and not info.idle_kept else 0,
        "warnings": info.warnings,
        "version": __version__,
    }


def write_html(profile: Profile, stream: TextIO) -> None:
    data = _PageData()
    _collect(data, profile)
    title = "jitprof: " + ("time on and off the CPU" if profile.info.off_cpu else "CPU profile")
    _write_page(stream, data, _summary(profile, title), "offcpu" if profile.info.off_cpu else "cpu")


def write_diff_html(base: Profile, new: Profile, stream: TextIO, scale: float) -> None:
    """The new profile, each box coloured by its change against the base
    (scaled to the new profile's units: see report.base_scale)."""
    data = _PageData()
    _collect(data, new)
    if new.info.off_cpu:  # one weight per side: on and off the CPU together
        for totals in data.stacks.values():
            totals[0], totals[1] = totals[0] + totals[1], 0
    _collect(data, base, base_side=True, scale=scale)
    summary = _summary(new, "jitprof diff: red grew, blue shrank")
    summary["base_command"] = " ".join(base.info.command) if base.info.command else ""
    summary["base_samples"] = len(base.samples)
    _write_page(stream, data, summary, "diff")


def _write_page(stream: TextIO, data: _PageData, summary: dict[str, Any], mode: str) -> None:
    payload = {
        "mode": mode,
        "summary": summary,
        "functions": data.functions,
        "threads": data.threads,
        "requests": data.requests,
        "stacks": [
            [thread, _compact(weights[0]), _compact(weights[1]), list(functions), request]
            for (thread, functions, request), weights in data.stacks.items()
        ],
    }
    # ASCII JSON with < escaped: nothing in it can end the script element or
    # be read as markup, whatever a program named its functions.
    text = json.dumps(payload, ensure_ascii=True, separators=(",", ":")).replace("<", "\\u003c")
    page = resources.files("profiler.output")
    script = (page / "html_page.js").read_text(encoding="utf-8")
    style = (page / "html_page.css").read_text(encoding="utf-8")
    stream.write(
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline'; "
        "style-src 'unsafe-inline'; img-src data:\">\n"
        f"<title>{escape(summary['title'])}: {escape(summary['command'][:200])}</title>\n"
        f"<style>\n{style}</style>\n</head><body>\n"
        f'<script id="profile" type="application/json">{text}</script>\n'
        f"<script>\n{script}</script>\n</body></html>\n"
    )


def _compact(weight: float) -> float | int:
    return int(weight) if weight == int(weight) else weight
