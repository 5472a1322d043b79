"""New executable memory from the kernel's own mapping records, in place of
the mmap and mprotect system calls' tracepoints (which would send every
system call of every process through the kernel's slow path): on the real
kernel, an executable mmap and an mprotect that makes memory executable
are told with their exact ranges, other processes' are told too (the
caller keeps the followed), a mapping that is not executable is not, and
no system call's tracepoint is attached."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from profiler.kernel.bpf_program import BpfProgram, LoadOptions
from profiler.kernel.event_stream import MAPPING_WAKEUP_GAP_S
from profiler.kernel.events import EventType, ProcessEvent

CHILD = """
    import ctypes, mmap, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    anonymous = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    print("ready", flush=True)
    for line in sys.stdin:
        kind = line.strip()
        if kind == "exec":
            got = libc.mmap(None, 0x5000, mmap.PROT_READ | mmap.PROT_EXEC, anonymous, -1, 0)
            print(hex(got), hex(0x5000), flush=True)
        elif kind == "data":
            got = libc.mmap(None, 0x3000, mmap.PROT_READ | mmap.PROT_WRITE, anonymous, -1, 0)
            print(hex(got), hex(0x3000), flush=True)
        elif kind == "mprotect":
            got = libc.mmap(None, 0x8000, mmap.PROT_READ | mmap.PROT_WRITE, anonymous, -1, 0)
            assert libc.mprotect(got + 0x2000, 0x3000, mmap.PROT_READ | mmap.PROT_EXEC) == 0
            print(hex(got + 0x2000), hex(0x3000), flush=True)
"""


def test_executable_mappings_come_from_the_kernels_records_not_the_system_calls():
    program = BpfProgram(LoadOptions(99, False, True))
    told: list[ProcessEvent] = []
    program.events.on_event(lambda event: told.append(event) if isinstance(event, ProcessEvent) else None)
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert program.mapping_records is not None
        assert not [name for name in program.tracepoints if name.startswith("syscalls:")], program.tracepoints
        assert child.stdout.readline().strip() == "ready"
        expected = {}
        for kind in ("data", "exec", "mprotect"):
            child.stdin.write(kind + "\n")
            child.stdin.flush()
            address, length = (int(part, 16) for part in child.stdout.readline().split())
            expected[kind] = (address, length)
        # The poll is woken by the first record: no fixed wait.
        deadline = time.monotonic() + 10
        ranges: set[tuple[int, int]] = set()
        while not {expected["exec"], expected["mprotect"]} <= ranges and time.monotonic() < deadline:
            program.events.poll(1000)
            ranges = {
                (event.address, event.length)
                for event in told
                if event.event_type is EventType.EXEC_MAPPED and event.pid == child.pid
            }
        assert expected["exec"] in ranges and expected["mprotect"] in ranges, (expected, ranges)
        assert expected["data"] not in ranges  # not executable: no record
        assert all(
            event.tid == child.pid for event in told if event.event_type is EventType.EXEC_MAPPED and event.pid == child.pid
        )
    finally:
        child.kill()
        child.wait()
        program.close()


def polls_until_mapped(program: BpfProgram, child: subprocess.Popen, told: list[ProcessEvent]) -> float:
    """The child maps executable memory: seconds until polls of 30 s have told it (5 at most)."""
    child.stdin.write("exec\n")
    child.stdin.flush()
    address = int(child.stdout.readline().split()[0], 16)
    started = time.monotonic()
    while time.monotonic() - started < 5:
        program.events.poll(30_000)
        if any(event.event_type is EventType.EXEC_MAPPED and event.address == address for event in told):
            break
    return time.monotonic() - started


def test_a_quiet_poll_is_woken_by_a_new_mapping():
    """The poll waits up to its timeout for the sampler's records; a mapping
    record ends the wait (once, until the reader arms it again)."""
    program = BpfProgram(LoadOptions(99, False, True))
    told: list[ProcessEvent] = []
    program.events.on_event(lambda event: told.append(event) if isinstance(event, ProcessEvent) else None)
    program.events.poll(0)  # arms the records' wakeups
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        while program.events.poll(0):
            pass
        told.clear()
        time.sleep(2 * MAPPING_WAKEUP_GAP_S)  # armed again at the next poll
        program.events.poll(0)
        assert polls_until_mapped(program, child, told) < 5, "the poll slept through the record"
        # Woken once, the records wake it no more for a while; a mapping made
        # meanwhile is read within that while, not at the poll's timeout.
        assert polls_until_mapped(program, child, told) < 5, "a mapping made after a wakeup waited for the poll's timeout"
    finally:
        child.kill()
        child.wait()
        program.close()
