"""Which application a process is, for the store's series names: node's
package or main script, Java's main class or jar, else the command name.

Read once when a process is followed (and again when it execs), from its
command line and, for node, the package.json above its script, opened inside
the process's own root (a target's files are never followed out of it).
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import PurePosixPath

from profiler.jit import runtimes
from profiler.safety.files import open_in_root

MAX_COMMAND_LINE_BYTES = 64 << 10
MAX_PACKAGE_JSON_BYTES = 1 << 20
PACKAGE_SEARCH_DEPTH = 8
KERNEL_APP = "kernel"  # samples of kernel threads (--all)

# node options that take their value as the next argument.
_NODE_VALUE_OPTIONS = frozenset(
    {
        "-r",
        "--require",
        "--import",
        "--loader",
        "--experimental-loader",
        "-C",
        "--conditions",
        "--inspect-port",
        "--debug-port",
        "--env-file",
        "--title",
        "--input-type",
        "--stack-size",
        "--redirect-warnings",
        "--max-old-space-size",
        "--openssl-config",
        "--icu-data-dir",
        "--diagnostic-dir",
        "--report-directory",
    }
)
_NODE_NO_SCRIPT = frozenset({"-e", "--eval", "-p", "--print", "-i", "--interactive", "-"})
_JAVA_VALUE_OPTIONS = frozenset({"-cp", "-classpath", "--class-path", "-p", "--module-path", "--add-modules", "-d"})
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._/-]+")
_UNSAFE_VALUE = re.compile(r"[^A-Za-z0-9._:/@+-]+")
RESERVED_LABELS = frozenset({"hostname", "pid", "runtime", "service_name", "__name__"})
LABEL_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RUNTIME_LABELS = {runtimes.MOARVM: "moarvm", runtimes.PYTHON: "python", runtimes.DOTNET: "dotnet"}


@dataclass(frozen=True)
class App:
    name: str
    runtime: str  # node, java, ..., native, kernel


def app_name_text(text: str) -> str:
    """A name the store's series syntax accepts (no braces, commas, spaces)."""
    return _UNSAFE_NAME.sub("_", text).strip("_./") or "unknown"


def label_value_text(text: str) -> str:
    return _UNSAFE_VALUE.sub("_", text) or "_"


def node_script(arguments: list[str]) -> str | None:
    """The main script of a node command line, or None (-e, the REPL)."""
    index = 1
    while index < len(arguments):
        argument = arguments[index]
        if argument in _NODE_NO_SCRIPT:
            return None
        if argument == "--":
            return arguments[index + 1] if index + 1 < len(arguments) else None
        if argument.startswith("-"):
            index += 2 if argument in _NODE_VALUE_OPTIONS else 1
            continue
        return argument
    return None


def java_main(arguments: list[str]) -> str | None:
    """The main class (or jar, or module/class) of a java command line."""
    index = 1
    while index < len(arguments):
        argument = arguments[index]
        if argument == "-jar" and index + 1 < len(arguments):
            return PurePosixPath(arguments[index + 1]).name.removesuffix(".jar")
        if argument in ("-m", "--module") and index + 1 < len(arguments):
            return arguments[index + 1].rpartition("/")[2] or arguments[index + 1]
        if argument.startswith("-"):
            index += 2 if argument in _JAVA_VALUE_OPTIONS else 1
            continue
        return argument
    return None


def _package_name(pid: int, script: str) -> str | None:
    """The "name" of the nearest package.json above the script, read in the
    process's root."""
    base = PurePosixPath(script)
    if not base.is_absolute():
        try:
            base = PurePosixPath(os.readlink(f"/proc/{pid}/cwd")) / base
        except OSError:
            return None
    directory = base.parent
    for _ in range(PACKAGE_SEARCH_DEPTH):
        if directory.name == "node_modules":
            break
        try:
            with open_in_root(f"/proc/{pid}/root", str(directory / "package.json"), MAX_PACKAGE_JSON_BYTES) as stream:
                document = json.loads(stream.read())
        except (OSError, ValueError):
            document = None
        if isinstance(document, dict) and isinstance(document.get("name"), str) and document["name"]:
            return str(document["name"])
        if directory.parent == directory:
            break
        directory = directory.parent
    return None


def command_line(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as stream:
            raw = stream.read(MAX_COMMAND_LINE_BYTES)
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def comm_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", "rb") as stream:
            return stream.read(64).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def identify(pid: int, comm: str = "") -> App:
    runtime = runtimes.identify(pid)
    arguments = command_line(pid)
    fallback = comm_of(pid) or comm or (PurePosixPath(arguments[0]).name if arguments else "") or str(pid)
    if runtime is runtimes.NODE:
        script = node_script(arguments)
        if script is None:
            return App(app_name_text(fallback), "node")
        package = _package_name(pid, script)
        return App(app_name_text(package or PurePosixPath(script).stem), "node")
    if runtime is runtimes.JAVA:
        main = java_main(arguments)
        return App(app_name_text(main or fallback), "java")
    if runtime is not None:
        return App(app_name_text(fallback), _RUNTIME_LABELS.get(runtime, "jit"))
    return App(app_name_text(fallback), "native")


class AppRegistry:
    """pid -> App, noted by the main thread as processes are followed, read
    on the symbolizer thread when an interval is cut. A retired process is
    kept until the next cut, which may still hold its samples."""

    def __init__(self, fixed_name: str | None = None) -> None:
        self._fixed_name = app_name_text(fixed_name) if fixed_name else None
        self._apps: dict[int, App] = {}
        self._leaving: set[int] = set()
        self._lock = threading.Lock()

    def note(self, pid: int, comm: str = "") -> None:
        app = identify(pid, comm)
        if self._fixed_name is not None:
            app = App(self._fixed_name, app.runtime)
        with self._lock:
            self._apps[pid] = app
            self._leaving.discard(pid)

    def app_of(self, pid: int) -> App | None:
        """None: not a followed process (a kernel thread, with --all)."""
        with self._lock:
            return self._apps.get(pid)

    def forget(self, pid: int) -> None:
        with self._lock:
            if pid in self._apps:
                self._leaving.add(pid)

    def drop_leaving(self) -> None:
        """After a cut: the retired processes' samples are all in it."""
        with self._lock:
            for pid in self._leaving:
                self._apps.pop(pid, None)
            self._leaving.clear()
