"""pprof's profile.proto, gzipped (.pb.gz, .pprof), encoded here by hand:
samples/count and cpu/nanoseconds (with --off-cpu, off_cpu/nanoseconds too:
a wait counts one in samples/count and its time there) per unique stack and thread, pid and tid
labels, one mapping per module, and one location per machine address with
its inline lines, innermost first (a JIT frame and the frames inlined into
it share a location, as pprof expects).
"""

from __future__ import annotations

import gzip
from typing import IO

from profiler.model.profile import Frame, FrameKind, Profile

# Field numbers from profile.proto.
PROFILE_SAMPLE_TYPE, PROFILE_SAMPLE, PROFILE_MAPPING, PROFILE_LOCATION = 1, 2, 3, 4
PROFILE_FUNCTION, PROFILE_STRING_TABLE, PROFILE_TIME_NANOS, PROFILE_DURATION = 5, 6, 9, 10
PROFILE_PERIOD_TYPE, PROFILE_PERIOD, PROFILE_COMMENT, PROFILE_DEFAULT_TYPE = 11, 12, 13, 14


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64 negatives as two's complement, as protobuf does
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _int(field: int, value: int) -> bytes:
    return _key(field, 0) + _varint(value) if value else b""


def _bytes(field: int, value: bytes) -> bytes:
    return _key(field, 2) + _varint(len(value)) + value


def _packed(field: int, values: list[int]) -> bytes:
    return _bytes(field, b"".join(_varint(value) for value in values)) if values else b""


class _Strings:
    def __init__(self) -> None:
        self.table: list[str] = [""]
        self._index: dict[str, int] = {"": 0}

    def __call__(self, text: str) -> int:
        index = self._index.get(text)
        if index is None:
            index = self._index[text] = len(self.table)
            self.table.append(text)
        return index


def function_name(frame: Frame) -> str:
    return frame.name + (" [kernel]" if frame.kind is FrameKind.KERNEL else "")


# What a store that makes a series of each label set keeps of a sample's
# labels (Pyroscope's span profiles: the span, not the trace nor the route).
SPAN_LABELS = ("span_id", "span_name")


def _kept_label_sets(profile: Profile, all_labels: bool) -> list[tuple[tuple[str, str], ...]]:
    """Each label set as written: all of it, or its span labels alone."""
    if all_labels:
        return list(profile.label_sets)
    return [tuple((key, value) for key, value in labels if key in SPAN_LABELS) for labels in list(profile.label_sets)]


