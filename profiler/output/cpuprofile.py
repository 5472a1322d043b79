"""Chrome/V8 CPU profile (.cpuprofile), as DevTools' Performance panel, VS Code
and `node --cpu-prof` read it: a call tree of nodes, the node of each sample
in time order, the gaps between samples, and per-node line ticks.

A node is a function in a calling context, so frames of one function at
different lines share a node; their exact lines become positionTicks. The
async functions awaiting a sample's code are left out: the format's tree is
the stack, and DevTools reads every node as a call.
"""

from __future__ import annotations

import json
import operator
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import IO

from profiler.model.profile import SAMPLE_TIME_NS, Frame, FrameKind, Profile, StackKey


@dataclass(frozen=True)
class CallFrame:
    function_name: str
    url: str
    line_number: int  # 0-based, -1 when unknown
    column_number: int

    def as_json(self, script_ids: dict[str, str]) -> dict[str, object]:
        return {
            "functionName": self.function_name,
            "scriptId": script_ids.get(self.url, "0"),
            "url": self.url,
            "lineNumber": self.line_number,
            "columnNumber": self.column_number,
        }


@dataclass
class _Node:
    node_id: int
    call_frame: CallFrame
    children: dict[CallFrame, _Node] = field(default_factory=dict)
    hit_count: int = 0
    line_ticks: Counter[int] = field(default_factory=Counter)


def call_frame(frame: Frame) -> CallFrame:
    """As V8 writes it: a JS function by its bare name ("" when anonymous), its
    script as a URL, where it begins (0-based); an inlined function is a
    node of its own under its caller, named as itself. Native and kernel
    frames keep their names, with their file (or "[kernel]") as the URL."""
    line = frame.function_line or (frame.line if not frame.line_exact else 0)
    if frame.kind is FrameKind.JIT and frame.file:
        column = frame.function_column - 1 if frame.function_line and frame.function_column else 0
        return CallFrame(_bare_name(frame), _script_url(frame.file), line - 1 if line else -1, column if line else -1)
    url = "[kernel]" if frame.kind is FrameKind.KERNEL else frame.file or frame.module
    return CallFrame(frame.name, url, line - 1 if line else -1, 0 if line else -1)


def _bare_name(frame: Frame) -> str:
    """ "inner app.js:8" is `inner`; "(anonymous) app.js:1" and "(anonymous) app.js:1:29" are ""."""
    base = frame.file.rsplit("/", 1)[-1]
    match = re.fullmatch(rf"(.*) (?:{re.escape(frame.file)}|{re.escape(base)}):\d+(?::\d+)?", frame.name, re.S)
    name = match.group(1) if match else frame.name
    return "" if name == "(anonymous)" else name


def _script_url(file: str) -> str:
    return f"file://{file}" if file.startswith("/") else file


def write_cpuprofile(profile: Profile, stream: IO[bytes]) -> None:
    root = _Node(1, CallFrame("(root)", "", -1, -1))
    nodes = [root]
    call_frames = [call_frame(frame) for frame in profile.frames]
    # CPU samples only: DevTools has no place for time off the CPU (its (idle) is the program's, not a thread's wait).
    samples = [sample for sample in profile.samples if not sample.off_cpu_ns] if profile.info.off_cpu else profile.samples
    distinct = profile.samples_by_stack() if len(samples) == len(profile.samples) else None
    sampled_ns = list(map(SAMPLE_TIME_NS, samples))
    if any(map(operator.lt, sampled_ns[1:], sampled_ns)):
        samples = sorted(samples, key=SAMPLE_TIME_NS)
        sampled_ns.sort()
        distinct = None
    # One tree walk per distinct stack (a process's), then per sample only its node.
    node_ids: dict[StackKey, int] = {}
    for key, (frame_ids, count) in (distinct if distinct is not None else Profile.distinct_stacks(samples)).items():
        comm, pid, _ = key
        label = profile.process_label(comm, pid)
        node = _child(root, CallFrame(label, "", -1, -1), nodes)
        for frame_id in frame_ids:
            if profile.frames[frame_id].kind is FrameKind.ASYNC:
                continue  # a .cpuprofile's tree is the stack: it has no place for the functions awaiting it
            node = _child(node, call_frames[frame_id], nodes)
        node.hit_count += count
        if frame_ids:
            leaf = profile.frames[frame_ids[-1]]
            if leaf.line_exact and leaf.line:
                node.line_ticks[leaf.line] += count
        node_ids[key] = node.node_id
    sample_nodes = list(map(node_ids.__getitem__, Profile.stack_keys(samples)))
    times = [time_ns // 1000 for time_ns in sampled_ns]
    script_ids: dict[str, str] = {}
    for node in nodes:
        url = node.call_frame.url
        if url and url not in script_ids:
            script_ids[url] = str(len(script_ids) + 1)
    start = times[0] if times else profile.info.started_ns // 1000
    deltas = [later - earlier for earlier, later in zip([start, *times[:-1]], times)]
    records = []
    for node in nodes:
        record: dict[str, object] = {
            "id": node.node_id,
            "callFrame": node.call_frame.as_json(script_ids),
            "hitCount": node.hit_count,
        }
        if node.children:
            record["children"] = [child.node_id for child in node.children.values()]
        if node.line_ticks:
            record["positionTicks"] = [{"line": line, "ticks": ticks} for line, ticks in sorted(node.line_ticks.items())]
        records.append(record)
    stream.write(b'{"nodes":[')
    stream.write(
        ",".join(json.dumps(record, ensure_ascii=False, separators=(",", ":")) for record in records).encode(
            "utf-8", "surrogatepass"
        )
    )
    stream.write(f'],"startTime":{start},"endTime":{times[-1] if times else start},"samples":['.encode())
    stream.write(",".join(map(str, sample_nodes)).encode())
    stream.write(b'],"timeDeltas":[')
    stream.write(",".join(map(str, deltas)).encode())
    stream.write(b"]}")


def _child(parent: _Node, frame: CallFrame, nodes: list[_Node]) -> _Node:
    child = parent.children.get(frame)
    if child is None:
        child = parent.children[frame] = _Node(len(nodes) + 1, frame)
        nodes.append(child)
    return child
