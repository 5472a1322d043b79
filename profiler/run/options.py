"""What one profiling run was asked to do (from the command line)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from profiler.output import OutputRequest

# --off-cpu-min's default: see docs/off-cpu.md.
DEFAULT_SHORTEST_WAIT_NS = 1_000_000
from profiler.push.defaults import DEFAULT_DIRECTORY, DEFAULT_MAX_BYTES


@dataclass
class PushOptions:
    """--push and --otlp: send the profile of each application process every
    interval, to one store or both."""

    url: str | None = None  # --push: Pyroscope's /ingest
    otlp_url: str | None = None  # --otlp: OTLP profiles over HTTP
    interval_s: float = 15.0
    app_name: str | None = None
    tags: list[tuple[str, str]] = field(default_factory=list)
    tenant: str | None = None  # X-Scope-OrgID
    spool_dir: Path = DEFAULT_DIRECTORY
    spool_max_bytes: int = DEFAULT_MAX_BYTES


@dataclass
class RecordingOptions:
    """What the command line asked of a run."""

    command: list[str]
    pids: list[int]
    frequency_hz: int
    duration_s: float | None
    outputs: list[OutputRequest]  # empty: the default jitprof-<pid>.svg
    kernel_stacks: bool = False
    root_by_pid: bool = False
    dwarf: bool = True
    inject: bool = True  # add the runtimes' JIT-symbol flags to a spawned command
    keep_jit_files: bool = False
    jvm_debug_non_safepoints: bool = False  # turn that flag on in JVMs running without it
    inline: bool = True  # expand inlined JS functions (V8's heap, or its code log)
    v8_heap: bool = True  # name JS frames from V8's objects in the process's memory
    async_callers: bool = True  # node samples carry the async functions awaiting them (read from V8's objects)
    debuginfod: bool = True  # ask DEBUGINFOD_URLS for the debug files of stripped binaries
    source_maps: bool = True  # JS frames shown as the sources their scripts' maps name
    group_by: str = ""  # outputs split by this label: a root frame KEY=value
    labels: bool = True  # read the context processes publish (profiler/labels/)
    label_store: str = ""  # a field name: node's AsyncLocalStorage store that has it labels samples
    js_only: bool = False  # outputs show the language view (profiler/jit/registry.py: the JS view)
    live_view: bool = False  # the terminal view (the caller checks for a TTY)
    user: str | None = None
    as_root: bool = False
    all_processes: bool = False  # --all: every process on the machine
    push: PushOptions | None = None
    off_cpu: bool = False  # --off-cpu: waits too, with their stacks and time
    shortest_wait_ns: int = DEFAULT_SHORTEST_WAIT_NS  # --off-cpu-min
    keep_idle: bool = False  # --idle
