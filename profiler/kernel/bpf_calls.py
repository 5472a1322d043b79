"""The kernel calls of a loaded sampler, made by native/bpf_calls.c: maps,
programs, perf events, tracepoints and the ring buffer's consumer.

BCC's library is only loaded to compile the sampler (bpf_program.py); a run
that finds the compiled object kept never maps its LLVM and clang (about
100 MiB for as long as the run lasts). Keys and values are ctypes objects,
passed by reference (ctypes.byref) or as arrays.
"""

from __future__ import annotations

import ctypes
import errno
import os
from typing import Any

from profiler.kernel.preflight import TRACEFS
from profiler.native import library
from profiler.native.ring_batch import RingBatch

PERF_TYPE_TRACEPOINT = 2

_library: ctypes.CDLL | None = None


def _native() -> ctypes.CDLL:
    """The native library through ctypes: the callers' keys and values are ctypes objects."""
    global _library
    if _library is None:
        library.check_built()  # or an error with the fix
        loaded = ctypes.CDLL(str(library.LIBRARY_PATH))
        pointer, integer, unsigned = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32
        signatures: dict[str, list[Any]] = {
            "jp_bpf_map_create": [unsigned, ctypes.c_char_p, unsigned, unsigned, unsigned, unsigned],
            "jp_bpf_prog_load": [
                unsigned,
                ctypes.c_char_p,
                pointer,
                ctypes.c_uint64,
                ctypes.c_char_p,
                unsigned,
                unsigned,
                pointer,
                unsigned,
            ],
            "jp_bpf_map_lookup": [integer, pointer, pointer],
            "jp_bpf_map_update": [integer, pointer, pointer, ctypes.c_uint64],
            "jp_bpf_map_delete": [integer, pointer],
            "jp_bpf_map_next_key": [integer, pointer, pointer],
            "jp_perf_event_attach": [integer, unsigned, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, integer, integer],
            "jp_perf_event_attach_uprobe": [integer, unsigned, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_uint64, integer],
            "jp_bpf_raw_tracepoint_open": [ctypes.c_char_p, integer],
        }
        for name, arguments in signatures.items():
            function = getattr(loaded, name)
            function.argtypes = arguments
            function.restype = ctypes.c_int
        _library = loaded
    return _library


def create_map(map_type: int, name: str, key_size: int, value_size: int, max_entries: int, flags: int) -> int:
    """A new map's descriptor, or -errno."""
    return int(_native().jp_bpf_map_create(map_type, name.encode(), key_size, value_size, max_entries, flags))


def load_program(
    program_type: int,
    name: str,
    code: ctypes.Array[ctypes.c_char],
    license_name: str,
    kernel_version: int,
    log: ctypes.Array[ctypes.c_char] | None = None,
    log_level: int = 1,
) -> int:
    """A loaded program's descriptor, or -errno; with log, the verifier's
    words land there (log_level 4: its statistics only)."""
    return int(
        _native().jp_bpf_prog_load(
            program_type,
            name.encode(),
            code,
            len(code),
            license_name.encode(),
            kernel_version,
            log_level if log is not None else 0,
            log,
            len(log) if log is not None else 0,
        )
    )


def lookup(map_fd: int, key: Any, value: Any) -> bool:
    return int(_native().jp_bpf_map_lookup(map_fd, key, value)) == 0


def update(map_fd: int, key: Any, value: Any, flags: int = 0) -> bool:
    return int(_native().jp_bpf_map_update(map_fd, key, value, flags)) == 0


def delete(map_fd: int, key: Any) -> bool:
    return int(_native().jp_bpf_map_delete(map_fd, key)) == 0


def next_key(map_fd: int, key: Any, found: Any) -> bool:
    """The key after key (None: the first) into found; False at the end."""
    return int(_native().jp_bpf_map_next_key(map_fd, key, found)) == 0


def attach_perf_event(program_fd: int, event_type: int, config: int, frequency_hz: int, cpu: int) -> int:
    """A sampling perf event on one CPU (every process) running the program: its descriptor, or -errno."""
    return int(_native().jp_perf_event_attach(program_fd, event_type, config, 0, frequency_hz, -1, cpu))


def attach_tracepoint(program_fd: int, category: str, event: str) -> int:
    """The program on a tracepoint (every process, every CPU): the perf
    event's descriptor, or -errno. (preflight has tracefs mounted.)"""
    try:
        identifier = int((TRACEFS / "events" / category / event / "id").read_text())
    except (OSError, ValueError):
        return -errno.ENOENT  # no such tracepoint
    return int(_native().jp_perf_event_attach(program_fd, PERF_TYPE_TRACEPOINT, identifier, 1, 0, -1, 0))


def attach_raw_tracepoint(program_fd: int, name: str) -> int:
    """The program on a raw tracepoint (sched_switch, sys_exit): the link's descriptor, or -errno."""
    return int(_native().jp_bpf_raw_tracepoint_open(name.encode(), program_fd))


UPROBE_PMU = "/sys/bus/event_source/devices/uprobe"


def attach_uprobe(program_fd: int, path: str, offset: int, pid: int) -> int:
    """The program on a uprobe at the file offset of path, for process pid
    alone (its threads): the perf event's descriptor, or -errno."""
    try:
        pmu_type = int(open(f"{UPROBE_PMU}/type", encoding="ascii").read())
    except (OSError, ValueError):
        return -errno.ENOENT  # no uprobe PMU: CONFIG_UPROBE_EVENTS is off
    return int(_native().jp_perf_event_attach_uprobe(program_fd, pmu_type, 0, os.fsencode(path), offset, pid))


class Ring:
    """The consumer of the sampler's ring buffer map."""

    def __init__(self, map_fd: int, data_bytes: int) -> None:
        self._ffi, self._lib = library.load()
        opened = self._ffi.new("struct jp_ring **")
        result = self._lib.jp_ring_open(map_fd, data_bytes, opened)
        if result < 0:
            raise OSError(-result, os.strerror(-result))
        self._ring: Any = opened[0]

    def poll(self, timeout_ms: int, batch: RingBatch) -> int:
        """Wait up to timeout_ms for a wakeup, then take records into the batch."""
        return int(self._lib.jp_ring_poll(self._ring, timeout_ms, batch.pointer))

    def consume(self, batch: RingBatch) -> int:
        return int(self._lib.jp_ring_consume(self._ring, batch.pointer))

    def watch(self, descriptor: int) -> int:
        """The next readiness of descriptor (once) ends poll's wait too: 0, or -errno."""
        return int(self._lib.jp_ring_watch(self._ring, descriptor))

    def close(self) -> None:
        if self._ring is not None:
            self._lib.jp_ring_close(self._ring)
            self._ring = None
