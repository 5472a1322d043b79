"""Folded stacks: `comm;root;...;leaf count`, one line per unique stack."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TextIO

from profiler.model.profile import Frame, FrameKind, Profile
from profiler.safety.terminal import printable

# flamegraph.pl/inferno colour hints, stripped from labels by renderers.
KIND_SUFFIX = {FrameKind.KERNEL: "_[k]", FrameKind.JIT: "_[j]"}
INLINED_SUFFIX = "_[i]"


@dataclass(frozen=True)
class FoldedStack:
    frames: tuple[str, ...]  # root first
    count: int


def frame_label(frame: Frame) -> str:
    name = field_text(frame.name)
    if frame.kind is FrameKind.KERNEL or frame.module == "[kernel]":
        return name + "_[k]"
    if frame.inlined:
        return name + INLINED_SUFFIX
    return name + KIND_SUFFIX.get(frame.kind, "")


def field_text(text: str) -> str:
    """A name or comm as one field: ';' separates frames, and a line break
    (or a \\r a reader splits on) would start a forged line: controls are
    shown escaped."""
    return printable(text).replace(";", ":")


def fold(profile: Profile) -> list[FoldedStack]:
    """Unique stacks with their counts, sorted for stable output."""
    counts: Counter[tuple[str, ...]] = Counter()
    labels = [frame_label(frame) for frame in profile.frames]
    for (root, frame_ids), count in profile.stack_counts().items():
        comm = field_text(root)
        counts[(comm, *(labels[frame_id] for frame_id in frame_ids))] += count
    return [FoldedStack(frames, count) for frames, count in sorted(counts.items())]


def write_folded(profile: Profile, stream: TextIO) -> None:
    for stack in fold(profile):
        stream.write(";".join(stack.frames))
        stream.write(f" {stack.count}\n")


def parse_folded_line(line: str) -> FoldedStack | None:
    """The inverse of one output line (for tests and conversions)."""
    stack_text, _, count_text = line.rstrip("\n").rpartition(" ")
    if not stack_text or not count_text.isdigit():
        return None
    return FoldedStack(tuple(stack_text.split(";")), int(count_text))
