"""The profile as its authors wrote it: every frame with a source-mapped
original shown as that original (outputs, the live view, report, diff).
The profile itself keeps the generated frames, and the raw profile both."""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

from profiler.model.profile import Frame, Profile


def with_originals(profile: Profile) -> Profile:
    """The same samples, each frame replaced by its original where it has one."""
    if not profile.originals:
        return profile
    frames = [profile.originals.get(frame, frame) for frame in profile.frames]
    view = Profile(
        profile.info, frames, profile.samples, profile.losses, profile.traffic, profile.modules, profile.walk_ends
    ).keep_totals_of(profile)
    view.taken_samples = profile.taken_samples
    view.reindex_frames()
    return view


class OriginalFrameTable(Sequence[Frame]):
    """A frame table read through the originals known so far (the live
    view's, while they are still being found)."""

    def __init__(self, frames: Sequence[Frame], originals: dict[Frame, Frame]) -> None:
        self._frames = frames
        self._originals = originals

    @overload
    def __getitem__(self, index: int) -> Frame: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Frame]: ...

    def __getitem__(self, index: int | slice) -> Frame | Sequence[Frame]:
        if isinstance(index, slice):
            return [self._originals.get(frame, frame) for frame in self._frames[index]]
        frame = self._frames[index]
        return self._originals.get(frame, frame)

    def __len__(self) -> int:
        return len(self._frames)
