"""Bun as jitprof knows it: JavaScriptCore in a binary without symbols.

JavaScriptCore writes no perf map; asked with BUN_JSC_useJITDump it writes a
jitdump, mapped so that profilers find it, into BUN_JSC_jitDumpDirectory
(without a directory it writes nothing; with one that is gone, bun aborts at
start). Spawned, bun is given both, the directory being its user's own
(jit/jitdump_files.py: kept for a process that outlives the run, and out of
other users' reach, unlike /tmp), and the run removes the dumps.
JavaScriptCore names a function's code `JSC-<tier>: <name>#<hash>`, the hash
being of the function's source: the name and tier are shown, and the script
and line found from the hash (jit/bun/functions.py); JavaScriptCore 1.4's dump
carries no script or line itself (its debug-info option writes nothing).
Unknown BUN_JSC_ variables make bun refuse to start: only these two are set.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from profiler.jit.contract import Runtime, SourceSettings
from profiler.jit.jitdump_files import maps_a_jitdump
from profiler.jit.symbol_source import JitSymbolSource
from profiler.kernel.address_spaces import JIT_MODULE, KnownMapping
from profiler.kernel.proc_status import executable_name
from profiler.model.profile import Frame, FrameKind

JIT_DUMP = "BUN_JSC_useJITDump"
JIT_DUMP_DIRECTORY = "BUN_JSC_jitDumpDirectory"
FIX = f"restart it with {JIT_DUMP}=1 {JIT_DUMP_DIRECTORY}=/tmp (or start it with jitprof -- bun ...)"
# JavaScriptCore's tiers of JS code: its baseline JIT, DFG and FTL (LLInt, the
# interpreter, is native code in bun's own text: jit/bun/interpreter.py).
_JS_TIERS = {"Baseline": "baseline", "DFG": "dfg", "FTL": "ftl", "DFGOSREntry": "dfg"}
_JSC_NAME = re.compile(r"^JSC-(\w+): (.*)$", re.DOTALL)
_HASH = re.compile(r"#[0-9A-Za-z]{6}$")


def _spawn_environment(environ: dict[str, str], preload: Path | None, command: Sequence[str]) -> dict[str, str]:
    if environ.get(JIT_DUMP) == "0":  # the user turned it off
        return {}
    return {JIT_DUMP: "1"}  # the directory: the run's (runtimes.inject_environment)


def frame_for_jsc_name(name: str) -> Frame | None:
    """`JSC-DFG: leaf#BiF1ZL` is the JS function leaf in the DFG tier; the
    runtime's own code (`JSC-Thunk: ...`, inline caches) is named as written."""
    matched = _JSC_NAME.match(name)
    if matched is None:
        return None
    kind, rest = matched.group(1), matched.group(2).strip()
    tier = _JS_TIERS.get(kind)
    if tier is None:
        return Frame(f"[{kind}] {rest}", JIT_MODULE, FrameKind.JIT, tier="stub")
    function = _HASH.sub("", rest)
    # Anonymous functions keep their source hash: it is all that tells them apart.
    return Frame(function or f"(anonymous){rest}", JIT_MODULE, FrameKind.JIT, tier=tier)


def _attach_notes(pid: int, sources: Sequence[JitSymbolSource], inline: bool) -> list[str]:
    if maps_a_jitdump(pid):
        return []
    return [f"jitprof: warning: bun (pid {pid}) writes no jitdump, so its JavaScript frames will show as addresses; {FIX}"]


def _symbol_sources(settings: SourceSettings) -> list[JitSymbolSource]:
    from profiler.jit.bun.sources import bun_sources  # noqa: PLC0415  (made when the first bun is found)

    return bun_sources(lambda pid: BUN.executable(executable_name(pid)))


def _place_frame(pid: int, name: str, frame: Frame) -> Frame:
    from profiler.jit.bun.sources import place_frame  # noqa: PLC0415

    return place_frame(pid, name, frame)


def _named_after_exit(pid: int, mappings: Sequence[KnownMapping]) -> bool:
    """Its jitdumps outlive it; its interpreter's handlers are read from a
    live bun, unless a bun of its binary showed them before (jitprof's cache)."""
    from profiler.jit.bun.interpreter import handlers_kept  # noqa: PLC0415

    return any(mapping.module_name == "bun" and handlers_kept(mapping) for mapping in mappings)


BUN = Runtime(
    "Bun",
    FIX,
    label="bun",
    executable=lambda name: name == "bun",
    spawn_environment=_spawn_environment,
    jitdump_directory_variable=JIT_DUMP_DIRECTORY,
    frame_for_name=frame_for_jsc_name,
    place_frame=_place_frame,
    symbol_sources=_symbol_sources,
    sources_when_found=True,
    own_names_only=True,
    attach_notes=_attach_notes,
    named_after_exit=_named_after_exit,
)
