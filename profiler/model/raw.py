"""The `.jitprof` file: a whole profile, raw, so that every other format can
be produced from it later (`jitprof report`, `jitprof diff`).

gzip-compressed JSON lines, written and read as streams:

    {"format": "jitprof", "version": 1, "info": {...}, "losses": {...}, "walk_ends": {...}}
    {"frame": 0, "name": ..., "module": ..., "kind": ..., ...}     one per frame
        (a JS frame with a source map also has "original": {"name", "file",
        "line", ...}: what the map made of it; the frame itself is as generated)
    [time_ns, pid, tid, comm, [frame ids, root first], walk_end]   one per sample
        (version 2, with --off-cpu: a wait has its nanoseconds off the CPU
        after walk_end; a CPU sample is as in version 1)

A reader accepts only what it knows: a newer major version, a malformed
line or a frame id out of range is an error naming the line. A file may
come from anywhere: nesting, numbers and the ratio of what it unpacks to
what it is are bounded, so a small crafted file cannot take the reader's
time or memory.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from profiler.kernel.events import WalkEnd
from profiler.model.profile import MAX_LABEL_SETS, MAX_SAMPLE_FRAMES, Frame, FrameKind, ModuleFile, Profile, RunInfo, Sample
from profiler.native.sample_lines import COMM, STACK, SampleLineSplitter

FORMAT = "jitprof"
# A file says the oldest version that reads it: 1, 2 with time off the CPU,
# 3 with labels (a sample's eighth field, and the label sets before the samples).
OFF_CPU_VERSION = 2
LABELS_VERSION = 3
VERSION = LABELS_VERSION
MAX_LABELS = 64  # in one set
MAX_LABEL_CHARS = 512
MAX_LINE_BYTES = 64 << 20
READ_CHUNK = 4 << 20
# jitprof's own files unpack to about 11 times their size (up to 40 where
# every sample has one stack); a file unpacking to more than this many times
# its size (past a floor for small files) is not one it wrote.
MAX_UNPACK_RATIO = 50
UNPACK_FLOOR_BYTES = 16 << 20
MAX_FREQUENCY_HZ = 1_000_000
MAX_INT = 1 << 63
MAX_WARNINGS = 200  # a run's warnings kept from a file, each cut at MAX_WARNING_CHARS
MAX_WARNING_CHARS = 2000


class RawProfileError(ValueError):
    """The file is not a profile this version can read; the message says where."""


def write_raw(profile: Profile, stream: IO[bytes]) -> None:
    with gzip.GzipFile(fileobj=stream, mode="wb", compresslevel=3, mtime=0) as compressed:
        info: dict[str, Any] = {
            "command": profile.info.command,
            "pids": profile.info.pids,
            "frequency_hz": profile.info.frequency_hz,
            "root_by_pid": profile.info.root_by_pid,
            "started_ns": profile.info.started_ns,
            "ended_ns": profile.info.ended_ns,
        }
        if profile.info.warnings:
            info["warnings"] = profile.info.warnings  # a key older readers pass over
        if profile.info.off_cpu:
            info |= {
                "off_cpu": True,
                "idle_kept": profile.info.idle_kept,
                "shortest_wait_ns": profile.info.shortest_wait_ns,
                "waits": vars(profile.waits),
            }
        header = {
            "format": FORMAT,
            "version": LABELS_VERSION if len(profile.label_sets) > 1 else OFF_CPU_VERSION if profile.info.off_cpu else 1,
            "info": info,
            "losses": vars(profile.losses),
            "traffic": vars(profile.traffic),
            "modules": {name: {"path": module.path, "build_id": module.build_id} for name, module in profile.modules.items()},
            "walk_ends": {end.name: count for end, count in profile.walk_ends.items()},
        }
        compressed.write(_line(header))
        for frame_id, frame in enumerate(profile.frames):
            record = {
                "frame": frame_id,
                "name": frame.name,
                "module": frame.module,
                "kind": frame.kind.value,
                "file": frame.file,
                "line": frame.line,
                "column": frame.column,
                "tier": frame.tier,
                "inlined": frame.inlined,
                "line_exact": frame.line_exact,
                "function_line": frame.function_line,
                "function_column": frame.function_column,
            }
            original = profile.originals.get(frame)
            if original is not None:
                record["original"] = {
                    "name": original.name,
                    "file": original.file,
                    "line": original.line,
                    "column": original.column,
                    "line_exact": original.line_exact,
                    "function_line": original.function_line,
                    "function_column": original.function_column,
                }
            compressed.write(_line(record))
        for label_id, labels in enumerate(profile.label_sets[1:], 1):
            compressed.write(_line({"labels": label_id, "set": [list(pair) for pair in labels]}))
        # Samples are most of the file: a distinct stack or name is formatted once.
        stacks: dict[tuple[int, ...], str] = {}
        names: dict[str, str] = {}
        batch: list[str] = []
        for sample in profile.samples:
            stack = stacks.get(sample.frame_ids)
            if stack is None:
                stack = stacks[sample.frame_ids] = "[" + ",".join(map(str, sample.frame_ids)) + "]"
            comm = names.get(sample.comm)
            if comm is None:
                comm = names[sample.comm] = json.dumps(sample.comm, ensure_ascii=False)
            waited = (
                f",{sample.off_cpu_ns},{sample.labels}" if sample.labels else f",{sample.off_cpu_ns}" if sample.off_cpu_ns else ""
            )
            batch.append(f'[{sample.time_ns},{sample.pid},{sample.tid},{comm},{stack},"{sample.walk_end.name}"{waited}]\n')
            if len(batch) >= 8192:
                compressed.write("".join(batch).encode("utf-8", "surrogatepass"))
                batch.clear()
        compressed.write("".join(batch).encode("utf-8", "surrogatepass"))


def _line(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"


def read_raw(path: Path) -> Profile:
    try:
        with open(path, "rb") as packed:
            limit = max(UNPACK_FLOOR_BYTES, MAX_UNPACK_RATIO * os.fstat(packed.fileno()).st_size)
            # Unpacked once without parsing (fast, in C) to refuse a bomb before its records cost seconds.
            with gzip.GzipFile(fileobj=packed, mode="rb") as stream:
                _check_unpacked_size(stream, path, limit)
            packed.seek(0)
            with gzip.GzipFile(fileobj=packed, mode="rb") as stream:
                return _read(_lines(stream, path, limit), path)  # type: ignore[arg-type]
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise RawProfileError(f"{path}: not a readable .jitprof file ({error})") from error


def _check_unpacked_size(stream: gzip.GzipFile, path: Path, max_unpacked: int) -> None:
    unpacked = 0
    while chunk := stream.read(READ_CHUNK):
        unpacked += len(chunk)
        if unpacked > max_unpacked:
            raise _too_big(path, max_unpacked)


def _too_big(path: Path, max_unpacked: int) -> RawProfileError:
    return RawProfileError(
        f"{path}: unpacks to over {max_unpacked >> 20} MiB, more than {MAX_UNPACK_RATIO} times its size; "
        "not a profile jitprof wrote"
    )


@dataclasses.dataclass(frozen=True)
class _SampleRun:
    """Consecutive sample lines: their text (joined by newlines) and how many."""

    text: bytes
    count: int


_NOT_A_SAMPLE = re.compile(rb"\n[^\[]")  # where a run of sample lines ends


def _lines(stream: IO[bytes], path: Path, max_unpacked: int) -> Iterator[tuple[int, Any]]:
    """(line number, record), in order: a run of sample lines as a
    _SampleRun, any other line decoded."""
    number = 0
    pending = b""
    unpacked = 0
    while True:
        chunk = stream.read(READ_CHUNK)
        unpacked += len(chunk)
        if unpacked > max_unpacked:
            raise _too_big(path, max_unpacked)
        data = pending + chunk
        if chunk:
            cut = data.rfind(b"\n") + 1
            data, pending = data[:cut], data[cut:]
            if len(pending) > MAX_LINE_BYTES:
                long_line = number + data.count(b"\n") + 1
                raise RawProfileError(f"{path}:{long_line}: line too long")
        elif data and not data.endswith(b"\n"):
            data += b"\n"
        position = 0
        while position < len(data):
            if data[position] == ord("["):
                found = _NOT_A_SAMPLE.search(data, position)
                end = found.start() + 1 if found is not None else len(data)  # just past the run's last newline
                count = data.count(b"\n", position, end)
                yield number + 1, _SampleRun(data[position : end - 1], count)
                number += count
            else:
                end = data.index(b"\n", position) + 1
                number += 1
                line = data[position : end - 1]
                if line.strip():
                    yield number, _decode(line, number, path)
            position = end
        if not chunk:
            return


def _decode(raw: bytes, number: int, path: Path) -> Any:
    try:
        return json.loads(raw)
    except ValueError as error:
        raise RawProfileError(f"{path}:{number}: not JSON ({error})") from error
    except RecursionError:
        raise RawProfileError(f"{path}:{number}: nested too deeply") from None


def _read(lines: Iterator[tuple[int, Any]], path: Path) -> Profile:
    try:
        _, header = next(lines)
    except StopIteration:
        raise RawProfileError(f"{path}: empty file") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise RawProfileError(f"{path}: not a .jitprof file")
    version = header.get("version")
    if type(version) is not int or version < 1:
        raise RawProfileError(f"{path}:1: bad header (version {json.dumps(version)[:40]} is not a version number)")
    if version > VERSION:
        raise RawProfileError(f"{path}: version {version} is newer than this jitprof reads ({VERSION})")
    try:
        info = _mapping(header, "info")
        frequency_hz = _integer(info["frequency_hz"])
        if not 0 < frequency_hz <= MAX_FREQUENCY_HZ:
            raise ValueError(f"frequency_hz {frequency_hz} is not between 1 and {MAX_FREQUENCY_HZ}")
        profile = Profile(
            RunInfo(
                [str(part) for part in _sequence(info, "command")],
                [_integer(pid) for pid in _sequence(info, "pids")],
                frequency_hz,
                bool(info.get("root_by_pid", False)),
                _integer(info.get("started_ns", 0)),
                _integer(info.get("ended_ns", 0)),
                bool(info.get("off_cpu", False)),
                bool(info.get("idle_kept", False)),
                _integer(info.get("shortest_wait_ns", 0)),
                [str(line)[:MAX_WARNING_CHARS] for line in (_sequence(info, "warnings") if "warnings" in info else [])][
                    :MAX_WARNINGS
                ],
            )
        )
        for field_name, value in _mapping(info, "waits").items():
            if hasattr(profile.waits, field_name):
                setattr(profile.waits, field_name, _integer(value))
        for counts, name in ((profile.losses, "losses"), (profile.traffic, "traffic")):
            for field_name, value in _mapping(header, name).items():
                if hasattr(counts, field_name):
                    setattr(counts, field_name, _integer(value))
        walk_ends = Counter({WalkEnd[name]: _integer(count) for name, count in _mapping(header, "walk_ends").items()})
        for name, module in _mapping(header, "modules").items():
            profile.modules[str(name)] = ModuleFile(str(module["path"]), str(module["build_id"]))
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise RawProfileError(f"{path}:1: bad header ({error})") from error
    samples = _SampleReader(profile, path)
    for number, record in lines:
        if isinstance(record, _SampleRun):
            samples.add_lines(number, record)
            continue
        try:
            if isinstance(record, dict) and "labels" in record:
                if record["labels"] != len(profile.label_sets) or len(profile.label_sets) >= MAX_LABEL_SETS:
                    raise ValueError("label sets out of order, or too many")
                pairs = _sequence(record, "set")
                if len(pairs) > MAX_LABELS or not all(
                    isinstance(pair, list) and len(pair) == 2 and all(isinstance(part, str) for part in pair) for pair in pairs
                ):
                    raise ValueError("a label set that is not (key, value) texts")
                profile.intern_labels(tuple((key[:MAX_LABEL_CHARS], value[:MAX_LABEL_CHARS]) for key, value in pairs))
                continue
            if isinstance(record, dict):
                if record["frame"] != len(profile.frames):
                    raise ValueError("frames out of order")
                frame = Frame(
                    str(record["name"]),
                    str(record["module"]),
                    FrameKind(record["kind"]),
                    str(record["file"]),
                    _integer(record["line"]),
                    _integer(record["column"]),
                    str(record["tier"]),
                    bool(record["inlined"]),
                    bool(record["line_exact"]),
                    _integer(record.get("function_line", 0)),
                    _integer(record.get("function_column", 0)),
                )
                profile.frames.append(frame)
                if "original" in record:
                    original = _mapping(record, "original")
                    profile.originals[frame] = dataclasses.replace(
                        frame,
                        name=str(original["name"]),
                        file=str(original["file"]),
                        line=_integer(original["line"]),
                        column=_integer(original["column"]),
                        line_exact=bool(original["line_exact"]),
                        function_line=_integer(original["function_line"]),
                        function_column=_integer(original["function_column"]),
                    )
                continue
            samples.add_decoded(record)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise RawProfileError(f"{path}:{number}: bad record ({error})") from error
    profile.walk_ends = walk_ends if walk_ends else Counter(sample.walk_end for sample in profile.samples)
    profile.reindex_frames()
    return profile


class _SampleReader:
    """Samples into a profile, each checked. Lines in write_raw's own form
    are split in C (profiler/native/sample_lines.py), and each distinct
    command name, stack and walk end among them decoded and checked once (a
    profile repeats a few thousand stacks over hundreds of thousands of
    samples); any other line is decoded as JSON and checked field by field."""

    def __init__(self, profile: Profile, path: Path) -> None:
        self._profile = profile
        self._path = path
        self._stacks: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._walk_ends = {end.name: end for end in WalkEnd}
        self._splitter = SampleLineSplitter()
        self._texts: tuple[list[Any], list[Any], list[Any]] = ([], [], [])  # by kind, as the splitter numbers them

    def add_lines(self, first_number: int, run: _SampleRun) -> None:
        """Consecutive sample lines, the first being line first_number."""
        split = self._splitter.split(run.text, run.count, MAX_INT)
        refused: dict[int, Exception] = {}  # line in the block -> why a text first seen there is refused
        for kind, index, line, text in split.news:
            try:
                value = self._text_value(kind, text)
            except (TypeError, ValueError) as error:
                value = None
                refused.setdefault(line, error)
            assert index == len(self._texts[kind])
            self._texts[kind].append(value)
        comms, stacks, walk_ends = self._texts
        if not refused and all(split.parsed) and (self._profile.info.off_cpu or not any(split.waited_ns)):
            self._profile.samples.extend(
                map(
                    Sample,
                    split.time_ns,
                    split.pid,
                    split.tid,
                    map(comms.__getitem__, split.comm),
                    map(stacks.__getitem__, split.stack),
                    map(walk_ends.__getitem__, split.walk_end),
                    split.waited_ns,
                )
            )
            return
        for line, raw in enumerate(run.text.split(b"\n")):  # in order, so that the first bad line is the one named
            number = first_number + line
            try:
                if line in refused:
                    raise refused[line]
                if not split.parsed[line]:
                    self.add_decoded(_decode(raw, number, self._path))
                    continue
                self._append(
                    split.time_ns[line],
                    split.pid[line],
                    split.tid[line],
                    comms[split.comm[line]],
                    stacks[split.stack[line]],
                    walk_ends[split.walk_end[line]],
                    split.waited_ns[line],
                )
            except (KeyError, TypeError, ValueError, AttributeError) as error:
                raise RawProfileError(f"{self._path}:{number}: bad record ({error})") from error

    def _text_value(self, kind: int, text: bytes) -> Any:
        if kind == COMM:
            return json.loads(text)  # a JSON string: the splitter found its quotes
        if kind == STACK:
            return self._stack(json.loads(text))
        walk_end = self._walk_ends.get(text.decode())
        if walk_end is None:
            raise ValueError(f"no walk end {text.decode()[:40]!r}")
        return walk_end

    def add_decoded(self, record: Any) -> None:
        time_ns, pid, tid, comm, frame_ids, walk_end, *rest = record
        off_cpu_ns = labels = 0
        if rest:
            if len(rest) > 2:
                raise ValueError("a sample with fields it cannot have")
            off_cpu_ns = rest[0]
            labels = rest[1] if len(rest) == 2 else 0
            if type(off_cpu_ns) is not int or off_cpu_ns < 0 or off_cpu_ns == 0 and len(rest) == 1:
                raise ValueError("off-CPU time out of range")
            if type(labels) is not int or not 0 <= labels < len(self._profile.label_sets):
                raise ValueError("label set out of range")
        if type(time_ns) is not int or type(pid) is not int or type(tid) is not int or type(comm) is not str:
            raise ValueError("bad sample fields")
        self._append(time_ns, pid, tid, comm, self._stack(frame_ids), self._walk_ends[walk_end], off_cpu_ns, labels)

    def _stack(self, frame_ids: Any) -> tuple[int, ...]:
        ids = tuple(frame_ids)
        known = self._stacks.get(ids)
        if known is None:  # checked once per distinct stack, then shared
            if len(ids) > MAX_SAMPLE_FRAMES:
                raise ValueError(f"a stack of {len(ids):,} frames (jitprof writes at most {MAX_SAMPLE_FRAMES:,})")
            frames = len(self._profile.frames)
            if not all(type(frame_id) is int and 0 <= frame_id < frames for frame_id in ids):
                raise ValueError("frame id out of range")
            known = self._stacks[ids] = ids
        return known

    def _append(
        self,
        time_ns: int,
        pid: int,
        tid: int,
        comm: str,
        ids: tuple[int, ...],
        walk_end: WalkEnd,
        off_cpu_ns: int,
        labels: int = 0,
    ) -> None:
        if not 0 <= time_ns < MAX_INT:
            raise ValueError("time out of range")
        if off_cpu_ns:
            if not self._profile.info.off_cpu:
                raise ValueError("a sample with fields it cannot have")
            if off_cpu_ns >= MAX_INT:
                raise ValueError("off-CPU time out of range")
        self._profile.samples.append(Sample(time_ns, pid, tid, comm, ids, walk_end, off_cpu_ns, labels))


def _mapping(record: dict[str, Any], name: str) -> dict[str, Any]:
    value = record.get(name, {})
    if not isinstance(value, dict):
        raise ValueError(f"{name} is a {type(value).__name__}, not an object")
    return value


def _sequence(record: dict[str, Any], name: str) -> list[Any]:
    value = record[name]
    if not isinstance(value, list):
        raise ValueError(f"{name} is a {type(value).__name__}, not a list")
    return value


def _integer(value: Any) -> int:
    """A whole number a profile can hold (not Infinity, NaN, 1e400 or a string of digits)."""
    if type(value) is bool or not isinstance(value, int | float) or value != value or abs(value) >= MAX_INT:
        raise ValueError(f"{json.dumps(value)[:40]} is not a number in range")
    return int(value)
