"""What jitprof knows of one JIT runtime, in one record: how it is recognised
in a process, what it is given when jitprof spawns a command, how the names
it gives its JIT code read as frames, what a store calls it, and what to tell
its user. Each runtime's record is in its own module (jit/v8/runtime.py,
jit/jvm/runtime.py, jit/deno.py, jit/bun/runtime.py, jit/moarvm.py, jit/cpython.py,
jit/dotnet.py) and jit/runtimes.py lists them: adding a runtime touches its
module and that list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from profiler.jit.symbol_source import JitSymbolSource
from profiler.kernel.address_spaces import KnownMapping
from profiler.model.profile import Frame


class WorkingDirectoryFiles(Protocol):
    """The run's janitor (jit/files.py), as a runtime's sources use it."""

    def open_v8_logs(self, pid: int) -> list[int]: ...


class PerfMapReader(Protocol):
    """The run's generic perf-map source (jit/perfmap_source.py), as a runtime's sources use it."""

    def reload(self, pid: int) -> int: ...

    def remove_file(self, pid: int) -> bool: ...


@dataclass(frozen=True)
class SourceSettings:
    """What a runtime's symbol sources are built with, for one run."""

    owner_uid: int | None  # the user a spawned command runs as (files of processes gone before they were asked)
    expand_inlining: bool
    janitor: WorkingDirectoryFiles  # files the injected flags make programs write
    ask_processes: bool  # jitprof may ask processes to write files (not under --all)
    kernel: Any  # the BPF program's maps, for a source that has the kernel read more of a frame; None: not asked
    perf_maps: PerfMapReader  # the run's generic perf-map source
    runtime_of: Callable[[int], Runtime | None]  # which runtime a live process runs
    jvm_debug_non_safepoints: bool = False  # turn -XX:+DebugNonSafepoints on in JVMs that run without it
    async_callers: bool = True  # have the kernel read the async functions awaiting a sample's code


@dataclass(frozen=True)
class ProbePoint:
    """Where a uprobe goes: a function of the runtime's file, by its offset in
    the file, and what the kernel's program there does ("submit", "work",
    "done": see bpf/threadpool.bpf.h, threadpool_*)."""

    function: str
    file_offset: int
    role: str


@dataclass(frozen=True)
class Threadpool:
    """A runtime's pool of threads that run work its program queues (node's
    libuv threadpool): where to probe it, and how its stacks read. All three
    functions take a stack's named frames, root first."""

    # A live process's probe points, with the file they are in (open, for the
    # caller to close); None: it has none jitprof can find.
    probe_points: Callable[[int], tuple[Any, list[ProbePoint]] | None]
    # Does a submitting stack hold the program's own code (else it continues
    # the work whose completion submitted it)?
    starts_work: Callable[[Sequence[Frame]], bool]
    # What the work is, from its first submitting stack ("fs.readFile").
    label: Callable[[Sequence[Frame]], str]
    # Where in a pool thread's stack the work begins; None: not in a work item.
    work_begins: Callable[[Sequence[Frame]], int | None]


@dataclass(frozen=True, eq=False)  # compared by identity: one record per runtime
class Runtime:
    """A JIT runtime as jitprof knows it: how it is recognised, flagged, read and named."""

    name: str  # "Node.js"
    fix: str  # how to make it describe its JIT code
    label: str = "jit"  # what a store's series calls it
    frame_type: str = ""  # OpenTelemetry's profile.frame.type of its JIT frames ("v8js", "jvm")
    # Recognised by its executable's name, else by a library it maps (a name
    # start), else by a name its executable exports.
    executable: Callable[[str], bool] = lambda _name: False
    libraries: tuple[str, ...] = ()
    exported_name: bytes = b""
    # What a spawned command's environment gets for it (its flags), from the
    # environment so far, the code-log script jitprof installed (or None) and the command.
    spawn_environment: Callable[[dict[str, str], Path | None, Sequence[str]], dict[str, str]] | None = None
    # The environment variable naming the directory its jitdump goes to: a
    # spawned command gets one of its user's own (jit/jitdump_files.py).
    jitdump_directory_variable: str = ""
    # Given its flags it writes /tmp/perf-PID.map, a path any user can plant a
    # link at first: the run makes that file itself for the process it starts.
    fixed_perf_map: bool = False
    # Its form of JIT code names (perf maps, jitdumps) as a frame; None: not its form.
    frame_for_name: Callable[[str], Frame | None] | None = None
    # For names of its form that carry no script: the frame of a name (as
    # written) given its function's script and line, found in the live process
    # (pid, name, frame); the frame as it was when they are not found.
    place_frame: Callable[[int, str, Frame], Frame] | None = None
    # Names written by this runtime are only ever in its own form.
    own_names_only: bool = False
    # Given V8's flags, it writes V8's logs into its working directory
    # (isolate-0x…-PID-v8.log), which the run removes at its end (jit/files.py).
    writes_v8_logs: bool = False
    # Spawned, is all of a live process's code named from files that outlive
    # it (Deno's code log; Bun's jitdumps, once its interpreter's handlers are
    # known), given its mappings? Then while it runs its samples may wait to be
    # named after it, so that naming does not take the CPU from it.
    named_after_exit: Callable[[int, Sequence[KnownMapping]], bool] | None = None
    # The application a process of it is (a package, a main class); None: unknown.
    application: Callable[[int, list[str]], str | None] | None = None
    # The symbol sources it brings to a run, asked before the generic ones
    # (jitdumps, perf maps).
    symbol_sources: Callable[[SourceSettings], list[JitSymbolSource]] | None = None
    # Its sources are made (and their modules imported) when a run finds the
    # first process of it, not at every start: a node run does not pay for a JVM's.
    sources_when_found: bool = False
    # What to tell a user who attaches to a process of it, given the run's
    # sources and whether inlined frames are wanted; None: the generic "writes
    # no perf map" warning, when it writes none.
    attach_notes: Callable[[int, Sequence[JitSymbolSource], bool], list[str]] | None = None
    # --off-cpu: is a wait with these frames (root first, named) one of its
    # threads waiting for work (an event loop with nothing to do, a pool's
    # idle worker), not code that blocks? None: it has no such threads.
    waits_for_work: Callable[[Sequence[Frame]], bool] | None = None
    # --off-cpu: its threadpool, whose work is charged to the code that queued it.
    threadpool: Threadpool | None = None
