"""What a run profiles: a command it spawns, processes it attaches to, or
the whole machine. Each mode starts its targets once sampling is ready,
says when the run is over on its own, and gives the run's exit status; the
sample loop and the end are the same for all three (run/recording.py)."""

from __future__ import annotations

import os
import sys
from typing import Protocol

from profiler.errors import JitprofError
from profiler.jit.sources import JitSources
from profiler.kernel.bpf_program import BpfProgram
from profiler.kernel.proc_status import process_alive
from profiler.run.child import Child
from profiler.run.followed import FollowedProcesses
from profiler.safety.users import RunAs
from profiler.tui.child_output import CapturedOutput


class RunMode(Protocol):
    def start(self, program: BpfProgram, followed: FollowedProcesses) -> list[int]:
        """Sample from now on; returns the pids the profile is of ([] for all)."""
        ...

    def over(self, followed: FollowedProcesses) -> bool:
        """Has the run ended by itself (the command exited, the pids are gone)?"""
        ...

    def exit_code(self, stop_signal: int | None, followed: FollowedProcesses | None) -> int: ...

    @property
    def output(self) -> CapturedOutput | None:
        """The command's output while the live view owns the terminal."""
        ...

    def end(self, captured_wait_s: float) -> None:
        """(Every way out of the run.) Let go of what the mode started."""
        ...

    def show_captured_output(self, wait_s: float) -> None: ...

    @property
    def exited(self) -> bool:
        """Has the spawned command ended (so its captured output is all there)?"""
        ...


class WholeMachine:
    """--all: every process, followed from its exec or first sample; jitprof's own left out."""

    @property
    def output(self) -> CapturedOutput | None:
        return None

    @property
    def exited(self) -> bool:
        return False

    def start(self, program: BpfProgram, followed: FollowedProcesses) -> list[int]:
        program.attach()
        program.maps.follow_all([os.getpid()])
        return []

    def over(self, followed: FollowedProcesses) -> bool:
        return False

    def exit_code(self, stop_signal: int | None, followed: FollowedProcesses | None) -> int:
        return 0

    def end(self, captured_wait_s: float) -> None:
        pass

    def show_captured_output(self, wait_s: float) -> None:
        pass


class Attach(WholeMachine):
    """--pid: running processes; the run ends when all of them have."""

    def __init__(self, pids: list[int], sources: JitSources, inline: bool) -> None:
        self._pids = pids
        self._sources = sources
        self._inline = inline

    def start(self, program: BpfProgram, followed: FollowedProcesses) -> list[int]:
        for pid in self._pids:
            followed.add(pid)
            self._sources.warn_if_unnamed(pid, self._inline)
        program.attach()
        gone = [pid for pid in self._pids if not process_alive(pid)]
        for pid in gone:
            followed.live.discard(pid)
        if not followed.live:
            raise JitprofError(
                f"process {', '.join(map(str, gone))} exited while attaching; nothing to profile",
                "attach to a process that keeps running, or spawn it: jitprof -- COMMAND",
            )
        return list(self._pids)

    def over(self, followed: FollowedProcesses) -> bool:
        return not followed.live  # (attached: the exit status is not ours to report)


class Spawn:
    """jitprof -- COMMAND: the command, held before exec until sampling is
    live; its exit status is the run's."""

    def __init__(
        self, command: list[str], run_as: RunAs, environ: dict[str, str], inject: bool, capture: bool, code_log: bool = False
    ) -> None:
        self._arguments = (command, run_as, environ, inject, capture, code_log)
        self.child: Child | None = None

    @property
    def output(self) -> CapturedOutput | None:
        return self.child.output if self.child is not None else None

    def start(self, program: BpfProgram, followed: FollowedProcesses) -> list[int]:
        self.child = Child(*self._arguments)
        followed.add_spawned(self.child.pid)
        program.attach()
        self.child.release()
        return [self.child.pid]

    def over(self, followed: FollowedProcesses) -> bool:
        return self.child is not None and self.child.poll()

    def exit_code(self, stop_signal: int | None, followed: FollowedProcesses | None) -> int:
        """Stops the command (and what it started) now, not after the outputs:
        it must not go on starting processes that write JIT files after they
        were removed."""
        assert self.child is not None
        ended_before = self.child.status is not None and stop_signal is None
        descendants = [] if ended_before or followed is None else followed.still_running(self.child.pid)
        return self.child.finish(stop_signal, descendants)

    def end(self, captured_wait_s: float) -> None:
        if self.child is not None:
            self.child.abandon()
            if not self.child.released or self.child.exec_failed:
                self.show_captured_output(captured_wait_s)

    def show_captured_output(self, wait_s: float) -> None:
        """What the program printed while the view was on, in full."""
        if self.child is None or self.child.output is None:
            return
        captured = self.child.output.finish(wait_s)
        self.child.output = None
        if captured:
            sys.stdout.buffer.write(captured)
            sys.stdout.buffer.flush()

    @property
    def exited(self) -> bool:
        return self.child is not None and self.child.status is not None
