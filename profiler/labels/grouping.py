"""Outputs grouped by a label (--group-by KEY): each sample's stack under a
root frame `KEY=value` (`KEY=(none)` for samples without it), so every
format (flame graphs, folded, speedscope, report.html) splits by it."""

from __future__ import annotations

from profiler.model.profile import Frame, FrameKind, Profile, Sample

LABEL_MODULE = "[label]"
NO_VALUE = "(none)"


def group_frame(key: str, value: str | None) -> Frame:
    return Frame(f"{key}={value if value is not None else NO_VALUE}", LABEL_MODULE, FrameKind.NATIVE)


def grouped_by(profile: Profile, key: str) -> Profile:
    """A copy of the profile whose stacks start with the sample's value of key."""
    view = Profile(profile.info, losses=profile.losses, traffic=profile.traffic, modules=profile.modules)
    view.keep_totals_of(profile)
    view.frames = list(profile.frames)
    view.reindex_frames()
    view.originals = profile.originals
    roots = {label_id: view.intern(group_frame(key, dict(labels).get(key))) for label_id, labels in enumerate(profile.label_sets)}
    stacks: dict[tuple[int, tuple[int, ...]], tuple[int, ...]] = {}
    for sample in profile.samples:
        root = roots.get(sample.labels)
        if root is None:  # a set made after the view began
            root = roots[sample.labels] = view.intern(group_frame(key, profile.labels_of(sample).get(key)))
        ids = stacks.get((root, sample.frame_ids))
        if ids is None:
            ids = stacks[(root, sample.frame_ids)] = view.intern_stack((root, *sample.frame_ids))
        view.add(
            Sample(sample.time_ns, sample.pid, sample.tid, sample.comm, ids, sample.walk_end, sample.off_cpu_ns, sample.labels)
        )
    view.walk_ends = profile.walk_ends
    return view


def with_labels(profile: Profile, wanted: tuple[tuple[str, str], ...]) -> set[int]:
    """The label sets that hold every (key, value) wanted."""
    return {label_id for label_id, labels in enumerate(profile.label_sets) if all(pair in labels for pair in wanted)}
