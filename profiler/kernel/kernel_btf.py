"""Where fields are in the running kernel's structs, from its BTF
(/sys/kernel/btf/vmlinux), for the few the BPF program reads by hand: BCC
compiles against whatever headers set-up found, which may be another
version's (a Debian 6.1 package under a 6.18 kernel), so their offsets are
not the running kernel's. Read once per kernel, and kept in the cache."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import struct

from profiler.errors import JitprofError
from profiler.native import cache

VMLINUX_BTF = "/sys/kernel/btf/vmlinux"
MAX_BTF_BYTES = 64 << 20
BTF_MAGIC = 0xEB9F
HEADER = struct.Struct("<HBBIIIII")  # magic, version, flags, hdr_len, type_off, type_len, str_off, str_len
TYPE = struct.Struct("<III")  # name_off, info, size or type
MEMBER = struct.Struct("<III")  # name_off, type, offset (bits; with kind_flag, bit field size in the top 8)
KIND_STRUCT, KIND_UNION = 4, 5
# Bytes that follow a type's 12, by kind: fixed, or per vlen entry.
_FIXED = {1: 4, 3: 12, 14: 4, 17: 4}
_PER_ENTRY = {4: 12, 5: 12, 6: 8, 13: 8, 15: 12, 19: 12}


class BtfError(Exception):
    pass


# Every field the BPF program reads by hand, read together: one parse of the
# BTF (about 0.15 s) a run, or a kernel where the cache is kept.
MAX_FIELDS_BYTES = 4096  # a cached entry of KERNEL_FIELDS' offsets
KERNEL_FIELDS = {"task_struct": ["pid", "flags", "thread", "rseq"], "thread_struct": ["fsbase"]}


def member_offsets(wanted: dict[str, list[str]]) -> dict[str, int]:
    """{"task_struct.pid": byte offset, ...} for wanted {"task_struct": ["pid", ...]}
    (fields of KERNEL_FIELDS); BtfError if the kernel has no BTF or lacks one of them."""
    found = _kernel_fields()
    missing = [f"{name}.{member}" for name, members in wanted.items() for member in members if f"{name}.{member}" not in found]
    if missing:
        raise BtfError(f"the kernel's BTF has no {', '.join(missing)}")
    return {f"{name}.{member}": found[f"{name}.{member}"] for name, members in wanted.items() for member in members}


@functools.cache
def _kernel_fields() -> dict[str, int]:
    """The fields of KERNEL_FIELDS the running kernel has (those it lacks absent)."""
    kernel = os.uname()
    identity = "\0".join([kernel.release, kernel.version, json.dumps(KERNEL_FIELDS, sort_keys=True)])
    key = "k-" + hashlib.sha256(identity.encode()).hexdigest()[:48]
    kept = cache.read_json("btf", key, MAX_FIELDS_BYTES)
    if isinstance(kept, dict) and all(isinstance(value, int) for value in kept.values()):
        return kept
    found = _read(KERNEL_FIELDS, partial=True)
    cache.write_json("btf", key, found)
    return found


def _read(wanted: dict[str, list[str]], partial: bool = False) -> dict[str, int]:
    """The wanted fields' offsets; BtfError if one is missing (partial: left out)."""
    try:
        with open(VMLINUX_BTF, "rb") as stream:
            data = stream.read(MAX_BTF_BYTES + 1)
    except OSError as error:
        raise BtfError(f"cannot read {VMLINUX_BTF}: {error.strerror}") from error
    if len(data) > MAX_BTF_BYTES or len(data) < HEADER.size:
        raise BtfError(f"{VMLINUX_BTF} is not a BTF file this reads")
    magic, _version, _flags, header_length, type_offset, type_length, string_offset, string_length = HEADER.unpack_from(data)
    if magic != BTF_MAGIC:
        raise BtfError(f"{VMLINUX_BTF} is not BTF (or not this byte order)")
    types_start = header_length + type_offset
    types_end = types_start + type_length
    strings = data[header_length + string_offset : header_length + string_offset + string_length]
    if types_end > len(data) or header_length + string_offset + string_length > len(data):
        raise BtfError(f"{VMLINUX_BTF} is truncated")

    def name_at(offset: int) -> bytes:
        end = strings.find(b"\0", offset)
        return strings[offset:end] if end >= 0 else b""

    # Every type by id (1-based): (kind, name offset, where its members start, vlen, kind_flag).
    types: list[tuple[int, int, int, int, int]] = [(0, 0, 0, 0, 0)]
    position = types_start
    while position + TYPE.size <= types_end:
        name_offset, info, _size = TYPE.unpack_from(data, position)
        kind, vlen, kind_flag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
        types.append((kind, name_offset, position + TYPE.size, vlen, kind_flag))
        position += TYPE.size + _FIXED.get(kind, 0) + _PER_ENTRY.get(kind, 0) * vlen
    found: dict[str, int] = {}
    for kind, name_offset, members, vlen, kind_flag in types:
        if kind != KIND_STRUCT:
            continue
        struct_name = name_at(name_offset).decode("ascii", "replace")
        if struct_name not in wanted or any(key.startswith(struct_name + ".") for key in found):
            continue
        for member in wanted[struct_name]:
            bits = _member_bits(data, types, name_at, members, vlen, kind_flag, member.encode(), 0)
            if bits is not None:
                found[f"{struct_name}.{member}"] = bits // 8
    missing = [f"{name}.{member}" for name, members in wanted.items() for member in members if f"{name}.{member}" not in found]
    if missing and not partial:
        raise BtfError(f"the kernel's BTF has no {', '.join(missing)}")
    return found


