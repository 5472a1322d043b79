"""Readable frames from the names runtimes give their JIT code in perf maps
and jitdumps: V8's, HotSpot's, MoarVM's and CPython's forms are understood;
any other name is shown as written.
"""

from __future__ import annotations

import re

from profiler.jit import runtimes
from profiler.jit.v8.names import parse_v8_name
from profiler.kernel.mappings import JIT_MODULE
from profiler.model.profile import Frame, FrameKind

# HotSpot: "long Hot.leaf(int)", "void Hot.main(java.lang.String[])"
_JAVA_METHOD = re.compile(r"^(?:[\w$.]+(?:\[\])*) ([\w$.]+\.[\w$<>]+)\(([^()]*)\)$")
# MoarVM: "fib(/x/fib.raku:2)", "(gen/moar/BOOTSTRAP/v6c.nqp:2473)" for an anonymous block
_MOAR_FRAME = re.compile(r"^(.*)\((.+):(\d+)\)$")
# CPython 3.12 `-X perf`: "py::qualname:/path/file.py"
_PYTHON_FRAME = re.compile(r"^py::(.+?):(.+)$")


def frame_for_name(name: str, runtime: runtimes.Runtime | None = None) -> Frame:
    """The frame for a JIT code name; `runtime` when the writer is known."""
    if runtime is runtimes.JAVA:
        return _java_frame(name)
    if runtime is runtimes.MOARVM:
        moar = _MOAR_FRAME.match(name)
        if moar:
            function, path, line = moar.group(1) or "<anon>", moar.group(2), int(moar.group(3))
            return Frame(
                f"{function} ({_base_name(path)}:{line})",
                JIT_MODULE,
                FrameKind.JIT,
                path,
                line,
                tier="jit",
                function_line=line,
            )
    python = _PYTHON_FRAME.match(name)
    if python:
        function, path = python.group(1), python.group(2)
        return Frame(f"{function} ({_base_name(path)})", JIT_MODULE, FrameKind.JIT, path, tier="interpreted")
    parsed = parse_v8_name(name)
    if parsed is None:  # another runtime's name: shown as written
        return Frame(name, JIT_MODULE, FrameKind.JIT)
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


def _java_frame(name: str) -> Frame:
    method = _JAVA_METHOD.match(name)
    if method:  # the return type adds nothing a reader needs
        return Frame(f"{method.group(1)}({method.group(2)})", JIT_MODULE, FrameKind.JIT, tier="compiled")
    if name == "Interpreter":
        return Frame("[interpreter]", JIT_MODULE, FrameKind.JIT, tier="interpreted")
    return Frame(f"[stub] {name}", JIT_MODULE, FrameKind.JIT, tier="stub")


def _base_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1] or path
