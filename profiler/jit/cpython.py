"""CPython 3.12+ as jitprof knows it: recognised by its name or libpython3;
its perf-map names ("py::qualname:/path/file.py") read as frames."""

from __future__ import annotations

import re

from profiler.jit.contract import Runtime
from profiler.jit.name_forms import base_name
from profiler.kernel.address_spaces import JIT_MODULE
from profiler.model.profile import Frame, FrameKind

_PYTHON_FRAME = re.compile(r"^py::(.+?):(.+)$")


def _frame_for_name(name: str) -> Frame | None:
    python = _PYTHON_FRAME.match(name)
    if python is None:
        return None
    function, path = python.group(1), python.group(2)
    return Frame(f"{function} ({base_name(path)})", JIT_MODULE, FrameKind.JIT, path, tier="interpreted")


PYTHON = Runtime(
    "CPython",
    "start it with `python -X perf` or PYTHONPERFSUPPORT=1 (Python 3.12+)",
    label="python",
    frame_type="cpython",
    executable=lambda name: re.fullmatch(r"python3(\.\d+)?", name) is not None,
    libraries=("libpython3",),
    frame_for_name=_frame_for_name,
)
