"""What the layers above ask of the runtimes, in one place.

The symbolizer, the outputs, the live view, push and run name no runtime:
they ask here (and use the generic JIT-file readers: perf maps, jitdumps),
so a runtime's knowledge stays in its own package (jit/v8, jit/jvm, ...) and
adding one touches its package and this table. tests/test_layout.py checks
that no generic layer imports a runtime's package.
"""

from __future__ import annotations

from profiler.jit import runtimes
from profiler.jit.v8 import js_view, preload
from profiler.model.profile import Frame, FrameKind, Profile

# V8's builtins embedded in node's own text, named as its JIT code names them.
V8_EMBEDDED_BUILTIN = "Builtins_"


def spawn_environment(environ: dict[str, str], code_log: bool) -> dict[str, str]:
    """The environment a spawned command gets: every runtime's flags for
    describing its JIT code (inherited by all it starts); code_log: node
    writes V8's code log too (when its heap is not read)."""
    return runtimes.inject_environment(environ, preload.install() if code_log else None)


def native_symbol_frame(symbol: str, module: str) -> Frame:
    """The frame of a native function symbol, as its runtime names it."""
    if symbol.startswith(V8_EMBEDDED_BUILTIN):
        return Frame(f"[builtin] {symbol[len(V8_EMBEDDED_BUILTIN) :]}", module, FrameKind.NATIVE, tier="builtin")
    return Frame(symbol, module, FrameKind.NATIVE)


def language_view(profile: Profile) -> Profile:
    """The program's own language, without its runtime's frames (`--js-only`)."""
    return js_view.js_only(profile)


def language_stack(frames: list[Frame]) -> list[Frame]:
    """One stack as the language view shows it (the live view's `j`)."""
    return js_view.shown_in_js_view(frames)


def application(pid: int, arguments: list[str]) -> tuple[str, str] | None:
    """(application name or "" for the command's, runtime label) of a live
    process with a JIT runtime; None for native code."""
    runtime = runtimes.runtime_of(pid)
    if runtime is None:
        return None
    name = runtime.application(pid, arguments) if runtime.application is not None else None
    return name or "", runtime.label
