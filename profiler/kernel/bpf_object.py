"""The sampler as a loadable object: compiled by BCC once, then kept.

BCC compiles C to BPF at run time, which costs seconds (clang and LLVM in
process). What it produces is the same for the same source, flags, kernel and
BCC: the programs' instructions, with each map reference an ld_imm64 of the
map's file descriptor, and the maps' definitions. So after one compile that
is kept, in root's cache, keyed by all four; a later run creates its own maps
(no two runs share any state), patches their descriptors into the
instructions and loads the programs: a few milliseconds, and the kernel's
verifier checks the programs again as it always does.
"""

from __future__ import annotations

import base64
import ctypes
import errno
import hashlib
import importlib.util
import json
import os
import re
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiler.kernel import bpf_calls
from profiler.native import cache
from profiler.safety.files import root_only

FORMAT_VERSION = 1
INSTRUCTION = struct.Struct("<BBhi")  # opcode, registers, offset, immediate
LOAD_IMM64 = 0x18
PSEUDO_MAP_FD = 1
PROG_TYPE_KPROBE = 2  # uprobes too
PROG_TYPE_TRACEPOINT = 5
PROG_TYPE_PERF_EVENT = 7
PROG_TYPE_RAW_TRACEPOINT = 17
TRACEPOINT_PREFIX = "tracepoint__"
RAW_TRACEPOINT_PREFIX = "raw_tracepoint__"
UPROBE_PREFIX = "threadpool_"  # attached by user space to a process's libuv
# Walker programs that raw tracepoint and uprobe programs tail-call, so of their type.
RAW_TRACEPOINT_WALKER_SUFFIX = "_off_cpu"
UPROBE_WALKER_SUFFIX = "_uprobe"
MAX_OBJECT_BYTES = 16 << 20
LOAD_RETRIES = 5  # a program's load interrupted by a signal
LOAD_THREADS = max(2, min(4, os.cpu_count() or 2))  # programs verified at once
INSTALLED_DIR = Path(__file__).resolve().parents[2] / "native" / "build" / "bpf"


class BpfLoadError(Exception):
    """A map could not be created or a program not loaded; the message says which and why."""

    def __init__(self, message: str, error_number: int = 0) -> None:
        super().__init__(message)
        self.error_number = error_number

    @property
    def out_of_resources(self) -> bool:
        """Descriptors or memory ran out: compiling again would not help."""
        return self.error_number in (errno.EMFILE, errno.ENFILE, errno.ENOMEM)

    @property
    def interrupted(self) -> bool:
        """Signals kept interrupting the verifier: the program itself is not at fault."""
        return self.error_number == errno.EAGAIN


@dataclass(frozen=True)
class MapSpec:
    """A map as the compiled object declares it."""

    name: str
    map_type: int
    key_size: int
    value_size: int
    max_entries: int
    flags: int


@dataclass(frozen=True)
class ProgramSpec:
    """A program of the compiled object, with the maps it refers to."""

    name: str
    program_type: int
    instructions: bytes  # map descriptors zeroed
    map_references: tuple[tuple[int, str], ...]  # (instruction index, map name)


@dataclass(frozen=True)
class BpfObject:
    """The compiled sampler: its maps and programs."""

    maps: tuple[MapSpec, ...]
    programs: tuple[ProgramSpec, ...]
    license: str
    kernel_version: int


@dataclass
class LoadedObject:
    """Descriptors of one run's maps and programs (closed by close())."""

    map_fds: dict[str, int]
    program_fds: dict[str, int]
    specs: dict[str, MapSpec]

    def close(self) -> None:
        for descriptor in [*self.program_fds.values(), *self.map_fds.values()]:
            try:
                os.close(descriptor)
            except OSError:
                pass
        self.program_fds.clear()
        self.map_fds.clear()


