"""--off-cpu: node's threadpool (libuv's src/threadpool.c), whose work is
charged to the JavaScript that queued it.

Every threadpool item goes through uv__work_submit(loop, w, kind, work,
done): fs (uv__fs_work), dns.lookup (uv__getaddrinfo_work), dns.lookupService,
crypto's random bytes, and uv_queue_work (uv__queue_work), which node's
crypto jobs (pbkdf2, scrypt, ...), zlib and addons' napi_queue_async_work
use. A pool thread runs work(w); the loop thread then runs done(w, status),
and the JavaScript callback it calls often submits the next item (fs.readFile
is open, fstat, reads, close, one after another). These are libuv's local
functions: found in the .symtab of node (or libnode.so), which official
builds keep; a build whose libuv is a stripped shared library has none.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from profiler.jit.contract import ProbePoint, Threadpool
from profiler.jit.v8.heap_source import node_code_mappings
from profiler.jit.v8.js_view import is_js
from profiler.kernel.procmaps import read_maps
from profiler.model.profile import Frame
from profiler.native import elf_format
from profiler.native.elf import MAX_ELF_BYTES, PARSE_ERRORS
from profiler.safety import files

SUBMIT = "uv__work_submit"
COMPLETIONS = "uv__work_done"  # the loop thread running the done functions of finished items
QUEUE_WORK = "uv_queue_work"  # public; node's build has uv__work_submit inlined in it
WORK_FUNCTIONS = ("uv__fs_work", "uv__getaddrinfo_work", "uv__getnameinfo_work", "uv__random_work", "uv__queue_work")
DONE_FUNCTIONS = ("uv__fs_done", "uv__getaddrinfo_done", "uv__getnameinfo_done", "uv__random_done", "uv__queue_done")
# When no JavaScript says what the work is: by the function that runs it.
KIND_OF_WORK = {
    "uv__fs_work": "fs",
    "uv__getaddrinfo_work": "dns.lookup",
    "uv__getnameinfo_work": "dns.lookupService",
    "uv__random_work": "crypto.random",
    "uv__queue_work": "uv_queue_work",
}
POOL_LOOP = "worker"  # libuv's threadpool thread (static)
POOL_LOOP_CALLS = ("uv_cond_", "uv_mutex_", "uv_sem_")  # the loop's own: waiting for, taking items
NODE_SCHEME = "node:"
_BARE_NAME = re.compile(r"^(.*?) \S+:\d+(?::\d+)?$", re.S)


def probe_points(pid: int) -> tuple[Any, list[ProbePoint]] | None:
    """The file holding node's libuv (its executable, or libnode.so) as mapped
    by pid, opened, with where its threadpool functions are."""
    try:
        entries = node_code_mappings(pid, read_maps(pid))
        if not entries:
            return None
        handle = files.open_regular(f"/proc/{pid}/map_files/{entries[0].start:x}-{entries[0].end:x}", MAX_ELF_BYTES)
    except OSError:
        return None
    try:
        wanted = (
            {SUBMIT: "submit", QUEUE_WORK: "queue_work"}
            | dict.fromkeys(WORK_FUNCTIONS, "work")
            | dict.fromkeys(DONE_FUNCTIONS, "done")
        )
        symbols = elf_format.symbols_named(handle, tuple(name.encode() for name in wanted), 4 * len(wanted))
        segments, _build_id = elf_format.read_load_segments_and_build_id(handle)
    except PARSE_ERRORS:
        handle.close()
        return None
    points = []
    for symbol in symbols:
        role = wanted.get(symbol.name)
        segment = next(
            (segment for segment in segments if segment.vaddr <= symbol.value < segment.vaddr + segment.file_size), None
        )
        if role is None or segment is None:
            continue
        points.append(ProbePoint(symbol.name, symbol.value - segment.vaddr + segment.file_offset, role))
    if not any(point.role == "submit" for point in points) or not any(point.role == "work" for point in points):
        handle.close()
        return None
    return handle, points


def _program_code(frame: Frame) -> bool:
    return is_js(frame) and not frame.file.startswith(NODE_SCHEME)


def starts_work(frames: Sequence[Frame]) -> bool:
    """A submit under the program's own JavaScript starts a chain of work; one
    under node's alone, in the completion of another item (readFile's next
    read, from the last one's callback), continues that item's chain."""
    return any(_program_code(frame) for frame in frames) or not any(frame.name == COMPLETIONS for frame in frames)


WRAPPERS = frozenset({NODE_SCHEME + "internal/util"})  # util.promisify's: the API is the node frame below


def label(frames: Sequence[Frame]) -> str:
    """The node API the program called, "fs.readFile": the first of node's own
    JS frames below the program's last one."""
    last_own = max((index for index, frame in enumerate(frames) if _program_code(frame)), default=-1)
    for frame in frames[last_own + 1 :]:
        if is_js(frame) and frame.file.startswith(NODE_SCHEME) and frame.file not in WRAPPERS:
            return f"{_area(frame.file)}.{_function(frame)}"
    for frame in reversed(frames):
        if frame.name in KIND_OF_WORK:
            return KIND_OF_WORK[frame.name]
    return "work"


def _area(file: str) -> str:
    """node:fs -> fs; node:internal/crypto/pbkdf2 -> crypto; node:internal/fs/promises -> fs."""
    path = file[len(NODE_SCHEME) :].removeprefix("internal/")
    return path.split("/", 1)[0] or "node"


def _function(frame: Frame) -> str:
    found = _BARE_NAME.match(frame.name)
    name = found.group(1) if found else frame.name
    return name.rsplit(".", 1)[-1] or "(anonymous)"


def work_begins(frames: Sequence[Frame]) -> int | None:
    """Where the work is in a pool thread's stack: what libuv's worker loop
    calls (uv__queue_work's frame is gone: it ends in a tail call)."""
    for index, frame in enumerate(frames[:-1]):
        if frame.name == POOL_LOOP:
            work = frames[index + 1].name
            return None if work.startswith(POOL_LOOP_CALLS) else index + 1
    return None


NODE_THREADPOOL = Threadpool(probe_points=probe_points, starts_work=starts_work, label=label, work_begins=work_begins)
