"""Where jitprof takes new executable memory from the mmap and mprotect
system calls' tracepoints (the kernel's mapping records cannot be had),
the BPF program covers it with one provisional trie
block (cover_new_exec_range), and user space removes it by computing the
same block (kernel/trie.covering_prefix): on the real kernel, for ranges
aligned and not, the two must be the same block, or stale blocks stay."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from profiler.kernel.bpf_program import BpfProgram, LoadOptions
from profiler.kernel.trie import covering_prefix

MAPPING_PROVISIONAL = 4  # bpf/jitprof_abi.h

# (offset from a 1 GiB-aligned base, length): inside one page, across a
# 64 KiB boundary, across a 1 MiB one, a large aligned block.
CASES = [(0x3000, 0x1000), (0xF000, 0x2000), (0xFF000, 0x3000), (0x4000000, 0x400000), (0x123000, 0x1D000)]

CHILD = """
    import ctypes, mmap, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    MAP_FIXED_NOREPLACE = 0x100000
    print("ready", flush=True)
    for line in sys.stdin:
        address, length = (int(part, 16) for part in line.split())
        got = libc.mmap(address, length, mmap.PROT_READ | mmap.PROT_EXEC,
                        mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0)
        print(hex(got or 0), flush=True)
"""


def test_the_kernels_provisional_block_is_the_one_user_space_removes():
    # Where the kernel's mapping records cannot be had, the system calls' tracepoints cover new code.
    program = BpfProgram(LoadOptions(99, False, True, mapping_records=False))
    assert "syscalls:sys_exit_mmap" in program.tracepoints
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        program.maps.follow(child.pid)
        assert child.stdout.readline().strip() == "ready"
        base = 0x7E0000000000
        for offset, length in CASES:
            program.maps.begin_maps_read(child.pid)  # no event outstanding: the next range is covered at once
            time.sleep(0.002)
            child.stdin.write(f"{base + offset:x} {length:x}\n")
            child.stdin.flush()
            assert int(child.stdout.readline(), 16) == base + offset, "the address was taken"
            provisional = [
                prefix for prefix, kind in program.maps.trie_entries() if kind == MAPPING_PROVISIONAL and prefix.pid == child.pid
            ]
            expected = covering_prefix(child.pid, base + offset, length)
            assert provisional and expected in provisional, (hex(offset), provisional, expected)
            program.maps.remove_prefixes([expected])  # as user space does once the maps are read
            left = [
                prefix
                for prefix, kind in program.maps.trie_entries()
                if kind == MAPPING_PROVISIONAL
                and prefix.pid == child.pid
                and prefix.address <= base + offset < prefix.address + prefix.block_size
            ]
            assert left == [], left
    finally:
        child.kill()
        child.wait()
        program.close()
