"""The attach client against a JVM that misbehaves: a peer that answers one
byte at a time, slower than any per-read timeout, never holds a run past its
budget, and stopping the run cuts an exchange short."""

import os
import socket
import threading
import time

import pytest

from profiler.jit.jvm import attach, perfmap_source
from profiler.jit.jvm.attach import AttachError, Budget, run_jcmd


class DribblingJvm:
    """A listener where HotSpot's would be (/tmp/.java_pid<our pid>) that reads
    the request, then sends one byte every `interval` seconds, forever."""

    def __init__(self, interval: float, reply: bytes = b"0\nok\n", repeat: int = 1000) -> None:
        self.path = f"/tmp/.java_pid{os.getpid()}"
        if os.path.exists(self.path):
            pytest.skip(f"{self.path} exists already")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(4)
        self.interval = interval
        self.reply = reply * repeat
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(0.05)
        while not self.stop.is_set():
            try:
                peer, _ = self.listener.accept()
            except OSError:
                continue
            with peer:
                peer.recv(4096)
                for byte in self.reply:
                    if self.stop.wait(self.interval):
                        return
                    try:
                        peer.sendall(bytes([byte]))
                    except OSError:
                        break

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.listener.close()
        os.unlink(self.path)


@pytest.fixture
def dribbling_jvm():
    jvm = DribblingJvm(interval=0.3)
    yield jvm
    jvm.close()


def test_an_honest_reply_is_read():
    jvm = DribblingJvm(interval=0.0, reply=b"0\nperf map written\n", repeat=1)
    try:
        reply = run_jcmd(os.getpid(), "Compiler.perfmap", Budget.of(5.0))
    finally:
        jvm.close()
    assert reply.status == 0 and reply.output == "perf map written\n"


def test_a_dribbling_peer_is_cut_off_at_the_budget(dribbling_jvm):
    started = time.monotonic()
    with pytest.raises(AttachError, match="did not answer in time"):
        run_jcmd(os.getpid(), "Compiler.perfmap", Budget.of(1.0))
    elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 1.5  # per read it was never silent for long: the whole exchange is what is bounded


def test_stopping_the_run_cuts_an_exchange_short(dribbling_jvm):
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    with pytest.raises(AttachError, match="run is ending"):
        run_jcmd(os.getpid(), "Compiler.perfmap", Budget.of(30.0, stop.is_set))
    assert time.monotonic() - started < 0.3 + attach.POLL_S + 0.3


def test_the_final_snapshots_share_one_short_budget(dribbling_jvm, monkeypatch):
    """The end of a run asks every JVM once more; three stalled JVMs together
    take FINAL_BUDGET_S, not three exchange timeouts."""
    monkeypatch.setattr(perfmap_source, "FINAL_BUDGET_S", 0.8)

    class NoMaps:
        def reload(self, pid: int) -> bool:
            return False

    jvms = perfmap_source.JvmPerfMaps(NoMaps(), lambda pid: True)  # type: ignore[arg-type]
    for key in range(3):  # three JVMs, all answering through the same dribbling socket
        jvms._jvms[key] = perfmap_source._Jvm(os.getpid(), map_was_there=True)
    started = time.monotonic()
    jvms.read_all()
    assert time.monotonic() - started < 0.8 + 0.5
    report = jvms.reports()[0]
    assert report.snapshots == 0 and "in time" in report.last_error