def _member_bits(data, types, name_at, members: int, vlen: int, kind_flag: int, member: bytes, depth: int) -> int | None:  # noqa: ANN001
    """A member's offset in bits, looking into anonymous structs and unions."""
    if depth > 8:
        return None
    for index in range(vlen):
        name_offset, type_id, offset = MEMBER.unpack_from(data, members + index * MEMBER.size)
        bits = offset & 0xFFFFFF if kind_flag else offset
        if name_at(name_offset) == member:
            return bits
        if name_offset == 0 and 0 < type_id < len(types):
            inner_kind, _name, inner_members, inner_vlen, inner_flag = types[type_id]
            if inner_kind in (KIND_STRUCT, KIND_UNION):
                inner = _member_bits(data, types, name_at, inner_members, inner_vlen, inner_flag, member, depth + 1)
                if inner is not None:
                    return bits + inner
    return None


def task_offsets() -> tuple[int, int]:
    """(pid, flags) offsets in the running kernel's task_struct, for --off-cpu."""
    try:
        found = member_offsets({"task_struct": ["pid", "flags"]})
    except BtfError as error:
        raise JitprofError(
            f"--off-cpu cannot find where the kernel keeps a thread's id ({error})",
            "it needs a kernel built with CONFIG_DEBUG_INFO_BTF (/sys/kernel/btf/vmlinux)",
        ) from error
    return found["task_struct.pid"], found["task_struct.flags"]


def thread_pointer_offset() -> int | None:
    """Where the running kernel's task_struct keeps the thread's thread
    pointer (x86-64: thread.fsbase, its TLS base), or None: not known."""
    try:
        found = member_offsets({"task_struct": ["thread"], "thread_struct": ["fsbase"]})
    except BtfError:
        return None
    return found["task_struct.thread"] + found["thread_struct.fsbase"]


def task_rseq_offset() -> int | None:
    """Where the running kernel's task_struct keeps the thread's rseq area
    (a pointer, or a struct that begins with it), or None: no rseq."""
    try:
        return member_offsets({"task_struct": ["rseq"]})["task_struct.rseq"]
    except BtfError:
        return None
