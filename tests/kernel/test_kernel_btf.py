"""Offsets of kernel struct fields from BTF: a crafted file, and the running kernel's."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from profiler.kernel import kernel_btf


def btf_blob() -> bytes:
    """task_struct { u32 state; union { u64 a; struct { u32 b; int pid; }; }; u32 flags; } as BTF."""
    strings = b"\0task_struct\0state\0pid\0flags\0int\0a\0b\0"

    def name(text: bytes) -> int:
        return strings.index(b"\0" + text + b"\0") + 1

    types = b""
    types += struct.pack("<III", name(b"int"), 1 << 24, 4) + struct.pack("<I", 32)  # 1: int
    types += struct.pack("<III", 0, (4 << 24) | 2, 8)  # 2: anonymous struct { b; pid }
    types += struct.pack("<III", name(b"b"), 1, 0) + struct.pack("<III", name(b"pid"), 1, 32)
    types += struct.pack("<III", 0, (5 << 24) | 2, 8)  # 3: anonymous union { a; struct }
    types += struct.pack("<III", name(b"a"), 1, 0) + struct.pack("<III", 0, 2, 0)
    types += struct.pack("<III", name(b"task_struct"), (4 << 24) | 3, 24)  # 4
    types += struct.pack("<III", name(b"state"), 1, 0)
    types += struct.pack("<III", 0, 3, 64)
    types += struct.pack("<III", name(b"flags"), 1, 128)
    header = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(strings))
    return header + types + strings


def test_members_are_found_inside_anonymous_unions_and_structs(tmp_path, monkeypatch):
    path = tmp_path / "vmlinux"
    path.write_bytes(btf_blob())
    monkeypatch.setattr(kernel_btf, "VMLINUX_BTF", str(path))
    assert kernel_btf._read({"task_struct": ["pid", "flags", "state"]}) == {
        "task_struct.pid": 12,
        "task_struct.flags": 16,
        "task_struct.state": 0,
    }
    with pytest.raises(kernel_btf.BtfError, match="no task_struct.comm"):
        kernel_btf._read({"task_struct": ["comm"]})


def test_a_file_that_is_not_btf_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "vmlinux"
    path.write_bytes(b"\x7fELF" + bytes(60))
    monkeypatch.setattr(kernel_btf, "VMLINUX_BTF", str(path))
    with pytest.raises(kernel_btf.BtfError, match="not BTF"):
        kernel_btf._read({"task_struct": ["pid"]})
    truncated = btf_blob()[:40]
    path.write_bytes(truncated)
    with pytest.raises(kernel_btf.BtfError, match="truncated"):
        kernel_btf._read({"task_struct": ["pid"]})


@pytest.mark.skipif(not Path(kernel_btf.VMLINUX_BTF).exists(), reason="the kernel has no BTF")
def test_the_running_kernels_task_struct():
    found = kernel_btf._read({"task_struct": ["pid", "tgid", "flags"]})
    assert found["task_struct.tgid"] == found["task_struct.pid"] + 4  # pid_t pid; pid_t tgid;
    assert 0 < found["task_struct.flags"] < found["task_struct.pid"]
