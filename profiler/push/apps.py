"""Which application a process is, for the store's series names: what its
runtime says (node's package or main script, Java's main class or jar:
profiler/jit/registry.py), else the command name.

Read once when a process is followed (and again when it execs).
"""

from __future__ import annotations

import dataclasses
import re
import threading
from dataclasses import dataclass
from pathlib import PurePosixPath

from profiler.jit import registry
from profiler.kernel.proc_status import comm_of, command_line, container_id, executable_name

KERNEL_APP = "kernel"  # samples of kernel threads (--all)

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._/-]+")
_UNSAFE_VALUE = re.compile(r"[^A-Za-z0-9._:/@+-]+")
# Set by jitprof itself: Pyroscope's labels, and OTLP's resource attributes.
RESERVED_LABELS = frozenset(
    {"hostname", "pid", "runtime", "service_name", "__name__"}
    | {"service.name", "host.name", "process.pid", "process.executable.name", "process.runtime.name", "container.id"}
)
# OpenTelemetry's keys have dots (deployment.environment); Pyroscope's labels get _ for them.
LABEL_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")


@dataclass(frozen=True)
class App:
    name: str
    runtime: str  # node, java, ..., native, kernel
    executable: str = ""  # the base name of what it runs
    container_id: str = ""  # the container it runs in, when it does


def label_name(key: str) -> str:
    """A --tag key as Pyroscope's label name (OpenTelemetry's dots become _)."""
    return key.replace(".", "_")


def app_name_text(text: str) -> str:
    """A name the store's series syntax accepts (no braces, commas, spaces)."""
    return _UNSAFE_NAME.sub("_", text).strip("_./") or "unknown"


def label_value_text(text: str) -> str:
    return _UNSAFE_VALUE.sub("_", text) or "_"


def application_of(pid: int, comm: str = "") -> App:
    arguments = command_line(pid)
    fallback = comm_of(pid) or comm or (PurePosixPath(arguments[0]).name if arguments else "") or str(pid)
    found = registry.application(pid, arguments)
    name, runtime = found if found is not None else ("", "native")
    return App(app_name_text(name or fallback), runtime, executable_name(pid), container_id(pid))


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
        app = application_of(pid, comm)
        if self._fixed_name is not None:
            app = dataclasses.replace(app, name=self._fixed_name)
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
