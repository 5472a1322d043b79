"""The jitdump source found the way a runtime exposes it (the dump mapped
executable), and samples waiting for records a runtime has not flushed yet."""

from __future__ import annotations

import ctypes
import mmap
import os
import time

from profiler.jit.jitdump_source import JitdumpSymbols
from profiler.kernel.mappings import MappingTracker
from profiler.model.profile import Profile, RunInfo
from profiler.symbolize import symbolizer as symbolizer_module
from profiler.symbolize.symbolizer import Symbolizer
from tests.jit.test_jitdump import header, load
from tests.symbolize.test_symbolize import RecordingTrie, jit_sample, wait_for_samples


def test_dump_found_through_its_mapping_and_samples_wait_for_late_records(tmp_path, monkeypatch):
    monkeypatch.setattr(symbolizer_module, "PARK_RETRY_S", 0.02)
    monkeypatch.setattr(symbolizer_module, "PARK_MAX_S", 0.1)
    code = mmap.mmap(-1, 8192, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    address = ctypes.addressof(ctypes.c_char.from_buffer(code))
    dump_path = tmp_path / f"jit-{os.getpid()}.dump"
    sample_time = time.monotonic_ns()
    dump_path.write_bytes(header() + load(sample_time - 10**9, 0x1000, 0x10, "older, elsewhere"))
    with open(dump_path, "rb") as handle:  # as V8 does: mapped executable, so it shows in the maps
        marker = mmap.mmap(
            handle.fileno(), dump_path.stat().st_size, prot=mmap.PROT_READ | mmap.PROT_EXEC, flags=mmap.MAP_PRIVATE
        )
    profile = Profile(RunInfo([], [os.getpid()], 99))
    tracker = MappingTracker(RecordingTrie())
    tracker.add_process(os.getpid())
    dumps = JitdumpSymbols()
    symbolizer = Symbolizer(profile, tracker)
    symbolizer.add_jit_source(dumps)
    symbolizer.start()
    try:
        symbolizer.submit([jit_sample(address + 8, sample_time)])
        time.sleep(0.5)  # well past PARK_MAX_S: the dump has nothing as new as the sample yet
        assert dumps.has_source(os.getpid()) and profile.samples == []
        with open(dump_path, "ab") as handle:  # the runtime's buffer is flushed
            handle.write(load(sample_time - 1000, address, 64, "JS:*late /app/late.js:7:3"))
            handle.write(load(sample_time + 10**6, 0x2000, 0x10, "newer, elsewhere"))
        wait_for_samples(profile)
        assert [profile.stack(sample)[-1].name for sample in profile.samples] == ["late late.js:7"]
    finally:
        symbolizer.finish()
        dumps.close()
        tracker.close()
        marker.close()
        del address
        code.close()
