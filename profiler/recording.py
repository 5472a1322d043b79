"""One profiling run: spawn or attach, sample until done, write outputs.

Ctrl-C, the target's exit, -d and errors all end the same way: sampling
stops, every collected sample is symbolised and written, BPF is detached,
and the exit status is the target's.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from profiler import node_preload, preflight, runtimes
from profiler.bpf_program import UNWIND_ROWS, UNWIND_TABLES, BpfProgram, LoadOptions
from profiler.child_output import CapturedOutput
from profiler.errors import JitprofError
from profiler.events import EventType, ProcessEvent, RawSample, WalkEnd
from profiler.jit_files import JitFileJanitor
from profiler.jit_sources import JitSources
from profiler.live_view import LiveView, RunCounters
from profiler.mappings import MappingTracker
from profiler.output import OutputRequest, WrittenOutput, write_outputs
from profiler.profile import Profile, RunInfo
from profiler.symbolize import Symbolizer
from profiler.targets import (
    ChildStdio,
    SpawnedCommand,
    exit_status_code,
    output_owner,
    process_alive,
    resolve_run_as,
    spawn_stopped,
    thread_group_id,
    validate_attach_pids,
)
from profiler.trie import TriePrefix, covering_prefix
from profiler.unwind_tables import UnwindTableStore, progress_wanted

POLL_MS = 100
MAPS_RESCAN_S = 1.0
CHILD_TERM_GRACE_S = 5.0


@dataclass
class RecordingOptions:
    command: list[str]
    pids: list[int]
    frequency_hz: int
    duration_s: float | None
    outputs: list[OutputRequest]  # empty: the default jitprof-<pid>.svg
    kernel_stacks: bool = False
    root_by_pid: bool = False
    dwarf: bool = True
    inject: bool = True  # add the runtimes' JIT-symbol flags to a spawned command
    keep_jit_files: bool = False
    inline: bool = True  # expand inlined JS functions from V8's code log
    live_view: bool = False  # the terminal view (the caller checks for a TTY)
    user: str | None = None
    as_root: bool = False


@dataclass
class Summary:
    samples: int
    processes: int
    lost: int
    cut_short: dict[str, int]
    unsymbolized_share: float
    outputs: list[WrittenOutput] = field(default_factory=list)

    def render(self) -> str:
        cut_total = sum(self.cut_short.values())
        cut_text = f"{cut_total:,} stacks cut short"
        if cut_total:
            reasons = ", ".join(f"{count:,} {reason}" for reason, count in sorted(self.cut_short.items()))
            cut_text += f" ({reasons})"
        written = [str(output.written) for output in self.outputs if output.written is not None]
        wrote = "wrote " + ", ".join(written) if written else "wrote nothing"
        return (
            f"jitprof: {self.samples:,} samples from {self.processes} process"
            f"{'es' if self.processes != 1 else ''}, {self.lost:,} lost; {cut_text}; "
            f"{100 * self.unsymbolized_share:.1f}% of frames unsymbolised; {wrote}"
        )


class Recording:
    def __init__(self, options: RecordingOptions, environ: dict[str, str] | None = None) -> None:
        self.options = options
        self.environ = dict(os.environ if environ is None else environ)
        self.profile = Profile(
            RunInfo(list(options.command), list(options.pids), options.frequency_hz, root_by_pid=options.root_by_pid)
        )
        self._program: BpfProgram | None = None
        self._jit_sources: JitSources | None = None
        self._jit_files = JitFileJanitor()
        self._run_as_uid: int | None = None
        self._unwind_tables: UnwindTableStore | None = None
        self._tracker: MappingTracker | None = None
        self._symbolizer: Symbolizer | None = None
        self._child: SpawnedCommand | None = None
        self._child_status: int | None = None
        self._live: set[int] = set()
        self._seen_processes: set[int] = set()
        # pid -> provisional trie prefixes to drop once its maps are read
        self._pending_refresh: dict[int, list[TriePrefix]] = {}
        self._stop_signal: int | None = None
        self._awaiting_exec: set[int] = set()  # spawned, still jitprof's own code
        self._view: LiveView | None = None
        self._output: CapturedOutput | None = None

    # The run -------------------------------------------------------------

    def run(self) -> int:
        preflight.check_all()
        run_as = resolve_run_as(self.options.user, self.options.as_root, self.environ) if self.options.command else None
        if self.options.pids:
            validate_attach_pids(self.options.pids)
        self._status("compiling and loading the BPF program")
        program = BpfProgram(LoadOptions(self.options.frequency_hz, self.options.kernel_stacks, self.options.dwarf))
        self._program = program
        if self.options.dwarf:
            self._unwind_tables = UnwindTableStore(
                program.unwind_rows_memory(),
                UNWIND_ROWS,
                UNWIND_TABLES,
                program.publish_unwind_table,
                show_progress=progress_wanted() and not self.options.live_view,
            )
            self._unwind_tables.start()
        self._tracker = MappingTracker(program, self._unwind_tables)
        self._run_as_uid = run_as.uid if run_as is not None else None
        self._symbolizer = Symbolizer(
            self.profile,
            self._tracker,
            kernel_stack=program.kernel_stack if self.options.kernel_stacks else None,
            kernel_symbol=program.kernel_symbol if self.options.kernel_stacks else None,
        )
        self._jit_sources = JitSources(self._run_as_uid, self.options.inline, self._jit_files)
        self._jit_sources.install(self._symbolizer)
        program.on_event(self._handle_event)
        # Signals only set a flag: an exception raised inside BCC's ring-buffer
        # callback would be swallowed by ctypes.
        previous_handlers = {
            signum: signal.signal(signum, self._request_stop) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        }
        try:
            try:
                self._start_targets(program, run_as)
                self._symbolizer.start()
                self.profile.info.started_ns = time.monotonic_ns()
                if self.options.live_view:
                    self._view = LiveView(self.profile, self._output, self._run_counters, lambda: sorted(self._live))
                    self._view.start()
                self._sample_loop(program)
            finally:
                program.detach()
                self._close_view()
                self.profile.info.ended_ns = time.monotonic_ns()
                # From here a second Ctrl-C aborts.
                signal.signal(signal.SIGINT, signal.default_int_handler)
            self._drain(program)
            if self._child_status is not None:
                self._show_captured_output(1.0)
            summary = self._finish_outputs(program)
            print(summary.render(), file=sys.stderr)
            self._report_problems(summary)
        finally:
            self._close_view()
            if self._child is not None:
                self._child.abandon()
            if self._output is not None and (self._child is None or not self._child.released):
                self._show_captured_output(0.0)
            if self._jit_sources is not None:
                self._remove_jit_files()
                self._jit_sources.close()
            self._jit_files.close()
            if self._unwind_tables is not None:
                self._unwind_tables.stop()
                skipped = self._unwind_tables.stats.skipped_at_exit
                if skipped:
                    print(
                        f"jitprof: note: unwind tables of {skipped} files were not finished in time; "
                        "a later run builds the rest",
                        file=sys.stderr,
                    )
            program.close()
            self._tracker.close()
            for signum, handler in previous_handlers.items():
                signal.signal(signum, handler)
        code = self._exit_code()
        self._show_captured_output(1.0)  # after the view's summary, once the program has ended
        return code

    def _start_targets(self, program: BpfProgram, run_as) -> None:  # type: ignore[no-untyped-def]
        assert self._tracker is not None
        if self.options.command:
            environment = self.environ
            if self.options.inject:
                environment = runtimes.inject_environment(self.environ, node_preload.install())
            stdio = None
            if self.options.live_view:
                # The view owns the terminal: the program writes to a pane.
                self._output = CapturedOutput(columns=max(os.get_terminal_size().columns - 4, 40))
                null = os.open(os.devnull, os.O_RDONLY)
                stdio = ChildStdio(null, self._output.slave, self._output.slave)
            try:
                child = spawn_stopped(self.options.command, run_as, environment, stdio)
            finally:
                if stdio is not None:
                    os.close(stdio.stdin)
                    assert self._output is not None
                    self._output.start()
            self._child = child
            self.profile.info.pids = [child.pid]
            self._awaiting_exec.add(child.pid)
            # Until exec the child is a copy of jitprof: nothing of it to map.
            self._add_process(child.pid, read_maps_now=False)
            program.attach()
            try:
                child.release()
            except JitprofError:
                self._child = None  # reaped by release()
                raise
            return
        for pid in self.options.pids:
            self._add_process(pid)
            if self._jit_sources is not None:
                self._jit_sources.warn_if_unnamed(pid, self.options.inline)
        program.attach()
        gone = [pid for pid in self.options.pids if not process_alive(pid)]
        for pid in gone:
            self._live.discard(pid)
        if not self._live:
            raise JitprofError(
                f"process {', '.join(map(str, gone))} exited while attaching; nothing to profile",
                "attach to a process that keeps running, or spawn it: jitprof -- COMMAND",
            )

    def _add_process(self, pid: int, parent: int | None = None, read_maps_now: bool = True) -> None:
        assert self._program is not None and self._tracker is not None
        self._program.follow(pid)
        self._live.add(pid)
        self._seen_processes.add(pid)
        self._tracker.add_process(pid, parent, read_maps_now)
        if read_maps_now:
            self._watch_jit_sources(pid)

    def _watch_jit_sources(self, pid: int) -> None:
        if self._jit_sources is not None:
            self._jit_sources.watch(pid)

    def _sample_loop(self, program: BpfProgram) -> None:
        assert self._tracker is not None
        deadline = time.monotonic() + self.options.duration_s if self.options.duration_s else None
        next_rescan = time.monotonic() + MAPS_RESCAN_S
        while self._stop_signal is None:
            program.poll(POLL_MS)
            if self._view is not None:
                self._view.tick()
                if self._view.stop_requested:
                    return
            now = time.monotonic()
            if self._pending_refresh:
                for pid, provisional in self._pending_refresh.items():
                    self._tracker.refresh(pid, provisional)
                self._pending_refresh.clear()
            if now >= next_rescan:
                self._tracker.refresh_all()
                next_rescan = now + MAPS_RESCAN_S
            if self._child is not None and self._child_status is None:
                finished, status = os.waitpid(self._child.pid, os.WNOHANG)
                if finished:
                    self._child_status = status
                    return
            if self.options.pids and not self._live:
                return
            if deadline is not None and now >= deadline:
                return

    def _run_counters(self) -> RunCounters:
        assert self._program is not None
        counters = self._program.counters()
        cut_short = sum(count for end, count in self.profile.walk_ends.items() if end is not WalkEnd.COMPLETE)
        return RunCounters(counters.ringbuf_full + self._program.malformed_events, cut_short)

    def _close_view(self) -> None:
        """Give the terminal back (every way out of the run comes here)."""
        if self._view is not None:
            self._view.stop()
            self._view = None

    def _show_captured_output(self, wait_s: float) -> None:
        """What the program printed while the view was on, in full."""
        if self._output is None:
            return
        captured = self._output.finish(wait_s)
        self._output = None
        if captured:
            sys.stdout.buffer.write(captured)
            sys.stdout.buffer.flush()

    def _drain(self, program: BpfProgram) -> None:
        """Take what is left in the ring buffer, then let the symbolizer finish."""
        assert self._symbolizer is not None
        program.poll(0)
        program.poll(0)
        self._status(f"symbolising {self._symbolizer.backlog():,} pending samples")
        self._symbolizer.finish()

    # Events (ring-buffer callback, main thread) ---------------------------

    def _handle_event(self, event: RawSample | ProcessEvent) -> None:
        assert self._symbolizer is not None and self._tracker is not None and self._program is not None
        if isinstance(event, RawSample):
            if event.pid not in self._awaiting_exec:
                self._symbolizer.submit(event)
            return
        if event.event_type is EventType.MAPS_CHANGED:
            provisional = self._pending_refresh.setdefault(event.pid, [])
            prefix = covering_prefix(event.pid, event.address, event.length)
            if prefix is not None:
                provisional.append(prefix)
        elif event.event_type is EventType.FORK:
            tgid = thread_group_id(event.pid)
            if tgid is not None and tgid != event.pid:
                if event.pid not in self._seen_processes:
                    self._program.unfollow(event.pid)  # a thread: its tgid is followed already
                return
            self._add_process(event.pid, parent=event.parent_pid)
        elif event.event_type is EventType.EXEC:
            self._awaiting_exec.discard(event.pid)
            self._tracker.process_exec(event.pid, event.time_ns)
            if self.options.command and self.options.inject:
                self._jit_files.note_process(event.pid)
            self._watch_jit_sources(event.pid)
        elif event.event_type is EventType.EXIT and event.tid == event.pid:
            self._live.discard(event.pid)
            self._program.unfollow(event.pid)
            self._tracker.process_exit(event.pid)

    def _request_stop(self, signum: int, _frame: object) -> None:
        self._stop_signal = signum

    # The end ---------------------------------------------------------------

    def _finish_outputs(self, program: BpfProgram) -> Summary:
        counters = program.counters()
        losses = self.profile.losses
        losses.ringbuf_full = counters.ringbuf_full
        losses.malformed = program.malformed_events
        losses.kernel_stack_failed = counters.kernel_stack_failed
        losses.process_events_lost = counters.events_lost
        requests = self.options.outputs or [
            OutputRequest(Path(f"jitprof-{self.profile.info.pids[0] if self.profile.info.pids else os.getpid()}.svg"), "svg")
        ]
        written = write_outputs(self.profile, requests, output_owner(self.environ))
        cut_short = {
            end.label: count for end, count in self.profile.walk_ends.items() if end is not WalkEnd.COMPLETE and count
        }
        return Summary(
            samples=len(self.profile.samples),
            processes=len({sample.pid for sample in self.profile.samples}),
            lost=losses.lost_samples,
            cut_short=cut_short,
            unsymbolized_share=self.profile.unsymbolized_share(),
            outputs=written,
        )

    def _remove_jit_files(self) -> None:
        """Perf maps exist because jitprof asked for them: remove them."""
        if self.options.keep_jit_files or self._jit_sources is None:
            return
        self._jit_sources.jvms.remove_files()  # asked for when attached too
        if not self.options.command or not self.options.inject or self._run_as_uid is None:
            return
        self._jit_sources.remove_files(self._run_as_uid, self._seen_processes)

    def _report_problems(self, summary: Summary) -> None:
        assert self._tracker is not None and self._symbolizer is not None
        if self._jit_sources is not None:
            self._jit_sources.report(self.profile)
        for output in summary.outputs:
            if output.error:
                where = f"wrote {output.written} instead" if output.written else "and no fallback was writable"
                print(f"jitprof: warning: cannot write {output.requested}: {output.error}; {where}", file=sys.stderr)
        if self._tracker.stats.trie_rejected:
            print(
                f"jitprof: warning: the mapping table was full; {self._tracker.stats.trie_rejected} ranges were not "
                "tracked and their stacks end early",
                file=sys.stderr,
            )
        if self._unwind_tables is not None:
            stats = self._unwind_tables.stats
            if stats.rejected_full:
                print(
                    f"jitprof: warning: the unwind row table is full ({stats.rows_capacity:,} rows); "
                    f"{len(stats.rejected_full)} files use frame pointers only: {', '.join(stats.rejected_full[:3])}",
                    file=sys.stderr,
                )
            for path, reason in list(stats.failed.items())[:3]:
                print(f"jitprof: warning: no unwind table for {path}: {reason}", file=sys.stderr)
        for error in self._symbolizer.errors[:3]:
            print(f"jitprof: internal error while symbolising (please report): {error}", file=sys.stderr)

    def _exit_code(self) -> int:
        child = self._child
        if child is None:
            return 0  # attached: the processes are not ours to report on
        if self._child_status is None:
            if self._stop_signal in (signal.SIGTERM, signal.SIGHUP):
                _signal(child.pid, self._stop_signal)  # pass it on, like a shell would
            self._child_status = self._wait_child(child, terminate=self._stop_signal is None)
        self._child = None
        return exit_status_code(self._child_status)

    def _wait_child(self, child: SpawnedCommand, terminate: bool) -> int:
        """-d ended the run: stop the program like `timeout` would. After
        Ctrl-C it got the SIGINT from the terminal: wait for it to finish."""
        if terminate:
            _signal(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + CHILD_TERM_GRACE_S
        try:
            while True:
                finished, status = os.waitpid(child.pid, os.WNOHANG)
                if finished:
                    return status
                if time.monotonic() > deadline:
                    _signal(child.pid, signal.SIGKILL if terminate else signal.SIGTERM)
                    deadline = time.monotonic() + CHILD_TERM_GRACE_S
                    terminate = True
                time.sleep(0.05)
        except KeyboardInterrupt:
            _signal(child.pid, signal.SIGKILL)
            _, status = os.waitpid(child.pid, 0)
            return status

    def _status(self, message: str) -> None:
        if sys.stderr.isatty():
            print(f"jitprof: {message}…", file=sys.stderr)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
