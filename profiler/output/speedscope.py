"""speedscope's file format: one sampled profile per thread, weights in
nanoseconds of CPU time, and with --off-cpu a wait's weight its time off the
CPU (https://www.speedscope.app/file-format-schema.json). Written as a
stream, sample by sample."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import IO

from profiler import __version__
from profiler.model.profile import Frame, FrameKind, Profile, Sample

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def frame_name(frame: Frame) -> str:
    """The name shown in the viewer, with what the record alone does not say."""
    if frame.inlined:
        return f"{frame.name} [inlined]"
    if frame.kind is FrameKind.KERNEL:
        return f"{frame.name} [kernel]"
    return frame.name


def _frame_record(frame: Frame) -> dict[str, object]:
    """One speedscope frame per function (its lines would split every box:
    the format has no per-sample positions); line is where it begins."""
    record: dict[str, object] = {"name": frame_name(frame)}
    file = frame.file or frame.module
    if file:
        record["file"] = file
    line = frame.function_line or (0 if frame.line_exact else frame.line)
    if line:
        record["line"] = line
        if frame.function_line and frame.function_column:
            record["col"] = frame.function_column
    return record


def write_speedscope(profile: Profile, stream: IO[bytes]) -> None:
    period_ns = round(1e9 / profile.info.frequency_hz)
    threads: dict[tuple[int, int], list[Sample]] = defaultdict(list)
    comms: dict[tuple[int, int], str] = {}
    for sample in profile.samples:
        threads[(sample.pid, sample.tid)].append(sample)
    for (pid, tid), samples in threads.items():
        comms[(pid, tid)] = samples[-1].comm
    # Every process gets a root frame, as in the folded output.
    root_frames: dict[str, int] = {}
    extra: list[dict[str, object]] = []
    for comm, pid in dict.fromkeys((sample.comm, sample.pid) for sample in profile.samples):
        label = profile.process_label(comm, pid)
        if label not in root_frames:
            root_frames[label] = len(profile.frames) + len(extra)
            extra.append({"name": label})

    def emit(text: str) -> None:
        stream.write(text.encode("utf-8", "surrogatepass"))

    target = " ".join(profile.info.command) or "pid " + ", ".join(map(str, profile.info.pids))
    emit('{"$schema":' + json.dumps(SCHEMA) + ',"exporter":' + json.dumps(f"jitprof {__version__}"))
    emit(',"name":' + json.dumps(target, ensure_ascii=False) + ',"activeProfileIndex":0,"shared":{"frames":[')
    records: list[str] = []
    index_of: dict[str, int] = {}
    frame_index: list[int] = []  # profile frame id -> speedscope frame index
    for record in [_frame_record(frame) for frame in profile.frames] + extra:
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        if text not in index_of:
            index_of[text] = len(records)
            records.append(text)
        frame_index.append(index_of[text])
    emit(",".join(records))
    emit(']},"profiles":[')
    ordered = sorted(threads.items(), key=lambda item: (-len(item[1]), item[0]))
    stack_text: dict[tuple[str, int, tuple[int, ...]], str] = {}  # a distinct stack is formatted once
    for position, ((pid, tid), samples) in enumerate(ordered):
        # In time order: a sample that waited for its JIT names was added late.
        if any(later.time_ns < earlier.time_ns for earlier, later in zip(samples, samples[1:])):
            samples.sort(key=lambda sample: sample.time_ns)
        written = 0
        if position:
            emit(",")
        name = f"{comms[(pid, tid)]} pid {pid} tid {tid}"
        emit(
            '{"type":"sampled","name":' + json.dumps(name, ensure_ascii=False) + ',"unit":"nanoseconds",'
            f'"startValue":0,"endValue":{sum(sample.off_cpu_ns or period_ns for sample in samples)},"samples":['
        )
        texts: list[str] = []
        for sample in samples:
            key = (sample.comm, sample.pid, sample.frame_ids)
            formatted = stack_text.get(key)
            if formatted is None:
                root = root_frames[profile.process_label(sample.comm, sample.pid)]
                ids = (frame_index[root], *(frame_index[frame_id] for frame_id in sample.frame_ids))
                formatted = stack_text[key] = "[" + ",".join(map(str, ids)) + "]"
            texts.append(formatted)
            if len(texts) >= 4096:
                emit(("," if written else "") + ",".join(texts))
                written += len(texts)
                texts.clear()
        if texts:
            emit(("," if written else "") + ",".join(texts))
        emit('],"weights":[' + ",".join(str(sample.off_cpu_ns or period_ns) for sample in samples) + "]}")
    emit("]}")
