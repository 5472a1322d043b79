""".NET as jitprof knows it: recognised by its host's name or libcoreclr.so;
its perf map is switched on by the user."""

from __future__ import annotations

from profiler.jit.contract import Runtime

DOTNET = Runtime(
    ".NET",
    "start it with DOTNET_PerfMapEnabled=1 in its environment",
    label="dotnet",
    frame_type="dotnet",
    executable=lambda name: name == "dotnet",
    libraries=("libcoreclr.so",),
)
