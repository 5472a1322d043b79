"""HotSpot as jitprof knows it: recognised by its launcher's name or
libjvm.so; given frame pointers in JIT code when spawned; its frames named
from its own structures (jvm/hotspot_source.py), and where those cannot be
read, from perf maps it is asked for (jvm/perfmap_source.py; their names
read as HotSpot writes them); named in a store by its main class or jar."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from profiler.jit.contract import Runtime, SourceSettings
from profiler.jit.jvm.application import java_main
from profiler.jit.jvm.idle import waits_for_work
from profiler.jit.options import merge_options
from profiler.jit.symbol_source import JitSymbolSource
from profiler.kernel.address_spaces import JIT_MODULE
from profiler.model.profile import Frame, FrameKind

# HotSpot: frame pointers in JIT code, and debug information at every pc of
# compiled code, not only at its safepoints and calls (which methods C2
# inlined where, and the lines); its frames are named from its memory: no
# perf map, exit map or agent is asked for.
JAVA_FLAGS = ("-XX:+PreserveFramePointer", "-XX:+UnlockDiagnosticVMOptions", "-XX:+DebugNonSafepoints")
# HotSpot: "long Hot.leaf(int)", "void Hot.main(java.lang.String[])"
_JAVA_METHOD = re.compile(r"^(?:[\w$.]+(?:\[\])*) ([\w$.]+\.[\w$<>]+)\(([^()]*)\)$")


def _spawn_environment(environ: dict[str, str], preload: Path | None, command: Sequence[str]) -> dict[str, str]:
    return {"JAVA_TOOL_OPTIONS": merge_options(environ.get("JAVA_TOOL_OPTIONS"), _java_flags(environ))}


def _java_flags(environ: dict[str, str]) -> tuple[str, ...]:
    """The JVM flags, less those the user turned off on purpose."""
    existing = environ.get("JAVA_TOOL_OPTIONS", "")
    return tuple(flag for flag in JAVA_FLAGS if flag.replace("+", "-", 1) not in existing)


def _frame_for_name(name: str) -> Frame:
    method = _JAVA_METHOD.match(name)
    if method:  # the return type adds nothing a reader needs
        return Frame(f"{method.group(1)}({method.group(2)})", JIT_MODULE, FrameKind.JIT, tier="compiled")
    if name == "Interpreter":
        return Frame("[interpreter]", JIT_MODULE, FrameKind.JIT, tier="interpreted")
    return Frame(f"[stub] {name}", JIT_MODULE, FrameKind.JIT, tier="stub")


def _symbol_sources(settings: SourceSettings) -> list[JitSymbolSource]:
    """The JVM's structures; where they cannot be read, a perf map asked for
    (not under --all: root would write into every JVM's /tmp). Made, and
    their modules imported, when the run finds its first JVM."""
    from profiler.jit.jvm.hotspot_source import HotSpotStructures  # noqa: PLC0415
    from profiler.jit.jvm.perfmap_source import JvmPerfMaps  # noqa: PLC0415

    def is_java(pid: int) -> bool:
        return settings.runtime_of(pid) is JAVA

    structures = HotSpotStructures(settings.kernel, is_java, settings.expand_inlining, settings.jvm_debug_non_safepoints)
    if not settings.ask_processes:
        return [structures]
    return [structures, JvmPerfMaps(settings.perf_maps, is_java, wanted=lambda pid: not structures.reads(pid))]


def _attach_notes(pid: int, sources: Sequence[JitSymbolSource], inline: bool) -> list[str]:
    from profiler.jit.jvm.hotspot_source import HotSpotStructures  # noqa: PLC0415  (made by now: a JVM was found)
    from profiler.jit.jvm.perfmap_source import REFRESH_S, JvmPerfMaps  # noqa: PLC0415

    structures = next((source for source in sources if isinstance(source, HotSpotStructures)), None)
    if structures is not None and structures.reads(pid):
        return []
    why = structures.refused(pid) if structures is not None else ""
    asked = any(isinstance(source, JvmPerfMaps) for source in sources)
    reason = f"its structures cannot be read ({why}); " if why else ""
    if not asked:
        return [f"jitprof: note: the JVM (pid {pid}): {reason}its Java frames stay unnamed"]
    return [f"jitprof: note: the JVM (pid {pid}): {reason}asking it for its perf map every {REFRESH_S:g} s"]


JAVA = Runtime(
    "the JVM",
    "jitprof names its frames from the JVM's own structures; for whole stacks start it with "
    "-XX:+PreserveFramePointer (or under jitprof -- java ...)",
    label="java",
    frame_type="jvm",
    executable=lambda name: name == "java",
    libraries=("libjvm.so",),
    spawn_environment=_spawn_environment,
    frame_for_name=_frame_for_name,
    own_names_only=True,
    application=lambda pid, arguments: java_main(arguments),
    symbol_sources=_symbol_sources,
    sources_when_found=True,
    attach_notes=_attach_notes,
    waits_for_work=waits_for_work,
)
