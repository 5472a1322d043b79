"""Readable frames from the names runtimes give their JIT code in perf maps
and jitdumps: each runtime's own form (jit/contract.py: frame_for_name) is
understood; any other name is shown as written.
"""

from __future__ import annotations

from profiler.jit.bun.runtime import BUN
from profiler.jit.contract import Runtime
from profiler.jit.cpython import PYTHON
from profiler.jit.v8.runtime import NODE
from profiler.kernel.address_spaces import JIT_MODULE
from profiler.model.profile import Frame, FrameKind


def frame_for_name(name: str, runtime: Runtime | None = None) -> Frame:
    """The frame for a JIT code name; `runtime` when the writer is known
    (its own form first; a runtime that writes only its own form, the JVM,
    is read only that way)."""
    if runtime is not None and runtime.frame_for_name is not None:
        frame = runtime.frame_for_name(name)
        if frame is not None or runtime.own_names_only:
            return frame if frame is not None else Frame(name, JIT_MODULE, FrameKind.JIT)
    for other in GENERIC_FORMS:
        frame = other(name)
        if frame is not None:
            return frame
    return Frame(name, JIT_MODULE, FrameKind.JIT)  # another runtime's name: shown as written


# The forms tried whoever wrote the name (an unknown writer, node's own):
# they cannot be mistaken for another's.
GENERIC_FORMS = [form for form in (PYTHON.frame_for_name, NODE.frame_for_name, BUN.frame_for_name) if form is not None]
