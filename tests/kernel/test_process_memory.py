"""Reading a process's memory, this test's own, through /proc/PID/mem."""

import ctypes
import mmap
import os

from profiler.kernel.process_memory import BLOCK_BYTES, MemoryThread, ProcessMemory


def buffer_with_a_pattern() -> tuple[ctypes.Array, int, bytes]:
    pattern = bytes(range(256)) * 16
    buffer = ctypes.create_string_buffer(pattern, len(pattern))
    return buffer, ctypes.addressof(buffer), pattern


def test_batched_reads_give_what_single_reads_give_in_fewer_reads():
    buffer, address, pattern = buffer_with_a_pattern()
    memory = ProcessMemory(os.getpid())
    try:
        # Some inside a block, some across two, some whole blocks.
        asks = [(address + offset, length) for offset in (0, 5, 500, 1020, 2047) for length in (1, 8, 24, 100, BLOCK_BYTES)]
        single = [memory.read(at, length) for at, length in asks]
        reads_before = memory.reads
        with memory.batched():
            batched = [memory.read(at, length) for at, length in asks]
        assert batched == single == [pattern[at - address : at - address + length] for at, length in asks]
        # The blocks the asks touch (at most 6 of 512 in these 2,148 bytes), each read once.
        assert memory.reads - reads_before <= 6
    finally:
        memory.close()
    del buffer


def test_a_batched_operation_sees_each_place_as_it_first_read_it_and_the_next_anew():
    buffer, address, _pattern = buffer_with_a_pattern()
    memory = ProcessMemory(os.getpid())
    thread = MemoryThread(memory)
    try:

        def read_change_read() -> tuple[bytes | None, bytes | None]:
            first = memory.read(address, 4)
            ctypes.memmove(address, b"WXYZ", 4)
            return first, memory.read(address, 4)

        assert thread.run(read_change_read, batched=True) == (bytes([0, 1, 2, 3]),) * 2
        assert thread.run(lambda: memory.read(address, 4), batched=True) == b"WXYZ"
        ctypes.memmove(address, b"abcd", 4)
        assert thread.run(read_change_read) == (b"abcd", b"WXYZ")  # unbatched: each read reads
    finally:
        thread.close()
    del buffer


def test_a_batched_read_of_an_unmapped_page_fails_as_a_single_read_does():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    page = mmap.PAGESIZE
    base = libc.mmap(None, 2 * page, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert base not in (None, ctypes.c_void_p(-1).value)
    ctypes.memmove(base + page - 8, b"lastword", 8)
    assert libc.munmap(base + page, page) == 0  # the second page: gone
    memory = ProcessMemory(os.getpid())
    try:
        with memory.batched():
            assert memory.read(base + page - 8, 8) == b"lastword"
            assert memory.read(base + page, 8) is None
            assert memory.read(base + page - 8, 16) is None  # across into it
        assert memory.read(base + page - 8, 16) is None
    finally:
        memory.close()
        libc.munmap(base, page)
