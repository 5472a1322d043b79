"""What a running jitprof holds in the kernel, read from outside it.

`python -m benchmarks.bpf_state PID` prints the followed processes, trie
entries, live unwind tables and unwind rows in use of the jitprof process PID:
its BPF maps are found from its descriptors (/proc/PID/fdinfo) and read with
the bpf() system call, so the figures do not depend on jitprof's own
bookkeeping. Root only.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from dataclasses import dataclass

SYS_BPF = 321  # x86-64
BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_GET_NEXT_KEY = 4
BPF_MAP_GET_FD_BY_ID = 14
BPF_OBJ_GET_INFO_BY_FD = 15

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


@dataclass(frozen=True)
class MapInfo:
    map_id: int
    name: str
    key_size: int
    value_size: int
    max_entries: int


@dataclass(frozen=True)
class KernelState:
    followed: int
    trie_entries: int
    unwind_tables: int
    unwind_rows: int


def _bpf(command: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    result = _libc.syscall(SYS_BPF, command, attr, len(attr))
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    return int(result)


def map_ids_of(pid: int) -> set[int]:
    ids: set[int] = set()
    fdinfo = f"/proc/{pid}/fdinfo"
    for entry in os.listdir(fdinfo):
        try:
            with open(f"{fdinfo}/{entry}") as stream:
                for line in stream:
                    if line.startswith("map_id:"):
                        ids.add(int(line.split()[1]))
        except OSError:
            continue  # closed meanwhile
    return ids


def open_map(map_id: int) -> tuple[int, MapInfo]:
    attr = ctypes.create_string_buffer(struct.pack("=I", map_id), 16)
    fd = _bpf(BPF_MAP_GET_FD_BY_ID, attr)
    info = ctypes.create_string_buffer(88)
    request = ctypes.create_string_buffer(struct.pack("=IIQ", fd, len(info), ctypes.addressof(info)), 16)
    _bpf(BPF_OBJ_GET_INFO_BY_FD, request)
    _type, map_id_read, key_size, value_size, max_entries, _flags = struct.unpack_from("=IIIIII", info.raw)
    name = info.raw[24:40].split(b"\0", 1)[0].decode()
    return fd, MapInfo(map_id_read, name, key_size, value_size, max_entries)


def keys_of(fd: int, key_size: int) -> list[bytes]:
    keys: list[bytes] = []
    current: bytes | None = None
    while True:
        next_key = ctypes.create_string_buffer(key_size)
        key_buffer = ctypes.create_string_buffer(current, key_size) if current is not None else None
        attr = ctypes.create_string_buffer(
            struct.pack(
                "=IIQQ", fd, 0, ctypes.addressof(key_buffer) if key_buffer is not None else 0, ctypes.addressof(next_key)
            ),
            32,
        )
        try:
            _bpf(BPF_MAP_GET_NEXT_KEY, attr)
        except OSError:
            return keys  # ENOENT: the end
        current = next_key.raw
        keys.append(current)


def lookup(fd: int, key: bytes, value_size: int) -> bytes:
    key_buffer = ctypes.create_string_buffer(key, len(key))
    value = ctypes.create_string_buffer(value_size)
    attr = ctypes.create_string_buffer(struct.pack("=IIQQQ", fd, 0, ctypes.addressof(key_buffer), ctypes.addressof(value), 0), 32)
    _bpf(BPF_MAP_LOOKUP_ELEM, attr)
    return value.raw


def kernel_state(pid: int) -> KernelState:
    followed = trie_entries = tables = rows = 0
    for map_id in map_ids_of(pid):
        try:
            fd, info = open_map(map_id)
        except OSError:
            continue
        try:
            if info.name == "followed":
                followed = len(keys_of(fd, info.key_size))
            elif info.name == "mappings":
                trie_entries = len(keys_of(fd, info.key_size))
            elif info.name == "unwind_tables":
                for index in range(info.max_entries):
                    _first_row, row_count = struct.unpack("=II", lookup(fd, struct.pack("=I", index), info.value_size)[:8])
                    if row_count not in (0, 0xFFFFFFFF):
                        tables += 1
                        rows += row_count
        finally:
            os.close(fd)
    return KernelState(followed, trie_entries, tables, rows)


def main() -> int:
    state = kernel_state(int(sys.argv[1]))
    print(state.followed, state.trie_entries, state.unwind_tables, state.unwind_rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
