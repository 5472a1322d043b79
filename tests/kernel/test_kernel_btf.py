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


def test_the_btf_is_parsed_once_a_run_for_every_field(tmp_path, monkeypatch):
    """The thread pointer, the task's pid and flags, and rseq: one parse of
    the BTF (0.15 s each), even where no cache is kept; a field the kernel
    lacks is None or an error, the others still found."""
    path = tmp_path / "vmlinux"
    path.write_bytes(btf_blob())
    monkeypatch.setattr(kernel_btf, "VMLINUX_BTF", str(path))
    monkeypatch.setattr(kernel_btf.cache, "entry_path", lambda *_args: None)
    kernel_btf._kernel_fields.cache_clear()
    parses: list[int] = []
    real_read = kernel_btf._read
    monkeypatch.setattr(kernel_btf, "_read", lambda wanted, partial=False: parses.append(1) or real_read(wanted, partial))
    try:
        assert kernel_btf.task_offsets() == (12, 16)
        assert kernel_btf.thread_pointer_offset() is None  # this task_struct has no thread
        assert kernel_btf.task_rseq_offset() is None
        assert len(parses) == 1
    finally:
        kernel_btf._kernel_fields.cache_clear()


def test_the_running_kernel_s_offsets_are_kept_in_the_cache(tmp_path, monkeypatch):
    """Read once a kernel: the next run reads them from the cache, no parse
    (its key was once refused as not the cache's, and every run parsed)."""
    cache_directory = tmp_path / "cache"
    cache_directory.mkdir(mode=0o700)
    monkeypatch.setattr(kernel_btf.cache, "cache_dir", lambda: cache_directory)
    path = tmp_path / "vmlinux"
    path.write_bytes(btf_blob())
    monkeypatch.setattr(kernel_btf, "VMLINUX_BTF", str(path))
    kernel_btf._kernel_fields.cache_clear()
    try:
        assert kernel_btf.task_offsets() == (12, 16)
        assert list((cache_directory / "btf").iterdir())
        kernel_btf._kernel_fields.cache_clear()
        monkeypatch.setattr(kernel_btf, "_read", lambda *_args, **_kwargs: pytest.fail("parsed again"))
        assert kernel_btf.task_offsets() == (12, 16)
    finally:
        kernel_btf._kernel_fields.cache_clear()
