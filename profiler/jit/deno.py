"""Deno as jitprof knows it: V8 embedded in a stripped Rust binary.

Spawned, it is given V8's code log and the interpreter's per-function
trampolines through DENO_V8_FLAGS (merged with the user's, as NODE_OPTIONS
is for node), which it reads in every deno it starts (`deno task`, `deno
test`'s workers). The log, in its working directory, names all its code
(read by jit/v8/log_source.py for any process that writes one) with the
inlined frames and lines; it is written without the scripts' sources, whose
lines are read from their files (jit/v8/script_file_lines.py), and no perf
map is asked for, since the log names all it would: each costs the program
(prettier under deno: the sources +15 %, the perf map +8 %). V8's objects
are not read: the binary carries no V8 postmortem layouts (no v8dbg_
symbols, no symbol table), so one attached to without the flags gets the
warning with the fix.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from profiler.jit.contract import Runtime
from profiler.jit.perfmap import candidate_paths
from profiler.jit.symbol_source import JitSymbolSource
from profiler.jit.v8.runtime import V8_SAMPLER_FLAGS, frame_for_v8_name
from profiler.kernel.proc_status import command_line_and_environment

DENO_V8_FLAGS = "DENO_V8_FLAGS"
INTERPRETER_FLAG = "--interpreted-frames-native-stack"
PERF_MAP_FLAGS = ("--perf-basic-prof", INTERPRETER_FLAG)
CODE_LOG_FLAGS = ("--log-code", "--log-source-position")
WITHOUT_SOURCES = "--no-log-source-code"  # V8 logs each script's source with the code unless told not to
FIX = f"restart it with {DENO_V8_FLAGS}={','.join(PERF_MAP_FLAGS)} (or start it with jitprof -- deno ...)"
CODE_LOG_FIX = f"start it with {DENO_V8_FLAGS}={','.join((INTERPRETER_FLAG, *CODE_LOG_FLAGS, WITHOUT_SOURCES))} (or under jitprof -- deno ...)"


def merge_v8_flags(existing: str | None, flags: Sequence[str]) -> str:
    """DENO_V8_FLAGS (comma-separated) with the flags added once, the user's kept as written."""
    present = [flag.strip() for flag in (existing or "").split(",") if flag.strip()]
    return ",".join([*present, *(flag for flag in flags if flag not in present)])


def deno_flags(command: Sequence[str], existing: str | None) -> tuple[str, ...]:
    """The code log without sources (a user's --log-source-code kept), and
    the interpreter's per-function trampolines but when V8's own sampler
    runs (a DevTools profiler through --inspect), which they can hang as they
    do node's (jit/v8/runtime.py)."""
    words = [word.strip() for word in (*command, *(existing or "").split(","))]
    v8_samples = any(word.startswith(V8_SAMPLER_FLAGS) for word in words)
    sources = () if "--log-source-code" in words else (WITHOUT_SOURCES,)
    return (*(() if v8_samples else (INTERPRETER_FLAG,)), *CODE_LOG_FLAGS, *sources)


def _spawn_environment(environ: dict[str, str], preload: Path | None, command: Sequence[str]) -> dict[str, str]:
    existing = environ.get(DENO_V8_FLAGS)
    return {DENO_V8_FLAGS: merge_v8_flags(existing, deno_flags(command, existing))}


def _v8_flags_of(pid: int) -> list[bytes]:
    """The V8 flags a live deno was given (DENO_V8_FLAGS and --v8-flags)."""
    arguments, environment = command_line_and_environment(pid)
    given = [argument.removeprefix(b"--v8-flags=") for argument in arguments if argument.startswith(b"--v8-flags=")]
    given += [variable.removeprefix(b"DENO_V8_FLAGS=") for variable in environment if variable.startswith(b"DENO_V8_FLAGS=")]
    return [flag.strip() for text in given for flag in text.split(b",")]


def _attach_notes(pid: int, sources: Sequence[JitSymbolSource], inline: bool) -> list[str]:
    flags = _v8_flags_of(pid)
    if not any(os.path.exists(path) for path in candidate_paths(pid)) and not any(
        flag.startswith((b"--perf-basic-prof", b"--log-code")) for flag in flags
    ):
        return [f"jitprof: warning: deno (pid {pid}) has no perf map, so its JavaScript frames will show as addresses; {FIX}"]
    if inline and b"--log-code" not in flags:
        return [
            f"jitprof: note: deno (pid {pid}) does not write V8's code log, so functions inlined by the JIT are counted "
            f"in their callers and lines are per function; {CODE_LOG_FIX}"
        ]
    return []


DENO = Runtime(
    "Deno",
    FIX,
    label="deno",
    frame_type="v8js",
    executable=lambda name: name == "deno",
    spawn_environment=_spawn_environment,
    fixed_perf_map=True,
    frame_for_name=frame_for_v8_name,
    attach_notes=_attach_notes,
    writes_v8_logs=True,
    named_after_exit=lambda _pid, _mappings: True,  # its code log and its scripts' files
)
