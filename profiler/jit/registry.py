"""What the layers above ask of the runtimes, in one place.

The symbolizer, the outputs, the live view, push and run name no runtime:
they ask here (and use the generic JIT-file readers: perf maps, jitdumps),
so a runtime's knowledge stays in its own package (jit/v8, jit/jvm, ...) and
adding one touches its package and this table. tests/test_layout.py checks
that no generic layer imports a runtime's package.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from profiler.jit import runtimes
from profiler.jit.contract import Threadpool
from profiler.jit.jitdump_files import dump_file_pid, make_spawned_dump_directory
from profiler.jit.v8 import js_view, preload
from profiler.jit.v8.names import EMBEDDED_BUILTIN_PREFIX, embedded_builtin_name
from profiler.jit.v8.original_frames import OriginalFrames
from profiler.kernel.address_spaces import KnownMapping
from profiler.kernel.proc_status import process_alive
from profiler.model.profile import Frame, FrameKind, Profile
from profiler.safety import files

if TYPE_CHECKING:
    from profiler.jit.v8.async_context import NodeContexts

PERF_MAP_DIRECTORY = "/tmp"  # fixed, in node, deno and MoarVM


def runtime_contexts(kernel: object, label_store: str) -> NodeContexts:
    """The runtimes' own request contexts samples are labelled from: node's
    AsyncLocalStorage (label_store: a field naming a store to label by)."""
    from profiler.jit.v8.async_context import NodeContexts  # noqa: PLC0415  (a labelling run's only)

    def runs_node(pid: int) -> bool:
        runtime = runtimes.runtime_of(pid)
        return runtime is not None and runtime.name == "Node.js"

    return NodeContexts(kernel, label_store, runs_node)


def spawn_environment(
    environ: dict[str, str], code_log: bool, command: Sequence[str] = (), owner: tuple[int, int] | None = None
) -> dict[str, str]:
    """The environment a spawned command gets: every runtime's flags for
    describing its JIT code (inherited by all it starts); code_log: node
    writes V8's code log too (when its heap is not read); owner: the uid and
    gid it runs as, whose own directory gets the jitdumps."""
    dump_directory = (lambda: make_spawned_dump_directory(*owner)) if owner is not None else None
    return runtimes.inject_environment(environ, preload.install() if code_log else None, command, dump_directory)


_PERF_MAP_NAME = re.compile(r"^perf-(\d+)\.map$")
MAX_SCANNED = 1 << 20  # entries of /tmp looked at


def remove_planted_links() -> dict[int, int]:
    """Before a spawned command runs: links in /tmp at the names runtimes
    write for pids that do not run yet (perf-PID.map, jit-PID.dump) are
    removed, never followed. They are planted: a process the command starts
    in turn (node run by npm) writes its perf map there under a pid jitprof
    cannot know before it runs. Returns how many each owner (uid) had."""
    removed: dict[int, int] = {}
    try:
        directory = os.open(PERF_MAP_DIRECTORY, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return removed
    try:
        with os.scandir(directory) as entries:
            for count, entry in enumerate(entries):
                if count == MAX_SCANNED:
                    break
                perf_map = _PERF_MAP_NAME.match(entry.name)
                pid = int(perf_map.group(1)) if perf_map else dump_file_pid(entry.name)
                if pid is None or not entry.is_symlink() or process_alive(pid):
                    continue
                try:
                    owner = os.stat(entry.name, dir_fd=directory, follow_symlinks=False).st_uid
                    os.unlink(entry.name, dir_fd=directory)
                except OSError:
                    continue
                removed[owner] = removed.get(owner, 0) + 1
    except OSError:
        pass
    finally:
        os.close(directory)
    return removed


def claim_perf_map(pid: int, executable: str, uid: int, gid: int) -> bool:
    """Before a spawned command runs: if it may write /tmp/perf-PID.map (a
    fixed path), make that file jitprof's, for the command's user, so that a
    link planted there by another user is never followed. False when the
    name could not be had (the command must then not run)."""
    if not runtimes.fixed_perf_map(executable):
        return True
    try:
        directory = files.open_directory_for(PERF_MAP_DIRECTORY, uid)
    except files.UnsafeDirectory:
        return True  # not writable for the command either: its runtime writes no map
    try:
        return files.claim_for(directory, f"perf-{pid}.map", uid, gid)
    finally:
        os.close(directory)


def native_symbol_frame(symbol: str, module: str) -> Frame:
    """The frame of a native function symbol, as its runtime names it."""
    if symbol.startswith(EMBEDDED_BUILTIN_PREFIX):  # V8's builtins in node's text, named as its JIT code names them
        display, tier = embedded_builtin_name(symbol)
        return Frame(display, module, FrameKind.NATIVE, tier=tier.value)
    return Frame(symbol, module, FrameKind.NATIVE)


def language_view(profile: Profile) -> Profile:
    """The program's own language, without its runtime's frames (`--js-only`)."""
    return js_view.js_only(profile)


# Frames of a run mapped to the sources they were built from: note_frames as
# the symbolizer makes them, `originals` for the outputs (JavaScript's source maps).
SourceMapper = OriginalFrames


def language_stack(frames: list[Frame]) -> list[Frame]:
    """One stack as the language view shows it (the live view's `j`)."""
    return js_view.shown_in_js_view(frames)


def application(pid: int, arguments: list[str]) -> tuple[str, str] | None:
    """(application name or "" for the command's, runtime label) of a live
    process with a JIT runtime; None for native code."""
    runtime = runtimes.runtime_of(pid)
    if runtime is None:
        return None
    name = runtime.application(pid, arguments) if runtime.application is not None else None
    return name or "", runtime.label


def jit_frame_type(label: str) -> str:
    """OpenTelemetry's profile.frame.type for the JIT frames of a runtime
    (by its series label); "" when it has none."""
    return next((runtime.frame_type for runtime in runtimes.RUNTIMES if runtime.label == label), "")


def waits_for_work(frames: list[Frame]) -> bool:
    """--off-cpu: is a wait with these frames (root first) a runtime's thread
    waiting for work (shown as idle), not code that blocks?"""
    return any(runtime.waits_for_work is not None and runtime.waits_for_work(frames) for runtime in runtimes.RUNTIMES)


def named_after_exit(pid: int, mappings: Sequence[KnownMapping]) -> bool:
    """Is a live process's code all named from files that outlive it (see Runtime)?"""
    runtime = runtimes.runtime_of(pid)
    return runtime is not None and runtime.named_after_exit is not None and runtime.named_after_exit(pid, mappings)


def threadpool_of(pid: int) -> Threadpool | None:
    """--off-cpu: the threadpool of a live process's runtime, if it has one."""
    runtime = runtimes.runtime_of(pid)
    return runtime.threadpool if runtime is not None else None


def threadpools() -> list[Threadpool]:
    return [runtime.threadpool for runtime in runtimes.RUNTIMES if runtime.threadpool is not None]