def load_library() -> Any:
    """BCC's library, to read what it compiled (only then: see bpf_calls)."""
    from bcc.libbcc import lib  # noqa: PLC0415  (Debian's module, imported late)

    if not getattr(lib, "_jitprof_declared", False):
        lib.bpf_num_functions.restype = ctypes.c_size_t
        lib.bpf_num_functions.argtypes = [ctypes.c_void_p]
        lib.bpf_function_name.restype = ctypes.c_char_p
        lib.bpf_function_name.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.bpf_num_tables.restype = ctypes.c_size_t
        lib.bpf_num_tables.argtypes = [ctypes.c_void_p]
        lib.bpf_table_name.restype = ctypes.c_char_p
        lib.bpf_table_name.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.bpf_table_fd_id.restype = ctypes.c_int
        lib.bpf_table_fd_id.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        for name in ("bpf_table_key_size_id", "bpf_table_leaf_size_id"):
            getattr(lib, name).restype = ctypes.c_size_t
            getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib._jitprof_declared = True
    return lib


def object_key(source: bytes, cflags: list[str]) -> str:
    """What the compiled object depends on: source, flags, kernel, BCC."""
    kernel = os.uname()
    identity = b"\0".join(
        [
            source,
            "\0".join(cflags).encode(),
            kernel.release.encode(),
            kernel.version.encode(),
            bcc_version().encode(),
            str(FORMAT_VERSION).encode(),
        ]
    )
    return "b-" + hashlib.sha256(identity).hexdigest()[:48]


def bcc_version() -> str:
    """The BCC Python module's version, read from its version.py: importing
    the module would load BCC's library, which a run from the cache never needs."""
    spec = importlib.util.find_spec("bcc")
    if spec is None or not spec.origin:
        return "?"
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return "?"
    found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", text)
    return found.group(1) if found else "?"


