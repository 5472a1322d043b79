"""Names that keep different functions apart. A JS function is shown as
`name script:line`; two that begin on one line of one script (a minified
bundle's, callbacks side by side) would merge in every output keyed by name.
Where a profile holds such a pair, each of them gets its column too,
`(anonymous) estree.mjs:42:629`, as perf and DevTools write it; the others
keep the short form. The raw profile keeps every frame's column, so `report`
decides again for what it shows."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from profiler.model.profile import Frame, FrameKind, Profile


def _named_by_line(frame: Frame) -> bool:
    return (
        frame.kind is FrameKind.JIT
        and frame.function_line > 0
        and frame.function_column > 0
        and frame.name.endswith(f":{frame.function_line}")
    )


def shared_names(*frame_lists: list[Frame]) -> set[str]:
    """The names that more than one function has, over all the lists (a diff's two sides)."""
    functions: dict[str, set[tuple[str, int, int]]] = defaultdict(set)
    for frames in frame_lists:
        for frame in frames:
            if _named_by_line(frame):
                functions[frame.name].add((frame.file, frame.function_line, frame.function_column))
    return {name for name, starts in functions.items() if len(starts) > 1}


def distinct_frames(frames: list[Frame], shared: set[str]) -> list[Frame]:
    if not shared:
        return frames
    return [
        dataclasses.replace(frame, name=f"{frame.name}:{frame.function_column}")
        if frame.name in shared and _named_by_line(frame)
        else frame
        for frame in frames
    ]


def with_distinct_names(profile: Profile, shared: set[str] | None = None) -> Profile:
    """The profile as the outputs show it: the same samples, its frames renamed where they would merge."""
    frames = distinct_frames(profile.frames, shared_names(profile.frames) if shared is None else shared)
    if frames is profile.frames:
        return profile
    view = Profile(
        profile.info, frames, profile.samples, profile.losses, profile.traffic, profile.modules, profile.walk_ends
    ).keep_totals_of(profile)
    view.taken_samples = profile.taken_samples
    view.reindex_frames()
    return view
