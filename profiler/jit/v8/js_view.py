"""The JavaScript view of a profile (`--js-only`, the live view's `j`): the
program's JS functions, as DevTools and `--cpu-prof` show them, without the
runtime's own frames.

Frames of the runtime (node's binary, the C and C++ runtime libraries, V8's
builtins, stubs and bytecode handlers) are hidden where they sit between and
above JS frames, and below the last one until native code of something else
(an addon, a library the JS called) begins, which stays visible with
everything it calls. Their time goes to the JS frame that called them. A
stack in V8's garbage collector becomes `(garbage collector)`, whoever
allocated (as in DevTools and `--cpu-prof`: the JS function that happened to
allocate did not do that work); a stack with no JS frame at all becomes
`(program)`. A stack in V8's
code-event logging (a perf map or code log being written, which only a
profiler asks for) becomes `(profiling)`: the observer's cost is not charged
to the program's functions.
"""

from __future__ import annotations

from profiler.kernel.address_spaces import JIT_MODULE
from profiler.model.profile import Frame, FrameKind, Profile, Sample

PROGRAM = Frame("(program)", "", FrameKind.NATIVE)
GARBAGE_COLLECTOR = Frame("(garbage collector)", "", FrameKind.NATIVE)
PROFILING = Frame("(profiling)", "", FrameKind.NATIVE)
# V8's code-event logging: perf maps, the code log, jitdump.
PROFILING_MARKERS = (
    "v8::internal::V8FileLogger::",
    "v8::internal::LogFile::",
    "v8::internal::CodeEventLogger::",
    "v8::internal::ExistingCodeLogger::",
    "v8::internal::LinuxPerfBasicLogger::",
    "v8::internal::LinuxPerfJitLogger::",
    "v8::internal::PerfBasicLogger::",
    "v8::internal::PerfJitLogger::",
)
# The runtime's files besides the node binary itself (matched by name start).
RUNTIME_LIBRARIES = (
    "libc.so",
    "libc-",
    "libstdc++.so",
    "libm.so",
    "libgcc_s.so",
    "libpthread.so",
    "libdl.so",
    "ld-linux",
    "[vdso]",
)
NODE_BINARIES = ("node", "nodejs")
# V8's collectors, as they appear in node's own symbols: a stack with any of
# these is collecting, whatever else is on it.
COLLECTING_MARKERS = (
    "v8::internal::Heap::CollectGarbage",
    "v8::internal::Heap::PerformGarbageCollection",
    "v8::internal::Heap::CollectAllGarbage",
    "v8::internal::Heap::CollectAllAvailableGarbage",
    "v8::internal::ScavengerCollector::",
    "v8::internal::MarkCompactCollector::",
    "v8::internal::MinorMarkSweepCollector::",
    "v8::internal::MinorMarkCompactCollector::",
)
# ... and the markers of a stack with no JS that is the heap's own work.
GC_MARKERS = (
    "v8::internal::Heap::",
    "v8::internal::ScavengeJob",
    "v8::internal::MarkCompactCollector",
    "v8::internal::Scavenger",
    "v8::internal::MinorMarkSweep",
    "v8::internal::ConcurrentMarking",
    "v8::internal::GCTracer",
)


def is_js(frame: Frame) -> bool:
    """A frame of the program's JavaScript (compiled at any tier, inlined or not)."""
    return frame.kind is FrameKind.JIT and bool(frame.file) and not frame.name.startswith("[")


def is_runtime(frame: Frame) -> bool:
    if frame.kind is FrameKind.ASYNC:
        return False  # the program's async functions awaiting the code below: DevTools shows them too
    if frame.kind is FrameKind.JIT:
        return not is_js(frame) and not frame.name.startswith("[regexp]")
    if frame.kind is FrameKind.KERNEL:
        return False
    module = frame.module.rsplit("/", 1)[-1]
    return module in NODE_BINARIES or module == JIT_MODULE or module.startswith(RUNTIME_LIBRARIES)


def js_stack(frames: list[Frame]) -> list[Frame] | None:
    """The JS view of one stack (root first); None: no JS frame in it."""
    js_positions = [index for index, frame in enumerate(frames) if is_js(frame)]
    if not js_positions:
        return None
    last_js = js_positions[-1]
    kept = [frame for frame in frames[: last_js + 1] if not is_runtime(frame)]
    tail = frames[last_js + 1 :]
    for index, frame in enumerate(tail):
        if frame.kind is FrameKind.KERNEL or not is_runtime(frame):
            kept.extend(tail[index:])  # what the JS called outside the runtime, and all below it
            break
    return kept


def shown_in_js_view(frames: list[Frame]) -> list[Frame]:
    """One stack as the JS view shows it (the live view's `j`); a wait's
    last frame ("(off-CPU)", "(idle)") stays last."""
    if frames and frames[-1].kind is FrameKind.WAIT:
        shown = _shown(frames[:-1]) if len(frames) > 1 else []
        return shown if shown and shown[-1] == frames[-1] else [*shown, frames[-1]]
    return _shown(frames)


def _shown(frames: list[Frame]) -> list[Frame]:
    if any(frame.kind is FrameKind.NATIVE and frame.name.startswith(PROFILING_MARKERS) for frame in frames):
        return [PROFILING]
    if any(frame.kind is FrameKind.NATIVE and frame.name.startswith(COLLECTING_MARKERS) for frame in frames):
        return [GARBAGE_COLLECTOR]
    shown = js_stack(frames)
    if shown is not None:
        return shown
    return [GARBAGE_COLLECTOR if any(frame.name.startswith(GC_MARKERS) for frame in frames) else PROGRAM]


def js_only(profile: Profile) -> Profile:
    """A copy of the profile in the JS view (the frames list grows by three)."""
    view = Profile(profile.info, losses=profile.losses, traffic=profile.traffic, modules=profile.modules).keep_totals_of(profile)
    view.frames = list(profile.frames)
    view.reindex_frames()
    stacks: dict[tuple[int, ...], tuple[int, ...]] = {}
    for sample in profile.samples:
        ids = stacks.get(sample.frame_ids)
        if ids is None:
            shown = shown_in_js_view([profile.frames[frame_id] for frame_id in sample.frame_ids])
            ids = tuple(view.intern(frame) for frame in shown)
            stacks[sample.frame_ids] = ids
        view.add(
            Sample(sample.time_ns, sample.pid, sample.tid, sample.comm, ids, sample.walk_end, sample.off_cpu_ns, sample.labels)
        )
    return view
