"""Node.js (V8) as jitprof knows it: recognised by its name, libnode.so or
the N-API names its executable exports; given the perf-map flags and the
code-log preload when spawned; its perf-map and jitdump names read as V8
writes them; named in a store by its package or main script."""

from __future__ import annotations

from pathlib import Path

from profiler.jit.contract import Runtime
from profiler.jit.options import merge_options
from profiler.jit.v8.application import node_application
from profiler.jit.v8.names import parse_v8_name
from profiler.kernel.mappings import JIT_MODULE
from profiler.kernel.proc_status import command_line_and_environment
from profiler.model.profile import Frame, FrameKind

NODE_FLAGS = ("--perf-basic-prof", "--interpreted-frames-native-stack")
NODE_NAMES = ("node", "nodejs", "nsolid", "bun")
NODE_CODE_LOG_FIX = (
    "start it with `node --log-code --perf-basic-prof --interpreted-frames-native-stack ...` (or under jitprof -- node ...)"
)


def node_flags(preload: Path | None) -> tuple[str, ...]:
    """The perf-map flags, and the code-log preload when there is one."""
    if preload is None or " " in str(preload):
        return NODE_FLAGS
    return (*NODE_FLAGS, f"--require={preload}")


def _spawn_environment(environ: dict[str, str], preload: Path | None) -> dict[str, str]:
    return {"NODE_OPTIONS": merge_options(environ.get("NODE_OPTIONS"), node_flags(preload))}


def _frame_for_name(name: str) -> Frame | None:
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


NODE = Runtime(
    "Node.js",
    f'restart it with NODE_OPTIONS="{" ".join(NODE_FLAGS)}" (or start it with jitprof -- node ...)',
    label="node",
    executable=lambda name: name in NODE_NAMES or name.startswith("node"),
    libraries=("libnode.so",),
    exported_name=b"\0napi_module_register\0",  # node links V8 into itself: every node exports N-API for addons
    spawn_environment=_spawn_environment,
    frame_for_name=_frame_for_name,
    application=node_application,
)