def write_pprof(profile: Profile, stream: IO[bytes], sample_labels: bool = True, time_nanos: int = 0) -> None:
    """sample_labels: pid, tid and comm on every sample (a store that makes a
    series of each label set wants none); time_nanos: when the profile began
    (wall clock), when known."""
    strings = _Strings()
    period_ns = round(1e9 / profile.info.frequency_hz)
    functions: dict[tuple[str, str, int], int] = {}
    function_records: list[bytes] = []
    mappings: dict[str, int] = {}
    mapping_records: list[bytes] = []
    locations: dict[tuple[int, ...], int] = {}  # frame ids, outer first -> location id
    location_records: list[bytes] = []

    def function_id(frame: Frame) -> int:
        key = (function_name(frame), frame.file or frame.module, frame.function_line)
        found = functions.get(key)
        if found is None:
            found = functions[key] = len(functions) + 1
            function_records.append(
                _int(1, found)
                + _int(2, strings(key[0]))
                + _int(3, strings(key[0]))
                + _int(4, strings(key[1]))
                + _int(5, frame.function_line)
            )
        return found

    def mapping_id(module: str) -> int:
        found = mappings.get(module)
        if found is None:
            found = mappings[module] = len(mappings) + 1
            mapping_records.append(_int(1, found) + _int(5, strings(module)) + _int(7, 1) + _int(8, 1) + _int(9, 1) + _int(10, 1))
        return found

    def location_id(group: tuple[int, ...]) -> int:
        found = locations.get(group)
        if found is None:
            found = locations[group] = len(locations) + 1
            outer = profile.frames[group[0]]
            lines = b""
            for frame_id in reversed(group):  # innermost first
                frame = profile.frames[frame_id]
                line = _int(1, function_id(frame)) + _int(2, frame.line if frame.line_exact else frame.function_line)
                line += _int(3, frame.column if frame.line_exact else 0)
                lines += _bytes(4, line)
            location_records.append(_int(1, found) + _int(2, mapping_id(outer.module or outer.file or "[unknown]")) + lines)
        return found

    # (samples and waits, CPU samples, nanoseconds off the CPU) per stack and thread
    stacks: dict[tuple[int, int, str, tuple[int, ...], tuple[tuple[str, str], ...]], list[int]] = {}
    kept_labels = _kept_label_sets(profile, sample_labels)
    for sample in profile.samples:
        labelled = kept_labels[sample.labels]
        key = (
            (sample.pid, sample.tid, sample.comm, sample.frame_ids, labelled)
            if sample_labels
            else (0, 0, "", sample.frame_ids, labelled)
        )
        totals = stacks.get(key)
        if totals is None:
            totals = stacks[key] = [0, 0, 0]
        totals[0] += 1
        if sample.off_cpu_ns:
            totals[2] += sample.off_cpu_ns
        else:
            totals[1] += 1
    off_cpu = profile.info.off_cpu
    out = bytearray()
    sample_type = _int(1, strings("samples")) + _int(2, strings("count"))
    cpu_type = _int(1, strings("cpu")) + _int(2, strings("nanoseconds"))
    out += _bytes(PROFILE_SAMPLE_TYPE, sample_type) + _bytes(PROFILE_SAMPLE_TYPE, cpu_type)
    if off_cpu:
        out += _bytes(PROFILE_SAMPLE_TYPE, _int(1, strings("off_cpu")) + _int(2, strings("nanoseconds")))
    for (pid, tid, comm, frame_ids, sample_label_set), (count, cpu_samples, waited_ns) in stacks.items():
        location_ids = [location_id(group) for group in reversed(location_groups(profile.frames, frame_ids))]  # leaf first
        labels = (
            (
                _bytes(3, _int(1, strings("pid")) + _int(3, pid))
                + _bytes(3, _int(1, strings("tid")) + _int(3, tid))
                + _bytes(3, _int(1, strings("comm")) + _int(2, strings(comm)))
            )
            if sample_labels
            else b""
        )
        labels += b"".join(_bytes(3, _int(1, strings(key)) + _int(2, strings(value))) for key, value in sample_label_set)
        values = [count, cpu_samples * period_ns, waited_ns] if off_cpu else [count, count * period_ns]
        out += _bytes(PROFILE_SAMPLE, _packed(1, location_ids) + _packed(2, values) + labels)
    for record in mapping_records:
        out += _bytes(PROFILE_MAPPING, record)
    for record in location_records:
        out += _bytes(PROFILE_LOCATION, record)
    for record in function_records:
        out += _bytes(PROFILE_FUNCTION, record)
    command = " ".join(profile.info.command) or (
        "pid " + ", ".join(map(str, profile.info.pids)) if profile.info.pids else "all processes"
    )
    comment = strings(f"jitprof: {command}")
    default_type = strings("cpu")
    out += b"".join(_bytes(PROFILE_STRING_TABLE, text.encode("utf-8", "surrogatepass")) for text in strings.table)
    # time_nanos is wall-clock time, which the samples' clock is not: only
    # the duration is given, unless the caller knows when it began.
    out += _int(PROFILE_TIME_NANOS, time_nanos)
    out += _int(PROFILE_DURATION, max(profile.info.ended_ns - profile.info.started_ns, 0))
    out += _bytes(PROFILE_PERIOD_TYPE, cpu_type) + _int(PROFILE_PERIOD, period_ns)
    out += _packed(PROFILE_COMMENT, [comment]) + _int(PROFILE_DEFAULT_TYPE, default_type)
    with gzip.GzipFile(fileobj=stream, mode="wb", mtime=0) as compressed:
        compressed.write(bytes(out))


def location_groups(frames: list[Frame], frame_ids: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Frames split into locations, outer first: an inlined frame joins the
    location of the frame before it."""
    groups: list[list[int]] = []
    for frame_id in frame_ids:
        if frames[frame_id].inlined and groups:
            groups[-1].append(frame_id)
        else:
            groups.append([frame_id])
    return [tuple(group) for group in groups]
