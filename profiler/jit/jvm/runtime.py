"""HotSpot as jitprof knows it: recognised by its launcher's name or
libjvm.so; given frame pointers in JIT code and the exit map when spawned;
its perf-map names read as HotSpot writes them (a snapshot asked for, see
jvm/perfmap_source.py); named in a store by its main class or jar."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from profiler.jit.contract import Runtime, SourceSettings
from profiler.jit.jvm.application import java_main
from profiler.jit.jvm.idle import waits_for_work
from profiler.jit.jvm.perfmap_source import REFRESH_S, JvmPerfMaps
from profiler.jit.options import merge_options
from profiler.jit.symbol_source import JitSymbolSource
from profiler.kernel.address_spaces import JIT_MODULE
from profiler.model.profile import Frame, FrameKind
from profiler.safety import processes

# HotSpot: frame pointers in JIT code, and the whole map written as it exits
# (jitprof asks for it while it runs). The exit map needs JDK 17, and an
# older JVM refuses to start on a flag it does not know: it is only added
# when the JVMs the command can reach are 17 or newer.
JAVA_FLAGS = ("-XX:+PreserveFramePointer", "-XX:+UnlockDiagnosticVMOptions", "-XX:+DumpPerfMapAtExit")
JAVA_EXIT_MAP_SINCE = 17
# HotSpot: "long Hot.leaf(int)", "void Hot.main(java.lang.String[])"
_JAVA_METHOD = re.compile(r"^(?:[\w$.]+(?:\[\])*) ([\w$.]+\.[\w$<>]+)\(([^()]*)\)$")


def _spawn_environment(environ: dict[str, str], preload: Path | None, command: Sequence[str]) -> dict[str, str]:
    return {"JAVA_TOOL_OPTIONS": merge_options(environ.get("JAVA_TOOL_OPTIONS"), _java_flags(environ))}


def _java_flags(environ: dict[str, str]) -> tuple[str, ...]:
    """The JVM flags, less those the user turned off on purpose, and the
    exit map's unless every JVM the command can find is new enough."""
    existing = environ.get("JAVA_TOOL_OPTIONS", "")
    flags: tuple[str, ...] = JAVA_FLAGS
    versions = [java_major_version(home) for home in _java_homes(environ)]
    if not versions or any(version < JAVA_EXIT_MAP_SINCE for version in versions):
        flags = flags[:1]
    return tuple(flag for flag in flags if flag.replace("+", "-", 1) not in existing)


def _java_homes(environ: dict[str, str]) -> list[Path]:
    """JAVA_HOME and the installation of the `java` on PATH."""
    homes = []
    if environ.get("JAVA_HOME"):
        homes.append(Path(environ["JAVA_HOME"]))
    java = shutil.which("java", path=processes.absolute_path_entries(environ.get("PATH", os.defpath)))
    if java is not None:
        homes.append(Path(os.path.realpath(java)).parent.parent)
    return homes


def java_major_version(home: Path) -> int:
    """17 for a JDK 17 installation (its `release` file); 0 when unknown."""
    try:
        text = (home / "release").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return 0
    found = re.search(r'^JAVA_VERSION="(?:1\.)?(\d+)', text, re.MULTILINE)
    return int(found.group(1)) if found else 0


def _frame_for_name(name: str) -> Frame:
    method = _JAVA_METHOD.match(name)
    if method:  # the return type adds nothing a reader needs
        return Frame(f"{method.group(1)}({method.group(2)})", JIT_MODULE, FrameKind.JIT, tier="compiled")
    if name == "Interpreter":
        return Frame("[interpreter]", JIT_MODULE, FrameKind.JIT, tier="interpreted")
    return Frame(f"[stub] {name}", JIT_MODULE, FrameKind.JIT, tier="stub")


def _symbol_sources(settings: SourceSettings) -> list[JitSymbolSource]:
    """Under --all no JVM is asked to write a map (root would write into every JVM's /tmp)."""
    if not settings.ask_processes:
        return []
    return [JvmPerfMaps(settings.perf_maps, lambda pid: settings.runtime_of(pid) is JAVA)]


def _attach_notes(pid: int, sources: Sequence[JitSymbolSource], inline: bool) -> list[str]:
    return [f"jitprof: note: asking the JVM (pid {pid}) for its perf map every {REFRESH_S:g} s"]


JAVA = Runtime(
    "the JVM",
    "jitprof asks the JVM for its perf map; for whole stacks start it with -XX:+PreserveFramePointer "
    "(or under jitprof -- java ...)",
    label="java",
    frame_type="jvm",
    executable=lambda name: name == "java",
    libraries=("libjvm.so",),
    spawn_environment=_spawn_environment,
    frame_for_name=_frame_for_name,
    own_names_only=True,
    application=lambda pid, arguments: java_main(arguments),
    symbol_sources=_symbol_sources,
    attach_notes=_attach_notes,
    waits_for_work=waits_for_work,
)
