"""The perf-map source across threads: the sampling thread notes new
processes while the symbolizer's thread reads maps."""

from __future__ import annotations

import os
import threading

from profiler.jit import perfmap_source
from profiler.jit.perfmap import PerfMapFile


def test_noting_a_process_never_waits_for_a_map_being_read(tmp_path, monkeypatch):
    """A tail of a huge map (seconds, on a loaded machine) held the lock that
    noting a new process takes on the sampling thread: in a CI run that
    thread stalled for 1.3 s and the kernel's ring buffer overflowed."""
    map_path = tmp_path / "perf.map"
    map_path.write_bytes(b"1000 10 first\n")
    monkeypatch.setattr(perfmap_source, "candidate_paths", lambda pid: [str(map_path)])
    reading = threading.Event()
    release = threading.Event()
    real_tail = PerfMapFile.tail

    def slow_tail(self: PerfMapFile) -> int:
        reading.set()
        release.wait(10)
        return real_tail(self)

    monkeypatch.setattr(PerfMapFile, "tail", slow_tail)
    source = perfmap_source.PerfMapSymbols()
    names: list[str] = []
    reader = threading.Thread(target=lambda: names.append(source.resolve(os.getpid(), None, 0x1004).name))  # type: ignore[arg-type]
    reader.start()
    try:
        assert reading.wait(10)
        watcher = threading.Thread(target=source.watch, args=(os.getppid(),))
        watcher.start()
        watcher.join(2)
        assert not watcher.is_alive(), "watch waited for the read"
    finally:
        release.set()
        reader.join(10)
        source.close()
    assert names == ["first"]


def test_samples_held_are_named_by_the_map_as_it_stood_when_they_were_taken(tmp_path, monkeypatch):
    """A process whose samples wait to be named after it exits has its map
    marked as they wait (its size then): code written later over the same
    addresses does not name a sample taken before it; a sample after the
    last mark, or named at once, takes the newest code."""
    map_path = tmp_path / "perf.map"
    map_path.write_bytes(b"1000 100 JS:*old /a.js:1:1\n")
    monkeypatch.setattr(perfmap_source, "candidate_paths", lambda pid: [str(map_path)])
    source = perfmap_source.PerfMapSymbols()
    pid = os.getpid()
    source.watch(pid)
    source.samples_held(pid, 100)  # opens the map while the process lives
    source.samples_held(pid, 200)  # nothing written since: the same mark, later
    with map_path.open("ab") as growing:
        growing.write(b"1040 10 JS:*new /a.js:2:1\n")
    source.samples_held(pid, 300)

    def name_at(time_ns: int) -> str | None:
        frame = source.resolve(pid, None, 0x1044, time_ns)  # type: ignore[arg-type]
        return frame.name if frame is not None else None

    assert [name_at(time_ns) for time_ns in (50, 150, 200)] == ["old a.js:1"] * 3
    assert [name_at(time_ns) for time_ns in (250, 300, 301, 0)] == ["new a.js:2"] * 4
    source.close()
