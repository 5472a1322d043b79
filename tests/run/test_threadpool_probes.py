"""--off-cpu's threadpool probes: attached and let go on their own thread (each
uprobe's registration waits for RCU grace periods in the kernel), never on the
caller's; at the end, an attach under way stops at its next probe and nothing
attached is left open."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from profiler.jit import registry
from profiler.jit.contract import ProbePoint
from profiler.run.threadpool_probes import ThreadpoolProbes

POINTS = [ProbePoint(f"function_{index}", 0x1000 * index, "submit" if index == 0 else "work") for index in range(4)]


class FakeProgram:
    """attach_uprobe opens a real descriptor (of /dev/null) and may be held
    until the test lets it go; release_later keeps what it is given;
    close_perf_events closes, saying on which thread."""

    def __init__(self) -> None:
        self.attached: list[tuple[str, int, int]] = []
        self.released: list[int] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Semaphore(0)
        self.closed_on: list[str] = []
        self.all_closed = threading.Event()

    def attach_uprobe(self, program: str, path: str, offset: int, pid: int) -> int:
        self.entered.release()
        assert self.gate.wait(10)
        self.attached.append((program, offset, pid))
        return os.open(os.devnull, os.O_RDONLY)

    def release_later(self, descriptors: list[int]) -> None:
        self.released.extend(descriptors)

    def close_perf_events(self, descriptors: list[int]) -> None:
        for descriptor in descriptors:
            self.closed_on.append(threading.current_thread().name)
            os.close(descriptor)
            if len(self.closed_on) == len(POINTS):
                self.all_closed.set()


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimpleNamespace:
    opened: list[object] = []

    def probe_points(pid: int) -> tuple[object, list[ProbePoint]]:
        handle = (tmp_path / "node").open("wb")
        opened.append(handle)
        return handle, POINTS

    monkeypatch.setattr(registry, "threadpool_of", lambda pid: SimpleNamespace(probe_points=probe_points))
    return SimpleNamespace(opened=opened)


def is_open(descriptor: int) -> bool:
    try:
        os.fstat(descriptor)
    except OSError:
        return False
    return True


def test_attach_returns_before_the_probes_are_attached(pool: SimpleNamespace) -> None:
    program = FakeProgram()
    program.gate.clear()
    probes = ThreadpoolProbes(program)  # type: ignore[arg-type]
    probes.attach(42)  # returns with the first probe held in the kernel
    assert program.entered.acquire(timeout=10)
    assert program.attached == []
    program.gate.set()
    probes.close()
    assert [offset for _program, offset, _pid in program.attached] == [
        point.file_offset for point in POINTS[: len(program.attached)]
    ]
    assert all(pid == 42 for _program, _offset, pid in program.attached)
    # Everything attached went to the program to close with its own events.
    assert len(program.released) == len(program.attached)
    assert all(handle.closed for handle in pool.opened)  # type: ignore[attr-defined]


def test_an_attach_under_way_stops_at_its_next_probe_when_the_run_ends(pool: SimpleNamespace) -> None:
    program = FakeProgram()
    program.gate.clear()
    probes = ThreadpoolProbes(program)  # type: ignore[arg-type]
    probes.attach(7)
    assert program.entered.acquire(timeout=10)  # the first probe is being registered
    closer = threading.Thread(target=probes.close)
    closer.start()
    program.gate.set()
    closer.join(10)
    assert not closer.is_alive()
    assert len(program.attached) == 1  # no probe after the first: the run was over
    assert len(program.released) == 1
    for descriptor in program.released:
        os.close(descriptor)


def test_a_process_let_go_has_its_probes_closed_on_the_probes_thread(pool: SimpleNamespace) -> None:
    program = FakeProgram()
    probes = ThreadpoolProbes(program)  # type: ignore[arg-type]
    probes.attach(9)
    probes.attach(10)
    # The thread attaches in order: pid 10's last probe begun, pid 9's are all kept.
    for _point in [*POINTS, *POINTS]:
        assert program.entered.acquire(timeout=10)
    probes.detach(9)
    assert program.all_closed.wait(10)
    probes.close()
    assert set(program.closed_on) == {"jitprof-threadpool-probes"}
    # pid 10's go with the program, still open for it to close.
    assert len(program.released) == len(POINTS) and all(is_open(descriptor) for descriptor in program.released)
    for descriptor in program.released:
        os.close(descriptor)


def test_it_says_it_is_attaching_until_every_probe_asked_for_is_in(pool: SimpleNamespace) -> None:
    """An attached run says it samples once this is false: a pool's work from
    then on is charged whole."""
    program = FakeProgram()
    program.gate.clear()
    probes = ThreadpoolProbes(program)  # type: ignore[arg-type]
    assert not probes.attaching
    probes.attach(11)
    probes.attach(12)
    assert probes.attaching
    assert program.entered.acquire(timeout=10)
    assert probes.attaching  # pid 11's first probe held in the kernel
    program.gate.set()
    for _point in [*POINTS[1:], *POINTS]:
        assert program.entered.acquire(timeout=10)
    deadline = time.monotonic() + 10
    while probes.attaching and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not probes.attaching
    assert len(program.attached) == 2 * len(POINTS)
    probes.close()
    for descriptor in program.released:
        os.close(descriptor)
