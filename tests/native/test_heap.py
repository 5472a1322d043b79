"""Freed memory is handed back: what a service's RSS shows is what it holds."""

import threading

from profiler.native.heap import give_back_freed_memory


def resident_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_memory_freed_in_small_pieces_is_given_back():
    held: list[bytearray] = []

    def churn():
        # A thread's own malloc arena, as the symbolizer's: 1 KiB pieces come
        # from malloc, not Python's small-object pools; the last one kept
        # stops the arena's top from shrinking by itself.
        pieces = [bytearray(1024) for _ in range(60_000)]
        held.append(pieces[-1])
        del pieces

    worker = threading.Thread(target=churn)
    worker.start()
    worker.join()
    before = resident_mib()
    give_back_freed_memory()
    assert resident_mib() < before - 30, (before, resident_mib())