def from_bcc_module(module: int) -> BpfObject:
    """The object a BCC module compiled (its maps are created, its programs not loaded)."""
    lib = load_library()
    maps = []
    by_fd: dict[int, str] = {}
    for index in range(lib.bpf_num_tables(module)):
        name = lib.bpf_table_name(module, index).decode()
        maps.append(
            MapSpec(
                name,
                lib.bpf_table_type_id(module, index),
                lib.bpf_table_key_size_id(module, index),
                lib.bpf_table_leaf_size_id(module, index),
                lib.bpf_table_max_entries_id(module, index),
                lib.bpf_table_flags_id(module, index),
            )
        )
        by_fd[lib.bpf_table_fd_id(module, index)] = name
    programs = []
    for index in range(lib.bpf_num_functions(module)):
        name = lib.bpf_function_name(module, index).decode()
        start = lib.bpf_function_start(module, name.encode())
        size = lib.bpf_function_size(module, name.encode())
        if not start or not size:
            continue
        code = bytearray(ctypes.string_at(start, size))
        references = []
        for position in range(0, len(code) - 15, INSTRUCTION.size):
            opcode, registers, _offset, immediate = INSTRUCTION.unpack_from(code, position)
            if opcode == LOAD_IMM64 and registers >> 4 == PSEUDO_MAP_FD:
                if immediate not in by_fd:
                    raise BpfLoadError(f"{name}: instruction {position // 8} names fd {immediate}, which is no map of the module")
                references.append((position // INSTRUCTION.size, by_fd[immediate]))
                struct.pack_into("<i", code, position + 4, 0)
        programs.append(ProgramSpec(name, program_type_of(name), bytes(code), tuple(references)))
    license_text = lib.bpf_module_license(module)
    return BpfObject(
        tuple(maps), tuple(programs), license_text.decode() if license_text else "GPL", lib.bpf_module_kern_version(module)
    )


def program_type_of(name: str) -> int:
    """A program's type, by its name (see the prefixes and suffixes above)."""
    if name.startswith(TRACEPOINT_PREFIX):
        return PROG_TYPE_TRACEPOINT
    if name.startswith(RAW_TRACEPOINT_PREFIX) or name.endswith(RAW_TRACEPOINT_WALKER_SUFFIX):
        return PROG_TYPE_RAW_TRACEPOINT
    if name.startswith(UPROBE_PREFIX) or name.endswith(UPROBE_WALKER_SUFFIX):
        return PROG_TYPE_KPROBE
    return PROG_TYPE_PERF_EVENT


def load(
    spec: BpfObject, later: Callable[[str], bool] = lambda _name: False, maps_created: Callable[[], None] = lambda: None
) -> LoadedObject:
    """Create the maps (then call maps_created) and load every program but
    those later() names (see load_programs); BpfLoadError with the reason.
    BCC's library is not needed for this (bpf_calls)."""
    loaded = LoadedObject({}, {}, {map_spec.name: map_spec for map_spec in spec.maps})
    try:
        for map_spec in spec.maps:
            descriptor = bpf_calls.create_map(
                map_spec.map_type, map_spec.name, map_spec.key_size, map_spec.value_size, map_spec.max_entries, map_spec.flags
            )
            if descriptor < 0:
                raise BpfLoadError(f"cannot create map {map_spec.name}: {os.strerror(-descriptor)}", -descriptor)
            loaded.map_fds[map_spec.name] = descriptor
        maps_created()
        loaded.program_fds.update(
            load_programs(
                spec, loaded.map_fds, slowest_first([program.name for program in spec.programs if not later(program.name)])
            )
        )
    except BaseException:
        loaded.close()
        raise
    return loaded


# Verified in about 0.08-0.2 s each where the rest take milliseconds (loops
# verified pass by pass, and the context reader's many branches).
SLOW_TO_VERIFY = ("walk_jvm_stack", "read_sample_context", "walk_user_stack", "read_async_callers")


def slowest_first(names: list[str]) -> list[str]:
    def rank(name: str) -> int:
        return next((index for index, prefix in enumerate(SLOW_TO_VERIFY) if name.startswith(prefix)), len(SLOW_TO_VERIFY))

    return sorted(names, key=rank)


def load_programs(spec: BpfObject, map_fds: dict[str, int], names: list[str]) -> dict[str, int]:
    """The named programs of spec loaded (their descriptors, by name), or
    BpfLoadError with the reason, none of them left open."""
    # In the order given: the slowest to verify first, so that the last to
    # finish is not one that began last.
    by_name = {program.name: program for program in spec.programs}
    programs = [by_name[name] for name in names if name in by_name]
    results = _load_side_by_side(spec, programs, map_fds)
    loaded = {program.name: descriptor for program, descriptor in zip(programs, results, strict=True) if descriptor >= 0}
    for program, descriptor in zip(programs, results, strict=True):
        if descriptor < 0:
            for opened in loaded.values():
                os.close(opened)
            if descriptor == -errno.EAGAIN:  # its log would be interrupted too
                raise BpfLoadError(
                    f"loading BPF program {program.name} was interrupted by signals, {LOAD_RETRIES + 1} times", errno.EAGAIN
                )
            raise BpfLoadError(
                f"failed to load BPF program {program.name}: {_verifier_reason(spec, program, map_fds)}", -descriptor
            )
    return loaded


def _load_side_by_side(spec: BpfObject, programs: list[ProgramSpec], map_fds: dict[str, int]) -> list[int]:
    """Each program's descriptor (or -errno), loaded on up to LOAD_THREADS
    threads, taken in order. The verifier works in the loading thread's
    system call, without the GIL: programs verified side by side take the
    longest one's time. (Plain threads: concurrent.futures and the logging
    it imports were 15 ms of every start's imports.)"""
    results = [-errno.ECANCELED] * len(programs)
    waiting = list(reversed(range(len(programs))))
    failures: list[BaseException] = []
    lock = threading.Lock()

    def load_waiting() -> None:
        while True:
            with lock:
                if not waiting or failures:
                    return
                index = waiting.pop()
            try:
                results[index] = _load_one(spec, programs[index], map_fds)
            except BaseException as error:  # raised again on the caller's thread
                with lock:
                    failures.append(error)
                return

    threads = [
        threading.Thread(target=load_waiting, name="jitprof-verifier", daemon=True)
        for _ in range(min(len(programs), LOAD_THREADS))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        for descriptor in results:
            if descriptor >= 0:
                os.close(descriptor)
        raise failures[0]
    return results


def _program_code(program: ProgramSpec, map_fds: dict[str, int]) -> ctypes.Array[ctypes.c_char]:
    code = bytearray(program.instructions)
    for index, map_name in program.map_references:
        struct.pack_into("<i", code, index * INSTRUCTION.size + 4, map_fds[map_name])
    return ctypes.create_string_buffer(bytes(code), len(code))


def _load_one(spec: BpfObject, program: ProgramSpec, map_fds: dict[str, int]) -> int:
    buffer = _program_code(program, map_fds)
    descriptor = _load_program(spec, program, buffer)
    for _attempt in range(LOAD_RETRIES):
        # The verifier gives up with EAGAIN when a signal arrives (a
        # child's exit, a resized terminal, a debugger): libbpf retries too.
        if descriptor != -errno.EAGAIN:
            break
        descriptor = _load_program(spec, program, buffer)
    return descriptor


def _verifier_reason(spec: BpfObject, program: ProgramSpec, map_fds: dict[str, int]) -> str:
    """The program loaded again, for the verifier's last words."""
    log = ctypes.create_string_buffer(1 << 20)
    _load_program(spec, program, _program_code(program, map_fds), log)
    return (log.value.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no verifier log"])[0]


def _load_program(
    spec: BpfObject, program: ProgramSpec, code: ctypes.Array[ctypes.c_char], log: ctypes.Array[ctypes.c_char] | None = None
) -> int:
    """One program into the kernel: its descriptor, or -errno; with log, the
    verifier's words land there."""
    return bpf_calls.load_program(program.program_type, program.name, code, spec.license, spec.kernel_version, log)


# The cache ---------------------------------------------------------------


def store(key: str, spec: BpfObject) -> None:
    path = cache.entry_path("bpf", key, ".json")
    if path is not None:
        cache.write_entry(path, [_document(spec)])


def _document(spec: BpfObject) -> bytes:
    document = {
        "format": FORMAT_VERSION,
        "license": spec.license,
        "kernel_version": spec.kernel_version,
        "maps": [vars(map_spec) for map_spec in spec.maps],
        "programs": [
            {
                "name": program.name,
                "program_type": program.program_type,
                "instructions": base64.b64encode(program.instructions).decode(),
                "map_references": [list(reference) for reference in program.map_references],
            }
            for program in spec.programs
        ],
    }
    return json.dumps(document).encode()


def load_cached(key: str) -> BpfObject | None:
    """The object compiled before for this key (by an earlier run, or by
    set-up into the install), or None. It goes into the kernel, so anything
    but exactly what store() writes is refused."""
    for path in (cache.entry_path("bpf", key, ".json"), installed_path(key)):
        data = cache.read_entry(path) if path is not None else None
        parsed = _parse(data) if data is not None and len(data) <= MAX_OBJECT_BYTES else None
        if parsed is not None:
            return parsed
    return None


def installed_path(key: str) -> Path | None:
    """Where set-up keeps objects beside the install; used as root only if
    nobody but root can change that directory."""
    if not cache.valid_key(key):
        return None
    if os.geteuid() == 0 and not root_only(INSTALLED_DIR):
        return None
    return INSTALLED_DIR / f"{key}.json"


def store_installed(key: str, spec: BpfObject) -> None:
    path = installed_path(key)
    if path is not None:
        cache.write_entry(path, [_document(spec)])


def make_installed_dir() -> None:
    try:
        INSTALLED_DIR.mkdir(parents=True, exist_ok=True, mode=0o755)
    except OSError:
        pass


def _parse(data: bytes) -> BpfObject | None:
    try:
        document = json.loads(data)
        if document["format"] != FORMAT_VERSION:
            return None
        maps = tuple(
            MapSpec(
                str(item["name"]),
                int(item["map_type"]),
                int(item["key_size"]),
                int(item["value_size"]),
                int(item["max_entries"]),
                int(item["flags"]),
            )
            for item in document["maps"]
        )
        names = {map_spec.name for map_spec in maps}
        programs = []
        for item in document["programs"]:
            code = base64.b64decode(item["instructions"], validate=True)
            references = tuple((int(index), str(name)) for index, name in item["map_references"])
            if len(code) % INSTRUCTION.size or any(
                name not in names or not 0 <= index < len(code) // INSTRUCTION.size - 1 for index, name in references
            ):
                return None
            programs.append(ProgramSpec(str(item["name"]), int(item["program_type"]), code, references))
        return BpfObject(maps, tuple(programs), str(document["license"]), int(document["kernel_version"]))
    except (ValueError, KeyError, TypeError):
        return None


def cache_path_for(key: str) -> Path | None:
    return cache.entry_path("bpf", key, ".json")
