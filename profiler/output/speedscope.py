"""speedscope's file format: one sampled profile per thread, weights in
nanoseconds of CPU time, and with --off-cpu a wait's weight its time off the
CPU (https://www.speedscope.app/file-format-schema.json). Written as a
stream, sample by sample."""

from __future__ import annotations

import json
import operator
from collections import defaultdict
from typing import IO

from profiler import __version__
from profiler.model.profile import SAMPLE_COMM, SAMPLE_PID, SAMPLE_TIME_NS, Frame, FrameKind, Profile, Sample, StackKey

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


def _end_value(samples: list[Sample], period_ns: int, off_cpu: bool) -> int:
    """The weights' sum: a CPU sample weighs a sampling period, a wait its time."""
    if not off_cpu:
        return period_ns * len(samples)
    return sum(sample.off_cpu_ns or period_ns for sample in samples)


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
    for comm, pid in dict.fromkeys(zip(map(SAMPLE_COMM, profile.samples), map(SAMPLE_PID, profile.samples))):
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
    stack_text: dict[StackKey, str] = {}  # a distinct stack (by its tuple's identity) is formatted once
    for position, ((pid, tid), samples) in enumerate(ordered):
        # In time order: a sample that waited for its JIT names was added late.
        sampled_ns = list(map(SAMPLE_TIME_NS, samples))
        if any(map(operator.lt, sampled_ns[1:], sampled_ns)):
            samples.sort(key=SAMPLE_TIME_NS)
        if position:
            emit(",")
        name = f"{comms[(pid, tid)]} pid {pid} tid {tid}"
        emit(
            '{"type":"sampled","name":' + json.dumps(name, ensure_ascii=False) + ',"unit":"nanoseconds",'
            f'"startValue":0,"endValue":{_end_value(samples, period_ns, profile.info.off_cpu)},"samples":['
        )
        # The samples keep their stack tuples, and so the tuples' ids.
        keys = list(Profile.stack_keys(samples))
        for key, sample in dict(zip(keys, samples)).items():  # one sample of each distinct stack
            if key not in stack_text:
                root = root_frames[profile.process_label(sample.comm, sample.pid)]
                ids = (frame_index[root], *(frame_index[frame_id] for frame_id in sample.frame_ids))
                stack_text[key] = "[" + ",".join(map(str, ids)) + "]"
        texts = list(map(stack_text.__getitem__, keys))
        for start in range(0, len(texts), 4096):
            emit(("," if start else "") + ",".join(texts[start : start + 4096]))
        if profile.info.off_cpu:
            weights = ",".join(str(sample.off_cpu_ns or period_ns) for sample in samples)
        else:
            weights = ",".join([str(period_ns)] * len(samples))
        emit('],"weights":[' + weights + "]}")
    emit("]}")
