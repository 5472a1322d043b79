"""JIT runtimes: the flags jitprof injects when it spawns a command, how a
running process's runtime is recognised, and what to tell its user."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from profiler.kernel.proc_status import command_line_and_environment
from profiler.kernel.procmaps import read_maps
from profiler.native.elf import MAX_ELF_BYTES
from profiler.native.elf_format import dynamic_strings
from profiler.safety import files, processes

NODE_FLAGS = ("--perf-basic-prof", "--interpreted-frames-native-stack")
NODE_NAMES = ("node", "nodejs", "nsolid", "bun")


@dataclass(frozen=True)
class Runtime:
    name: str  # "Node.js"
    fix: str  # how to make it describe its JIT code


NODE = Runtime("Node.js", f'restart it with NODE_OPTIONS="{" ".join(NODE_FLAGS)}" (or start it with jitprof -- node ...)')
NODE_CODE_LOG_FIX = (
    "start it with `node --log-code --perf-basic-prof --interpreted-frames-native-stack ...` (or under jitprof -- node ...)"
)
JAVA = Runtime(
    "the JVM",
    "jitprof asks the JVM for its perf map; for whole stacks start it with -XX:+PreserveFramePointer "
    "(or under jitprof -- java ...)",
)
MOARVM = Runtime("MoarVM", "start it with MVM_JIT_PERF_MAP=1 in its environment (or under jitprof -- raku ...)")
PYTHON = Runtime("CPython", "start it with `python -X perf` or PYTHONPERFSUPPORT=1 (Python 3.12+)")
DOTNET = Runtime(".NET", "start it with DOTNET_PerfMapEnabled=1 in its environment")
UNKNOWN = Runtime("this runtime", "make it write /tmp/perf-PID.map or a jit-PID.dump (its perf-map or jitdump option)")

# HotSpot: frame pointers in JIT code, and the whole map written as it exits
# (jitprof asks for it while it runs). The exit map needs JDK 17, and an
# older JVM refuses to start on a flag it does not know: it is only added
# when the JVMs the command can reach are 17 or newer.
JAVA_FLAGS = ("-XX:+PreserveFramePointer", "-XX:+UnlockDiagnosticVMOptions", "-XX:+DumpPerfMapAtExit")
JAVA_EXIT_MAP_SINCE = 17
MOARVM_PERF_MAP = "MVM_JIT_PERF_MAP"


def node_flags(preload: Path | None) -> tuple[str, ...]:
    """The perf-map flags, and the code-log preload when there is one."""
    if preload is None or " " in str(preload):
        return NODE_FLAGS
    return (*NODE_FLAGS, f"--require={preload}")


def merge_options(existing: str | None, flags: tuple[str, ...] = NODE_FLAGS) -> str:
    """NODE_OPTIONS (or JAVA_TOOL_OPTIONS) with the flags added once, the user's kept as written."""
    text = existing or ""
    try:
        present = set(shlex.split(text))
    except ValueError:  # unbalanced quotes: node would reject it anyway
        present = set(text.split())
    missing = [flag for flag in flags if flag not in present]
    return " ".join(part for part in (text.strip(), *missing) if part)


def inject_environment(environ: dict[str, str], preload: Path | None = None) -> dict[str, str]:
    """The environment for a spawned command: inherited by every child, so
    `npm test`, npx and shell scripts that end up in node get the flags too."""
    injected = dict(environ)
    injected["NODE_OPTIONS"] = merge_options(environ.get("NODE_OPTIONS"), node_flags(preload))
    injected["JAVA_TOOL_OPTIONS"] = merge_options(environ.get("JAVA_TOOL_OPTIONS"), _java_flags(environ))
    injected.setdefault(MOARVM_PERF_MAP, "1")
    return injected


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


def runtime_of(pid: int) -> Runtime | None:
    """The JIT runtime of a live process: from its executable's name, else
    from what it maps (libjvm.so, libmoar.so, ...) or what its executable
    exports (node's N-API), so a renamed binary is still recognised."""
    try:
        executable = os.path.basename(os.readlink(f"/proc/{pid}/exe")).removesuffix(" (deleted)")
        info = os.stat(f"/proc/{pid}/exe")
    except OSError:
        return None
    by_name = _runtime_named(executable)
    if by_name is not None:
        return by_name
    # Asked a few times per process: what it runs is found once per exec.
    key = (pid, info.st_dev, info.st_ino, info.st_mtime_ns)
    if key in _found:
        return _found[key]
    found = _runtime_mapped(pid) or (NODE if _exports(pid, NODE_EXPORT) else None)
    if len(_found) >= MAX_EXPORTS_KNOWN:
        _found.clear()
    _found[key] = found
    return found


def _runtime_mapped(pid: int) -> Runtime | None:
    for entry in read_maps(pid):
        if entry.executable and entry.path:
            library = os.path.basename(entry.path)
            for prefix, runtime in RUNTIME_LIBRARIES:
                if library.startswith(prefix):
                    return runtime
    return None


def _runtime_named(executable: str) -> Runtime | None:
    if executable in NODE_NAMES or executable.startswith("node"):
        return NODE
    if executable == "java":
        return JAVA
    if executable.startswith(("moar", "rakudo", "raku", "nqp")):
        return MOARVM
    if re.fullmatch(r"python3(\.\d+)?", executable):
        return PYTHON
    if executable == "dotnet":
        return DOTNET
    return None


# A runtime linked into a process as a library of its own.
RUNTIME_LIBRARIES = (
    ("libjvm.so", JAVA),
    ("libmoar.so", MOARVM),
    ("libcoreclr.so", DOTNET),
    ("libpython3", PYTHON),
    ("libnode.so", NODE),
)
# node links V8 into its executable: what marks it is an export every node
# has, for addons.
NODE_EXPORT = b"\0napi_module_register\0"
MAX_EXPORT_NAMES_BYTES = 16 << 20  # node's are 5-8 MB
MAX_EXPORTS_KNOWN = 4096
_exports_known: dict[tuple[int, int, int, bytes], bool] = {}
_found: dict[tuple[int, int, int, int], Runtime | None] = {}


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
