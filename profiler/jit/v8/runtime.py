"""Node.js (V8) as jitprof knows it: recognised by its name, libnode.so or
the N-API names its executable exports; its JS frames named from V8's objects
(and its code log, when it writes one); given the perf-map flags (and with
--no-v8-heap the code-log preload) when spawned; its perf-map and jitdump
names read as V8 writes them; named in a store by its package or main
script; what to tell a user attaching to it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from profiler.jit.contract import Runtime, SourceSettings
from profiler.jit.options import merge_options
from profiler.jit.perfmap import candidate_paths
from profiler.jit.symbol_source import JitSymbolSource
from profiler.jit.v8.application import node_application
from profiler.jit.v8.heap_source import V8HeapSymbols
from profiler.jit.v8.idle import waits_for_work
from profiler.jit.v8.log_source import V8LogSymbols
from profiler.jit.v8.names import parse_v8_name
from profiler.jit.v8.threadpool import NODE_THREADPOOL
from profiler.kernel.address_spaces import JIT_MODULE, KnownMapping
from profiler.kernel.proc_status import command_line_and_environment
from profiler.model.profile import Frame, FrameKind

NODE_FLAGS = ("--perf-basic-prof", "--interpreted-frames-native-stack")
# V8's own sampler (--cpu-prof, --prof, or DevTools' profiler through
# --inspect) walks the stack in a SIGPROF handler, and with
# --interpreted-frames-native-stack that walk takes the code space's lock: a
# tick that lands while the thread holds it hangs node for ever (node
# --cpu-prof running prettier hung 1 run in 4 with that flag alone). Such a
# command is not given it; its interpreted frames are named from V8's objects.
V8_SAMPLER_FLAGS = ("--cpu-prof", "--prof", "--inspect")
NODE_NAMES = ("node", "nodejs", "nsolid")
NODE_CODE_LOG_FIX = (
    "start it with `node --log-code --perf-basic-prof --interpreted-frames-native-stack ...` (or under jitprof -- node ...)"
)


def node_flags(preload: Path | None, v8_samples: bool = False) -> tuple[str, ...]:
    """The perf-map flags (without the per-function interpreter trampolines
    when V8's own sampler runs), and the code-log preload when there is one."""
    flags = NODE_FLAGS[:1] if v8_samples else NODE_FLAGS
    if preload is None or " " in str(preload):
        return flags
    return (*flags, f"--require={preload}")


def _spawn_environment(environ: dict[str, str], preload: Path | None, command: Sequence[str]) -> dict[str, str]:
    existing = environ.get("NODE_OPTIONS")
    words = [*command, *(existing or "").split()]
    v8_samples = any(word.startswith(V8_SAMPLER_FLAGS) for word in words)
    return {"NODE_OPTIONS": merge_options(existing, node_flags(preload, v8_samples))}


def frame_for_v8_name(name: str) -> Frame | None:
    parsed = parse_v8_name(name)
    if parsed is None:
        return None
    return Frame(
        parsed.display,
        JIT_MODULE,
        FrameKind.JIT,
        parsed.script,
        parsed.line,
        parsed.column,
        parsed.tier.value,
        function_line=parsed.line,
        function_column=parsed.column,
    )


def node_code_log_active(pid: int) -> bool:
    """Does this node write V8's code log (its own flags, or jitprof's preload)?"""
    arguments, environment = command_line_and_environment(pid)
    if any(argument.startswith(b"--log-code") or argument in (b"--prof", b"--log-all") for argument in arguments):
        return True
    return any(variable.startswith(b"NODE_OPTIONS=") and b"v8-code-log.cjs" in variable for variable in environment)


def node_flags_active(pid: int) -> bool:
    """Did this node get --perf-basic-prof (on its command line or in NODE_OPTIONS)?"""
    arguments, environment = command_line_and_environment(pid)
    if any(argument.startswith(b"--perf-basic-prof") for argument in arguments):
        return True
    for variable in environment:
        if variable.startswith(b"NODE_OPTIONS=") and b"--perf-basic-prof" in variable:
            return True
    return False


def _symbol_sources(settings: SourceSettings) -> list[JitSymbolSource]:
    """V8's objects (the kernel sends what identifies each JS frame), then its
    code log: both exact by time, with inlined frames."""
    return [
        V8HeapSymbols(
            settings.kernel,
            settings.expand_inlining,
            lambda pid: settings.runtime_of(pid) is NODE,
            async_callers=settings.async_callers,
        ),
        V8LogSymbols(
            expand_inlining=settings.expand_inlining,
            default_owner_uid=settings.owner_uid,
            working_directory_logs=settings.janitor.open_v8_logs,
            # Named after it exits (a spawned deno), its logs' scripts are found while it lives
            # (node's code log, with --no-v8-heap, carries its scripts' sources).
            named_after_exit=lambda pid: (
                (runtime := settings.runtime_of(pid)) is not None
                and runtime is not NODE
                and runtime.writes_v8_logs
                and runtime.named_after_exit is not None
            ),
        ),
    ]


def _named_after_exit(_pid: int, _mappings: Sequence[KnownMapping]) -> bool:
    """V8's objects are read as each sample comes up, ahead of the naming
    (V8HeapSymbols.note_sample, on a reader of their own); the rest is named
    from files that outlive the process: its perf map and code log."""
    return True


def _attach_notes(pid: int, sources: Sequence[JitSymbolSource], inline: bool) -> list[str]:
    """Only what cannot be had: V8's objects name everything they can read."""
    heap = next((source for source in sources if isinstance(source, V8HeapSymbols)), None)
    if heap is not None and heap.reads(pid):
        return []
    has_map = any(os.path.exists(path) for path in candidate_paths(pid))
    refused = heap.refused(pid) if heap is not None else ""
    if refused and not has_map:
        return [
            f"jitprof: warning: cannot read V8's objects in node (pid {pid}): {refused}; so its JavaScript frames "
            f"will show as addresses; {NODE.fix}"
        ]
    if not has_map and not node_flags_active(pid):
        return [
            f"jitprof: warning: node (pid {pid}) has no perf map, so its JavaScript frames will show as addresses; {NODE.fix}"
        ]
    if inline and not node_code_log_active(pid):
        return [
            f"jitprof: note: node (pid {pid}) does not write V8's code log, so functions inlined by the JIT are counted "
            f"in their callers and lines are per function; {NODE_CODE_LOG_FIX}"
        ]
    return []


NODE = Runtime(
    "Node.js",
    f'restart it with NODE_OPTIONS="{" ".join(NODE_FLAGS)}" (or start it with jitprof -- node ...)',
    label="node",
    frame_type="v8js",
    executable=lambda name: name in NODE_NAMES or name.startswith("node"),
    libraries=("libnode.so",),
    exported_name=b"\0napi_module_register\0",  # node links V8 into itself: every node exports N-API for addons
    spawn_environment=_spawn_environment,
    fixed_perf_map=True,
    frame_for_name=frame_for_v8_name,
    application=node_application,
    symbol_sources=_symbol_sources,
    attach_notes=_attach_notes,
    waits_for_work=waits_for_work,
    threadpool=NODE_THREADPOOL,
    writes_v8_logs=True,
    named_after_exit=_named_after_exit,
)
