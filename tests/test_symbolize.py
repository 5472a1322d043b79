"""The mapping tracker and symbolizer against this test process's real maps."""

import ctypes
import os
import time

from profiler.events import RawSample, WalkEnd
from profiler.mappings import MAPPING_ELF, MAPPING_JIT, MappingTracker
from profiler.profile import FrameKind, Profile, RunInfo
from profiler.symbolize import Symbolizer


class RecordingTrie:
    """Stands in for the BPF map: records what would be installed."""

    def __init__(self, capacity=100000):
        self.entries = {}
        self.capacity = capacity

    def add_prefixes(self, prefixes, kind, load_bias, table_id=0):
        rejected = 0
        for prefix in prefixes:
            if len(self.entries) >= self.capacity:
                rejected += 1
                continue
            self.entries[prefix] = (kind, load_bias)
        return rejected

    def remove_prefixes(self, prefixes):
        for prefix in prefixes:
            self.entries.pop(prefix, None)


def libc_function_address(name):
    libc = ctypes.CDLL("libc.so.6")
    return ctypes.cast(getattr(libc, name), ctypes.c_void_p).value


def test_tracker_installs_every_executable_mapping():
    trie = RecordingTrie()
    tracker = MappingTracker(trie)
    tracker.add_process(os.getpid())
    kinds = {kind for kind, _ in trie.entries.values()}
    assert MAPPING_ELF in kinds
    assert all(prefix.pid == os.getpid() for prefix in trie.entries)
    found = tracker.find(os.getpid(), time.monotonic_ns(), libc_function_address("qsort"))
    assert found.mapping is not None and "libc.so" in found.mapping.entry.path
    assert found.mapping.image is not None
    tracker.process_exit(os.getpid())
    assert trie.entries == {}
    # Gone from the trie, still known for symbolisation.
    assert tracker.find(os.getpid(), time.monotonic_ns(), libc_function_address("qsort")).mapping is not None
    tracker.close()


def test_anonymous_exec_memory_is_jit_kind():
    import mmap

    region = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    address = ctypes.addressof(ctypes.c_char.from_buffer(region))
    trie = RecordingTrie()
    tracker = MappingTracker(trie)
    try:
        tracker.add_process(os.getpid())
        found = tracker.find(os.getpid(), time.monotonic_ns(), address)
        assert found.mapping is not None and found.mapping.entry.is_anonymous_exec
        kinds = [kind for prefix, (kind, _) in trie.entries.items() if prefix.address <= address < prefix.address + prefix.block_size]
        assert kinds == [MAPPING_JIT]
    finally:
        tracker.close()
        del address
        region.close()


def test_full_trie_is_counted_not_fatal():
    tracker = MappingTracker(RecordingTrie(capacity=3))
    tracker.add_process(os.getpid())
    assert tracker.stats.trie_rejected > 0
    tracker.close()


def test_symbolizer_names_libc_functions_once():
    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    tracker.add_process(os.getpid())
    symbolizer = Symbolizer(profile, tracker)
    symbolizer.start()
    qsort = libc_function_address("qsort")
    getpid = libc_function_address("getpid")
    for _ in range(50):
        # Caller frames are looked up at address-1: give the byte after a call.
        symbolizer.submit(RawSample(os.getpid(), os.getpid(), 0, time.monotonic_ns(), "t", (getpid + 1, qsort + 5, 0x10), WalkEnd.NO_MAPPING, -1, True))
    symbolizer.finish()
    tracker.close()
    assert len(profile.samples) == 50 and symbolizer.errors == []
    names = [frame.name for frame in profile.stack(profile.samples[0])]
    assert names[-1] == "getpid" and names[-2] == "qsort"
    assert names[0] == "[unknown]" and profile.frames[profile.samples[0].frame_ids[0]].kind is FrameKind.UNKNOWN
    assert len(profile.frames) == 3  # memoised: three unique addresses, three frames
