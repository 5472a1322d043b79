"""`jitprof report` and `jitprof diff`: saved profiles (.jitprof) turned into
any output format, filtered, or compared with each other."""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TextIO

from profiler.errors import JitprofError
from profiler.jit import registry
from profiler.labels.grouping import grouped_by, with_labels
from profiler.model.profile import Frame, FrameKind, Profile
from profiler.model.raw import RawProfileError, read_raw
from profiler.native import elf
from profiler.native.symbol_table import SymbolTable
from profiler.output import OutputRequest, WrittenOutput, html, write_outputs, write_text, write_to
from profiler.output.folded import fold
from profiler.output.originals import with_originals
from profiler.output.svg import baseline_from, write_svg
from profiler.safety.users import output_owner


@dataclass(frozen=True)
class SampleFilter:
    pids: frozenset[int] = frozenset()
    tids: frozenset[int] = frozenset()
    since_s: float | None = None  # from the first sample
    until_s: float | None = None
    labels: tuple[tuple[str, str], ...] = ()  # (key, value) every sample shown has


def load(path: Path) -> Profile:
    try:
        return read_raw(path)
    except FileNotFoundError as error:
        raise JitprofError(f"no such file: {path}", "give a profile written with -o NAME.jitprof") from error
    except PermissionError as error:
        raise JitprofError(f"cannot read {path}: permission denied", "check the file's permissions") from error
    except RawProfileError as error:
        raise JitprofError(str(error), "give a profile written by jitprof with -o NAME.jitprof") from error


def filtered(profile: Profile, selection: SampleFilter) -> Profile:
    """The same profile with only the selected samples (frames are kept)."""
    if selection == SampleFilter():
        return profile
    first = min((sample.time_ns for sample in profile.samples), default=0)
    since = first + int(selection.since_s * 1e9) if selection.since_s is not None else None
    until = first + int(selection.until_s * 1e9) if selection.until_s is not None else None
    result = Profile(
        profile.info,
        profile.frames,
        losses=profile.losses,
        traffic=profile.traffic,
        modules=profile.modules,
        originals=profile.originals,
    ).share_labels(profile)
    result.reindex_frames()
    labelled = with_labels(profile, selection.labels) if selection.labels else None
    for sample in profile.samples:
        if labelled is not None and sample.labels not in labelled:
            continue
        if selection.pids and sample.pid not in selection.pids:
            continue
        if selection.tids and sample.tid not in selection.tids:
            continue
        if since is not None and sample.time_ns < since:
            continue
        if until is not None and sample.time_ns >= until:
            continue
        result.add(sample)
    return result


def name_unnamed(profile: Profile) -> int:
    """Name the frames a run left as file+0x<start>, where the file's debug
    file has turned up since (installed, or on a debuginfod server); how many."""
    tables: dict[str, SymbolTable | None] = {}
    named = 0
    for index, frame in enumerate(profile.frames):
        module = profile.modules.get(frame.module)
        if frame.kind is not FrameKind.UNKNOWN or module is None or not module.build_id:
            continue
        match = re.fullmatch(rf"{re.escape(frame.module)}\+0x([0-9a-f]+)", frame.name)
        if match is None:
            continue
        if module.build_id not in tables:
            tables[module.build_id] = elf.symbols_by_build_id(module.build_id)
        table = tables[module.build_id]
        hit = table.lookup(int(match.group(1), 16)) if table is not None else None
        if hit is not None:
            profile.frames[index] = Frame(hit.name, frame.module, FrameKind.NATIVE)
            named += 1
    if named:
        profile.reindex_frames()
    return named


def report(
    path: Path,
    requests: list[OutputRequest],
    selection: SampleFilter,
    stdout_format: str = "folded",
    js_view: bool = False,
    source_maps: bool = True,
    group_by: str = "",
) -> list[WrittenOutput]:
    profile = filtered(load(path), selection)
    name_unnamed(profile)
    shown = with_originals(profile) if source_maps else profile
    if js_view:
        shown = registry.language_view(shown)
    if group_by:
        shown = grouped_by(shown, group_by)
    if not requests:
        write_to(sys.stdout.buffer, shown if stdout_format != "jitprof" else profile, stdout_format)
        sys.stdout.buffer.flush()
        return []
    return write_outputs(profile, requests, output_owner(dict(os.environ)), shown)


def base_scale(base: Profile, new: Profile, normalize: bool) -> float:
    """What a base sample is worth in new samples: equal CPU time (the
    frequencies may differ), or, normalised, equal totals. With --off-cpu
    both count microseconds: equal time is 1."""
    if base.info.off_cpu != new.info.off_cpu:
        with_waits, without = (base, new) if base.info.off_cpu else (new, base)
        raise JitprofError(
            f"one profile has time off the CPU and the other not ({' '.join(with_waits.info.command)[:60]} was recorded "
            f"with --off-cpu, {' '.join(without.info.command)[:60]} without)",
            "compare profiles recorded the same way",
        )
    if normalize:
        if new.info.off_cpu:
            return sum(new.stack_counts().values()) / max(sum(base.stack_counts().values()), 1)
        return len(new.samples) / max(len(base.samples), 1)
    return 1.0 if new.info.off_cpu else new.info.frequency_hz / base.info.frequency_hz


def write_diff_folded(base: Profile, new: Profile, stream: TextIO, normalize: bool) -> None:
    """difffolded's form: `stack base_count new_count`, base scaled."""
    scale = base_scale(base, new, normalize)
    before: Counter[tuple[str, ...]] = Counter({stack.frames: stack.count for stack in fold(base)})
    after: Counter[tuple[str, ...]] = Counter({stack.frames: stack.count for stack in fold(new)})
    for frames in sorted(set(before) | set(after)):
        stream.write(f"{';'.join(frames)} {round(before[frames] * scale)} {after[frames]}\n")


def write_diff_html(base: Profile, new: Profile, stream: IO[bytes], normalize: bool) -> None:
    scale = base_scale(base, new, normalize)
    write_text(stream, lambda text: html.write_diff_html(base, new, text, scale))


def write_diff_svg(base: Profile, new: Profile, stream: IO[bytes], normalize: bool) -> None:
    title = "Differential Flame Graph (red: grew, blue: shrank)"
    baseline = baseline_from(base, base_scale(base, new, normalize))
    write_text(stream, lambda text: write_svg(new, text, title, baseline))
