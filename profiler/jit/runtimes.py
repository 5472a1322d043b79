"""The JIT runtimes jitprof knows (each one's record is in its own module:
jit/contract.py), and what is asked of all of them: which one a live process
runs, and the environment a spawned command gets."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from profiler.jit.bun.runtime import BUN
from profiler.jit.contract import Runtime
from profiler.jit.cpython import PYTHON
from profiler.jit.deno import DENO
from profiler.jit.dotnet import DOTNET
from profiler.jit.jvm.runtime import JAVA
from profiler.jit.moarvm import MOARVM
from profiler.jit.v8.runtime import NODE
from profiler.kernel.procmaps import read_maps
from profiler.native.elf import MAX_ELF_BYTES
from profiler.native.elf_format import dynamic_strings
from profiler.safety import files

RUNTIMES = (NODE, DENO, BUN, JAVA, MOARVM, PYTHON, DOTNET)
UNKNOWN = Runtime("this runtime", "make it write /tmp/perf-PID.map or a jit-PID.dump (its perf-map or jitdump option)")
MAX_EXPORT_NAMES_BYTES = 16 << 20  # node's are 5-8 MB
MAX_EXPORTS_KNOWN = 4096
_exports_known: dict[tuple[int, int, int, bytes], bool] = {}
_found: dict[tuple[int, int, int, int], Runtime | None] = {}
MAX_PROCESSES_SEEN = 4096
_last_seen: dict[int, Runtime] = {}  # pid -> the runtime it ran when last asked


def inject_environment(
    environ: dict[str, str],
    preload: Path | None = None,
    command: Sequence[str] = (),
    dump_directory: Callable[[], str | None] | None = None,
) -> dict[str, str]:
    """The environment for a spawned command: every runtime's flags (preload:
    the code-log script node loads; dump_directory: makes where jitdumps go,
    the command's user's own, only if a runtime asks; None, or None made: no
    dump is asked for). Inherited by every child, so `npm test`, npx and shell
    scripts that end up in node get the flags too."""
    injected = dict(environ)
    for runtime in RUNTIMES:
        if runtime.spawn_environment is None:
            continue
        flags = runtime.spawn_environment(injected, preload, command)
        variable = runtime.jitdump_directory_variable
        if variable and flags and not injected.get(variable):  # the user's own choice is kept
            directory = dump_directory() if dump_directory is not None else None
            if directory is None:
                continue  # without a directory of its own, no dump is asked for
            flags[variable] = directory
        injected.update(flags)
    return injected


def fixed_perf_map(executable: str) -> bool:
    """Will the command at this path, given the flags, write /tmp/perf-PID.map
    under its own pid? (Unknown commands may: a script whose interpreter is node.)"""
    name = os.path.basename(executable)
    runtime = next((runtime for runtime in RUNTIMES if runtime.executable(name)), None)
    return runtime is None or runtime.fixed_perf_map


def runtime_of(pid: int) -> Runtime | None:
    """The JIT runtime of a live process: from its executable's name, else
    from what it maps (libjvm.so, libmoar.so, ...) or what its executable
    exports (node's N-API), so a renamed binary is still recognised."""
    found = _runtime_of_live(pid)
    if found is not None:
        if len(_last_seen) >= MAX_PROCESSES_SEEN:
            del _last_seen[next(iter(_last_seen))]
        _last_seen[pid] = found
    return found


def runtime_seen(pid: int) -> Runtime | None:
    """runtime_of, or for a process gone, what it ran when last asked: what
    is said at the end of a run is about processes that may have exited."""
    return runtime_of(pid) or _last_seen.get(pid)


def _runtime_of_live(pid: int) -> Runtime | None:
    try:
        executable = os.path.basename(os.readlink(f"/proc/{pid}/exe")).removesuffix(" (deleted)")
        info = os.stat(f"/proc/{pid}/exe")
    except OSError:
        return None
    for runtime in RUNTIMES:
        if runtime.executable(executable):
            return runtime
    # Asked a few times per process: what it runs is found once per exec.
    key = (pid, info.st_dev, info.st_ino, info.st_mtime_ns)
    if key in _found:
        return _found[key]
    found = _runtime_mapped(pid) or next(
        (runtime for runtime in RUNTIMES if runtime.exported_name and _exports(pid, runtime.exported_name)), None
    )
    if len(_found) >= MAX_EXPORTS_KNOWN:
        _found.clear()
    _found[key] = found
    return found


def _runtime_mapped(pid: int) -> Runtime | None:
    for entry in read_maps(pid):
        if entry.executable and entry.path:
            library = os.path.basename(entry.path)
            for runtime in RUNTIMES:
                if runtime.libraries and library.startswith(runtime.libraries):
                    return runtime
    return None


def _exports(pid: int, name: bytes) -> bool:
    """Does the process's executable export (or import) this name? Read once
    per file (the file is the target's: opened without blocking, bounded)."""
    try:
        with files.open_regular(f"/proc/{pid}/exe", MAX_ELF_BYTES) as handle:
            info = os.fstat(handle.fileno())
            key = (info.st_dev, info.st_ino, info.st_mtime_ns, name)
            known = _exports_known.get(key)
            if known is None:
                try:
                    known = name in dynamic_strings(handle, MAX_EXPORT_NAMES_BYTES)
                except ValueError:  # not ELF (a script's interpreter is the exe, so rare)
                    known = False
                if len(_exports_known) >= MAX_EXPORTS_KNOWN:
                    _exports_known.clear()
                _exports_known[key] = known
            return known
    except OSError:
        return False
