"""The command jitprof spawned: started with the JIT flags, held until
sampling is live, and stopped the way a shell or `timeout` would."""

from __future__ import annotations

import os
import signal
import time

from profiler.errors import JitprofError
from profiler.jit import registry
from profiler.run.targets import ChildStdio, SpawnedCommand, exit_status_code, spawn_stopped
from profiler.safety.terminal import say
from profiler.safety.users import RunAs
from profiler.tui.child_output import CapturedOutput

TERM_GRACE_S = 5.0


class Child:
    def __init__(
        self, command: list[str], run_as: RunAs, environ: dict[str, str], inject: bool, capture: bool, code_log: bool = False
    ) -> None:
        """Fork the command, stopped before exec. With capture, its output
        goes to a pane of the live view instead of the terminal; inject: its
        runtimes get their JIT-symbol flags (code_log: and node its code log)."""
        owner = (run_as.uid, run_as.gid)
        environment = registry.spawn_environment(environ, code_log, command, owner) if inject else environ
        if inject:
            for uid, count in registry.remove_planted_links().items():
                say(
                    f"jitprof: warning: removed {count:,} links that uid {uid} planted in /tmp where runtimes write their "
                    "perf maps and jitdumps, for processes not yet started; a process the command starts may still meet "
                    "one planted later (turn on fs.protected_symlinks, or run the command as another user)"
                )
        self.output: CapturedOutput | None = None
        stdio = None
        if capture:
            self.output = CapturedOutput(columns=max(os.get_terminal_size().columns - 4, 40))
            null = os.open(os.devnull, os.O_RDONLY)
            stdio = ChildStdio(null, self.output.slave, self.output.slave)
        try:
            self._spawned: SpawnedCommand = spawn_stopped(command, run_as, environment, stdio)
        finally:
            if stdio is not None:
                os.close(stdio.stdin)
                assert self.output is not None
                self.output.start()
        self.pid = self._spawned.pid
        if inject and not registry.claim_perf_map(self.pid, self._spawned.executable, *owner):
            self._spawned.abandon()
            raise JitprofError(
                f"another user keeps putting files at /tmp/perf-{self.pid}.map, where the command would write its perf map",
                "run it again; if it goes on, see who owns what is there (ls -l /tmp/perf-*.map), or use --no-inject",
            )
        self.status: int | None = None  # waitpid status once it has ended
        self.exec_failed = False

    def release(self) -> None:
        """Let it exec (sampling is live); raises if exec failed."""
        try:
            self._spawned.release()
        except JitprofError:
            self.exec_failed = True
            raise

    @property
    def released(self) -> bool:
        return self._spawned.released

    def poll(self) -> bool:
        """Has it ended? (Then status is set.)"""
        if self.status is None and not self.exec_failed:
            finished, status = os.waitpid(self.pid, os.WNOHANG)
            if finished:
                self.status = status
        return self.status is not None

    def abandon(self) -> None:
        """Setup failed before release: the command must never run."""
        if not self.exec_failed:
            self._spawned.abandon()

    def finish(self, stop_signal: int | None, descendants: list[int] | None = None) -> int:
        """Its exit code, ending it first if the run ended before it did: -d
        stops it like `timeout` (its descendants too, as timeout's process
        group); SIGTERM/SIGHUP to jitprof are passed on; after Ctrl-C it got
        the terminal's SIGINT already, so it is waited for."""
        if stop_signal is None or stop_signal in (signal.SIGTERM, signal.SIGHUP):
            for pid in descendants or []:
                send_signal(pid, stop_signal or signal.SIGTERM)
        if self.status is None:
            if stop_signal in (signal.SIGTERM, signal.SIGHUP):
                send_signal(self.pid, stop_signal)
            self.status = self._wait(terminate=stop_signal is None)
        return exit_status_code(self.status)

    def _wait(self, terminate: bool) -> int:
        if terminate:
            send_signal(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + TERM_GRACE_S
        try:
            while True:
                finished, status = os.waitpid(self.pid, os.WNOHANG)
                if finished:
                    return status
                if time.monotonic() > deadline:
                    send_signal(self.pid, signal.SIGKILL if terminate else signal.SIGTERM)
                    deadline = time.monotonic() + TERM_GRACE_S
                    terminate = True
                time.sleep(0.05)
        except KeyboardInterrupt:
            send_signal(self.pid, signal.SIGKILL)
            _, status = os.waitpid(self.pid, 0)
            return status


def send_signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
