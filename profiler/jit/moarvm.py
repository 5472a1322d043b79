"""MoarVM (Rakudo, NQP) as jitprof knows it: recognised by its name or
libmoar.so; told to write its perf map when spawned; its names read as
"name(file:line)"."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from profiler.jit.contract import Runtime
from profiler.jit.name_forms import base_name
from profiler.kernel.address_spaces import JIT_MODULE
from profiler.model.profile import Frame, FrameKind

MOARVM_PERF_MAP = "MVM_JIT_PERF_MAP"
# "fib(/x/fib.raku:2)", "(gen/moar/BOOTSTRAP/v6c.nqp:2473)" for an anonymous block
_MOAR_FRAME = re.compile(r"^(.*)\((.+):(\d+)\)$")


def _spawn_environment(environ: dict[str, str], preload: Path | None, command: Sequence[str]) -> dict[str, str]:
    return {} if MOARVM_PERF_MAP in environ else {MOARVM_PERF_MAP: "1"}


def _frame_for_name(name: str) -> Frame | None:
    moar = _MOAR_FRAME.match(name)
    if moar is None:
        return None
    function, path, line = moar.group(1) or "<anon>", moar.group(2), int(moar.group(3))
    return Frame(f"{function} ({base_name(path)}:{line})", JIT_MODULE, FrameKind.JIT, path, line, tier="jit", function_line=line)


MOARVM = Runtime(
    "MoarVM",
    "start it with MVM_JIT_PERF_MAP=1 in its environment (or under jitprof -- raku ...)",
    label="moarvm",
    executable=lambda name: name.startswith(("moar", "rakudo", "raku", "nqp")),
    libraries=("libmoar.so",),
    spawn_environment=_spawn_environment,
    fixed_perf_map=True,
    frame_for_name=_frame_for_name,
)
