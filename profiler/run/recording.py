"""One profiling run: spawn or attach, sample until done, write outputs.

Ctrl-C, the target's exit, -d and errors all end the same way: sampling
stops, every collected sample is symbolised and written, BPF is detached,
and the exit status is the target's.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from profiler.jit import registry
from profiler.jit.files import JitFileJanitor
from profiler.jit.sources import JitSources
from profiler.kernel import preflight
from profiler.kernel.bpf_program import BpfProgram
from profiler.kernel.events import EventType, ProcessEvent, RawSample, WalkEnd, thread_waits_record, work_started_record
from profiler.kernel.kernel_maps import UNWIND_ROWS, UNWIND_TABLES, UnreportedWaits
from profiler.kernel.late_walks import LateWalks
from profiler.kernel.mappings import MappingTracker
from profiler.kernel.proc_status import comm_of
from profiler.labels.grouping import grouped_by
from profiler.labels.label_sources import LabelSources
from profiler.model.profile import MAX_SEPARATE_WAITS, Profile, RunInfo
from profiler.native import debuginfod, library
from profiler.native.heap import give_back_freed_memory
from profiler.native.locator_process import CodeLocator
from profiler.native.unwind_tables import UnwindTableStore
from profiler.output import OutputRequest, write_outputs
from profiler.output.originals import with_originals
from profiler.run.followed import FollowedProcesses
from profiler.run.modes import Attach, RunMode, Spawn, WholeMachine
from profiler.run.options import RecordingOptions
from profiler.run.program_loading import ProgramLoading, load_options, remember_reader_needed
from profiler.run.summary import WARNING, Summary, loss_reasons, report_output_errors, tracking_problems, warn
from profiler.run.targets import perf_maps_unwritable, validate_attach_pids
from profiler.run.threadpool_probes import ThreadpoolProbes
from profiler.safety.terminal import say
from profiler.safety.users import RunAs, output_owner, resolve_run_as
from profiler.symbolize.symbolizer import Symbolizer
from profiler.symbolize.waits import is_wait_record, within_run

if TYPE_CHECKING:
    from profiler.run.push_session import PushSession
    from profiler.tui.live_view import LiveView, RunCounters

# The ring is read this often while the live view draws (its keys and
# counts), and less often without it: samples do not wake us (process events
# do, at once), and each wakeup of the loop and the symbolizer costs about as
# much as naming a dozen samples. A process's changed maps are read when due,
# whichever comes first: until then its new code is walked in user space,
# from a copy of the stack that may not reach the root.
POLL_MS = 100
MAX_BACKLOG = 30_000  # samples waiting to be named (1-2 KiB each in memory)
# A spawned runtime named from files that outlive it (Deno) is named after
# it exits if it ends within this, as perf names after the program: naming
# while it runs took a tenth of its wall on two CPUs (prettier under deno).
HOLD_MAX_S = 10.0
MAX_HELD = MAX_BACKLOG // 2
POLL_QUIET_MS = 250
DRAIN_BATCHES = 4  # at the end: what the ring holds (4 MiB) and what came meanwhile
# The maps of processes sampled since the last rescan are read again this
# often (new executable memory is told by the kernel at once: this catches
# what it does not tell, code unmapped), and every process's this often: a
# process that did not run changed nothing, and reading every map every
# second was a tenth of an idle agent's CPU.
MAPS_RESCAN_S = 1.0
MAPS_RESCAN_ALL_S = 30.0
SYMBOLIZE_BUDGET_S = 30.0  # after sampling: a second Ctrl-C or SIGTERM ends it sooner
SOURCE_MAPS_BUDGET_S = 30.0  # after that, frames not mapped yet are shown as generated
# After this, none of an exited process's samples wait for its JIT files any
# more: they are removed and its state goes, so long runs stay flat.
RETIRE_AFTER_S = 10.0
SAMPLING_LINE = "jitprof: sampling "  # how an attached or --all run says it has begun (tests and benchmarks wait for it)
# It is said once the threadpool probes of the processes found are in (about
# 0.1 s after, on their own thread), so that what a pool does from then on is
# charged whole; at the latest this long after sampling began.
SAMPLING_LINE_WAIT_S = 2.0
SAMPLING_LINE_POLL_MS = 20
TRIM_HEAP_S = 60.0  # --push: freed memory is handed back to the system this often


class Recording:
    def __init__(
        self, options: RecordingOptions, environ: dict[str, str] | None = None, loading: ProgramLoading | None = None
    ) -> None:
        self.options = options
        self._loading = loading  # the BPF program, being loaded already
        self.environ = dict(os.environ if environ is None else environ)
        self.profile = Profile(
            RunInfo(
                list(options.command),
                list(options.pids),
                options.frequency_hz,
                root_by_pid=options.root_by_pid,
                off_cpu=options.off_cpu,
                idle_kept=options.keep_idle,
                shortest_wait_ns=options.shortest_wait_ns if options.off_cpu else 0,
            ),
            separate_waits=MAX_SEPARATE_WAITS,
        )
        self._program: BpfProgram | None = None
        self._jit_sources: JitSources | None = None
        self._labels: LabelSources | None = None  # what processes publish for their samples' labels
        self._jit_files = JitFileJanitor()
        self._run_as_uid: int | None = None
        self._unwind_tables: UnwindTableStore | None = None
        self._tracker: MappingTracker | None = None
        self._symbolizer: Symbolizer | None = None
        # The samples of one poll, handed to the symbolizer together: one
        # wake-up of its thread per poll, not per sample (most of jitprof's own CPU was those).
        self._polled_samples: list[RawSample] = []
        self._said_during_run: list[str] = []  # warnings said while sampling, kept with the profile
        self._sampled_since_rescan: set[int] = set()
        self._followed: FollowedProcesses | None = None
        self._mode: RunMode = WholeMachine()
        self._stop_signal: int | None = None
        self._stop_requests = 0
        self._view: LiveView | None = None
        self._push: PushSession | None = None
        self._inject = False  # the command's runtimes are given their JIT-symbol flags
        self._originals: registry.SourceMapper | None = None  # source maps' frames, unless --no-source-maps
        self._threadpools: ThreadpoolProbes | None = None  # --off-cpu
        self._hold_until = 0.0  # a spawned runtime's samples may wait to be named after it until then
        self._named_after_exit: dict[int, bool] = {}  # by pid: is its runtime named from files that outlive it?
        self._sampling_line_by: float | None = None  # an attached run says it samples by then
        self._waits_at_end: list[UnreportedWaits] = []  # --off-cpu: what the kernel held when sampling stopped

    # The run -------------------------------------------------------------

    def run(self) -> int:
        try:
            if self._loading is None:
                preflight.check_all()
            debuginfod.enabled = self.options.debuginfod
            run_as = resolve_run_as(self.options.user, self.options.as_root, self.environ) if self.options.command else None
            if self.options.pids:
                validate_attach_pids(self.options.pids)
            if self.options.push is not None:
                # Imported for a push only: HTTP, TLS and the formats it sends.
                from profiler.run.push_session import PushSession  # noqa: PLC0415

                self._push = PushSession(
                    self.options.push, self.environ, self.options.frequency_hz, bool(self.options.outputs), self.profile.build_ids
                )
            program = self._set_up(run_as)
        except BaseException:
            if self._loading is not None:
                self._loading.discard()
            raise
        # Signals only set a flag: an exception raised inside BCC's ring-buffer
        # callback would be swallowed by ctypes.
        previous_handlers = {
            signum: signal.signal(signum, self._request_stop) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        }
        # A handler (doing nothing) makes the command's exit interrupt the
        # wait for events at once, instead of at the next poll timeout.
        previous_handlers[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
        try:
            self._sample(program)
            code = self._mode.exit_code(self._stop_signal, self._followed)
            self._finish(program)
        finally:
            self._clean_up(program)
            for signum, handler in previous_handlers.items():
                signal.signal(signum, handler)
        self._mode.show_captured_output(1.0)  # after the view's summary, once the program has ended
        return code

    def _set_up(self, run_as: RunAs | None) -> BpfProgram:
        """The BPF program loaded, and everything that takes its records."""
        self._status("compiling and loading the BPF program")
        if self._loading is not None:
            program = self._loading.program()
        else:
            program = BpfProgram(load_options(self.options))
        self._program = program
        locator = CodeLocator()
        if self.options.off_cpu:
            program.maps.set_shortest_wait(self.options.shortest_wait_ns)
            self._threadpools = ThreadpoolProbes(program)
        if self.options.dwarf:
            library.load()  # a missing build is one error now, not a failure per file later
            self._unwind_tables = UnwindTableStore(
                program.maps.write_unwind_rows,
                UNWIND_ROWS,
                UNWIND_TABLES,
                program.maps.publish_unwind_table,
            )
            self._unwind_tables.start()
        self._tracker = MappingTracker(program.maps, self._unwind_tables, lazy_tables=self.options.all_processes)
        self._late_walks = LateWalks(self._tracker, self._unwind_tables)
        self._run_as_uid = run_as.uid if run_as is not None else None
        self._symbolizer = Symbolizer(
            self.profile,
            self._tracker,
            kernel_stack=program.maps.kernel_stack if self.options.kernel_stacks else None,
            kernel_symbol=program.kernel_symbol if self.options.kernel_stacks else None,
            late_walks=self._late_walks,
            locator=locator,
            expand_inlining=self.options.inline,
        )
        self._inject = self._injects(run_as)
        self._jit_sources = JitSources(
            self._run_as_uid,
            self.options.inline,
            self._jit_files,
            ask_processes=not self.options.all_processes,
            injected=self._inject,
            kernel=program.maps if self.options.v8_heap else None,
            jvm_debug_non_safepoints=self.options.jvm_debug_non_safepoints,
            async_callers=self.options.async_callers,
        )
        self._symbolizer.add_jit_sources(self._jit_sources)
        if self.options.source_maps:
            self._originals = registry.SourceMapper()
            self.profile.originals = self._originals.originals
            self._symbolizer.on_new_frames = self._originals.note_frames
        self._late_walks.recorder = self._jit_sources
        self._mode = self._mode_for(run_as)
        if self.options.labels:
            self._labels = LabelSources(
                self.profile,
                program.maps,
                self._symbolizer.call_in_order,
                runtime_contexts=registry.runtime_contexts(program.maps, self.options.label_store),
            )
            self._symbolizer.labels = self._labels
        self._followed = FollowedProcesses(
            program.maps,
            self._tracker,
            self._jit_sources,
            self._jit_files if self._inject else None,
            on_new_process=self._push.apps.note if self._push is not None else None,
            on_runtime_known=self._runtime_known,
            labels=self._labels,
        )
        program.events.on_event(self._handle_event)
        return program

    def _runtime_known(self, pid: int) -> None:
        """pid's maps are read: what needs it while it is there learns of it."""
        if self._originals is not None:
            self._originals.note_process(pid)
        if self._threadpools is not None:
            self._threadpools.attach(pid)

    def _sampling_line(self) -> str:
        pids = self.profile.info.pids
        what = (
            "every process" if self.options.all_processes else ("pid " if len(pids) == 1 else "pids ") + ", ".join(map(str, pids))
        )
        off_cpu = " and where it waits" if self.options.off_cpu else ""
        until = f"for {self.options.duration_s:g} s or " if self.options.duration_s else ""
        return f"{SAMPLING_LINE}{what} at {self.options.frequency_hz} Hz{off_cpu}, {until}until Ctrl-C"

    def _injects(self, run_as: RunAs | None) -> bool:
        """Will the command's runtimes be given their JIT-symbol flags?"""
        if not self.options.command or not self.options.inject or run_as is None:
            return False
        unwritable = perf_maps_unwritable(run_as)
        if unwritable:
            say(
                f"jitprof: warning: {unwritable}, where runtimes write their perf maps; not giving them the flags "
                "(node would abort), so JIT frames stay unnamed (hint: run where /tmp is writable)"
            )
        return not unwritable

    def _sample(self, program: BpfProgram) -> None:
        """Start the targets and sample until the run is over."""
        assert self._symbolizer is not None and self._followed is not None
        try:
            self.profile.info.pids = self._mode.start(program, self._followed) or self.profile.info.pids
            if self.options.command and not self.options.live_view and not self.options.off_cpu and self._push is None:
                self._hold_until = time.monotonic() + HOLD_MAX_S  # with a live view, or pushing, names are wanted now
                self._symbolizer.hold = self._may_wait_for_exit
            self._symbolizer.start()
            if self._originals is not None:
                self._originals.start()
            self.profile.info.started_ns = time.monotonic_ns()
            if not self.options.live_view and not self.options.command:
                # Attached: nothing else says it has begun (as py-spy does).
                self._sampling_line_by = time.monotonic() + SAMPLING_LINE_WAIT_S
            if self._push is not None:
                self._push.begin()
            if self.options.live_view:
                from profiler.tui.live_view import LiveView  # noqa: PLC0415  (rich: only for the view)

                self._view = LiveView(
                    self.profile,
                    self._mode.output,
                    self._run_counters,
                    lambda: sorted(self._followed_live()),
                    js_only=self.options.js_only,
                )
                self._view.start()
            self._sample_loop(program)
            self._say_sampling(force=True)
        finally:
            program.stop_sampling()
            self.profile.info.ended_ns = time.monotonic_ns()
            if self.options.off_cpu:
                # Now, not after the drain: threads go on running, and a
                # preempted one's time in the run queue goes on adding up.
                self._waits_at_end = program.maps.unreported_waits()
            self._close_view()

    def _finish(self, program: BpfProgram) -> None:
        """Name what is pending, send and write it, and say what happened."""
        assert self._symbolizer is not None
        # A second Ctrl-C or SIGTERM gives up what is still being named,
        # and the outputs are written; after that a Ctrl-C aborts.
        self._drain(program)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if self.options.off_cpu:
            try:
                self._add_unreported_waits(program)
            except Exception as error:  # a bug here must not lose the run
                say(f"jitprof: internal error while adding the last waits (please report): {type(error).__name__}: {error}")
        if self._mode.exited:
            self._mode.show_captured_output(1.0)
        if self._mode.exited or self.options.pids:
            remember_reader_needed(self.options)
        if self._push is not None:
            self._push.finish(self.profile, self._symbolizer.forget_frame_ids, lambda: self._stop_requests >= 2, self._status)
        self._count_losses(program)
        problems = self._problems()
        # Kept with the profile, so report.html (and `jitprof report` later) shows them too.
        said = (self._jit_sources.said_on_attach if self._jit_sources is not None else []) + self._said_during_run + problems
        self.profile.info.warnings = [line.removeprefix("jitprof: ") for line in said]
        summary = self._finish_outputs()
        say(summary.render())
        if self._push is not None:
            for line in self._push.summary():
                say(line)
        report_output_errors(summary.outputs)
        for line in problems:
            say(line)

    def _clean_up(self, program: BpfProgram) -> None:
        """(Every way out of the run.) Files jitprof caused removed, threads and the kernel's state let go."""
        assert self._jit_sources is not None and self._tracker is not None
        self._close_view()
        self._mode.end(0.0)
        self._remove_jit_files()
        self._jit_sources.close()
        self._jit_files.close()
        if self._originals is not None:
            self._originals.close()
        if self._unwind_tables is not None:
            self._stop_unwind_tables(self._unwind_tables)
        if self._threadpools is not None:
            self._threadpools.close()
        program.close(in_background=True)
        self._tracker.close()

    def _mode_for(self, run_as: RunAs | None) -> RunMode:
        assert self._jit_sources is not None
        if self.options.all_processes:
            return WholeMachine()
        if self.options.command:
            assert run_as is not None
            return Spawn(
                self.options.command,
                run_as,
                self.environ,
                self._inject,
                self.options.live_view,
                code_log=not self.options.v8_heap,
            )
        return Attach(self.options.pids, self._jit_sources, self.options.inline)

    def _may_wait_for_exit(self, pid: int) -> bool:
        """(The symbolizer's thread.) May pid's samples be named once it has
        exited? While it runs, within HOLD_MAX_S of the start, for a runtime
        whose code is named from files that outlive it."""
        assert self._symbolizer is not None
        if time.monotonic() > self._hold_until or pid not in self._followed_live():
            return False
        if pid not in self._named_after_exit:
            assert self._tracker is not None
            view = self._tracker.space_view(pid, time.monotonic_ns())
            self._named_after_exit[pid] = view is not None and registry.named_after_exit(pid, view.mappings)
        return self._named_after_exit[pid] and self._symbolizer.backlog() < MAX_HELD

    def _followed_live(self) -> set[int]:
        return self._followed.live if self._followed is not None else set()

    def _sample_loop(self, program: BpfProgram) -> None:
        assert self._tracker is not None and self._followed is not None and self._symbolizer is not None
        deadline = time.monotonic() + self.options.duration_s if self.options.duration_s else None
        next_rescan = time.monotonic() + MAPS_RESCAN_S
        next_full_rescan = time.monotonic() + MAPS_RESCAN_ALL_S
        push = self._push
        next_cut = time.monotonic() + push.options.interval_s if push is not None else None
        next_trim = time.monotonic() + TRIM_HEAP_S
        while self._stop_signal is None:
            interval_ms = POLL_MS if self._view is not None else POLL_QUIET_MS
            if self._sampling_line_by is not None:
                interval_ms = SAMPLING_LINE_POLL_MS
            self._poll(program, self._followed.refresh_due_in_ms(interval_ms))
            self._say_sampling(force=False)
            if self._view is not None:
                self._view.tick()
                if self._view.stop_requested:
                    return
            now = time.monotonic()
            self._followed.refresh_changed_maps()
            self._tracker.attach_wanted()
            for pid in self._followed.exited_before(now - RETIRE_AFTER_S):
                self._symbolizer.retire(pid, functools.partial(self._forget, pid))
            if now >= next_rescan:
                full = now >= next_full_rescan
                self._tracker.refresh_all(None if full else self._sampled_since_rescan)
                self._sampled_since_rescan = set()
                if full:
                    next_full_rescan = now + MAPS_RESCAN_ALL_S
                self._followed.sweep()
                if self._unwind_tables is not None:
                    self._unwind_tables.sweep()
                next_rescan = now + MAPS_RESCAN_S
            if next_cut is not None and now >= next_trim:
                give_back_freed_memory()  # a service's RSS is what it holds, not its highest point
                next_trim = now + TRIM_HEAP_S
            if push is not None and next_cut is not None and now >= next_cut:
                cut = functools.partial(push.cut, self.profile, self._symbolizer.forget_frame_ids, time.time())
                self._symbolizer.call_in_order(cut)
                next_cut += push.options.interval_s
            if self._mode.over(self._followed):
                return
            if deadline is not None and now >= deadline:
                return

    def _say_sampling(self, force: bool) -> None:
        """The sampling line, once due: the threadpools found are probed (or
        it is late, or the sampling is over)."""
        by = self._sampling_line_by
        if by is None:
            return
        attaching = self._threadpools is not None and self._threadpools.attaching
        if force or not attaching or time.monotonic() >= by:
            self._sampling_line_by = None
            say(self._sampling_line())

    def _run_counters(self) -> RunCounters:
        assert self._program is not None
        counters = self._program.maps.counters()
        cut_short = sum(count for end, count in self.profile.walk_ends.items() if end.cut_short)
        from profiler.tui.live_view import RunCounters  # noqa: PLC0415

        return RunCounters(counters.ringbuf_full + self._program.events.malformed_events, cut_short)

    def _close_view(self) -> None:
        """Give the terminal back (every way out of the run comes here)."""
        if self._view is not None:
            self._view.stop()
            self._view = None

    def _drain(self, program: BpfProgram) -> None:
        """Take what is left in the ring buffer, then let the symbolizer finish."""
        assert self._symbolizer is not None
        for _ in range(DRAIN_BATCHES):
            if not self._poll(program, 0):
                break
        self._status(f"symbolising {self._symbolizer.backlog():,} pending samples")
        self._symbolizer.finish(SYMBOLIZE_BUDGET_S, abandon=lambda: self._stop_requests >= 2)
        self.profile.losses.not_symbolised_in_time = self._symbolizer.given_up
        if self._originals is not None:
            self._originals.finish(SOURCE_MAPS_BUDGET_S, abandon=lambda: self._stop_requests >= 2)

    # Events (decoded from the ring buffer's batches, main thread) ----------

    def _poll(self, program: BpfProgram, timeout_ms: int) -> bool:
        """One batch of records; True if more may wait."""
        more = program.events.poll(timeout_ms)
        self._submit_polled_samples()
        return more

    def _report_waits_at_system_calls(self) -> None:
        """A followed thread without rseq waits: its waits are walked at
        system calls' returns (a cost to every system call on the machine)."""
        assert self._program is not None
        error = self._program.report_waits_at_system_calls()
        if error < 0:
            line = (
                f"cannot attach to the raw tracepoint sys_exit ({os.strerror(-error)}): the waits of threads without "
                "rseq (Go or musl programs) are counted in time but have no stack"
            )
            warn(line)
            self._said_during_run.append(f"{WARNING}{line}")

    def _submit_polled_samples(self) -> None:
        if self._polled_samples:
            assert self._symbolizer is not None
            # Far behind (an event storm: 1,000 threads waking each other),
            # samples are counted lost here rather than kept waiting in memory.
            if self._symbolizer.backlog() > MAX_BACKLOG:
                self.profile.losses.backlog_full += len(self._polled_samples)
            else:
                self._symbolizer.submit(self._polled_samples)
            self._polled_samples = []

    def _handle_event(self, event: RawSample | ProcessEvent) -> None:
        assert self._symbolizer is not None and self._followed is not None
        if isinstance(event, RawSample):
            if is_wait_record(event) and not within_run(event, self.profile.info.started_ns):
                return
            if self._followed.wants_samples_of(event.pid):
                self._sampled_since_rescan.add(event.pid)
                self._symbolizer.note(event)
                self._polled_samples.append(event)
            return
        if event.event_type in (EventType.THREAD_WAITS, EventType.THREAD_RUNNABLE, EventType.WORK_STARTED):
            if self._followed.wants_samples_of(event.pid):
                record = work_started_record if event.event_type is EventType.WORK_STARTED else thread_waits_record
                sample = record(event)
                if within_run(sample, self.profile.info.started_ns):
                    self._polled_samples.append(sample)
            return
        if event.event_type is EventType.WAITS_WITHOUT_RSEQ:
            self._report_waits_at_system_calls()
            return
        self._submit_polled_samples()  # what a process event leads to comes after the samples before it
        self._followed.handle(event)

    def _request_stop(self, signum: int, _frame: object) -> None:
        self._stop_signal = signum
        self._stop_requests += 1

    # The end ---------------------------------------------------------------

    def _add_unreported_waits(self, program: BpfProgram) -> None:
        """--off-cpu: the waits the kernel held as sampling stopped (short
        ones not reported yet, and waits still going on) join the profile, so
        a thread's time adds up to its wall time."""
        assert self._followed is not None
        ended_ns = self.profile.info.ended_ns
        assert self._symbolizer is not None
        recorder = self._symbolizer.waits
        if recorder is None:
            return
        for waits in self._waits_at_end:
            if not self._followed.wants_samples_of(waits.pid):
                continue
            comm = comm_of(waits.tid) or comm_of(waits.pid)
            # A wait ended but not reported yet has no stack: its thread had not come back from the kernel.
            record = RawSample(
                waits.pid,
                waits.tid,
                0,
                ended_ns,
                comm,
                (),
                WalkEnd.COMPLETE,
                -1,
                False,
                off_cpu_ns=waits.waited_ns,
                short_wait_ns=waits.short_wait_ns,
                short_waits=waits.short_waits,
                stack_moved=True,
                time_only=True,
                runnable_ns=waits.runnable_ns
                + (ended_ns - waits.left_ns if waits.runnable and 0 < waits.left_ns < ended_ns else 0),
            )
            recorder.add(record, None)
            if waits.left_ns and not waits.runnable and ended_ns > waits.left_ns:
                recorder.add_still_waiting(waits.pid, waits.tid, comm, ended_ns, ended_ns - waits.left_ns)
        self.profile.waits.untracked = program.maps.counters().off_cpu_untracked

    def _count_losses(self, program: BpfProgram) -> None:
        counters = program.maps.counters()
        losses = self.profile.losses
        losses.ringbuf_full = counters.ringbuf_full
        losses.malformed = program.events.malformed_events
        losses.kernel_stack_failed = counters.kernel_stack_failed
        losses.process_events_lost = counters.events_lost
        self.profile.traffic = program.events.traffic

    def _finish_outputs(self) -> Summary:
        # With --push the samples went with their intervals: the processes are those followed.
        processes = self._followed.followed_total if self.options.push is not None and self._followed is not None else None
        if self.options.push is not None and not self.options.outputs:
            return Summary.of(self.profile, [], processes)
        default_name = (
            "all" if self.options.all_processes else self.profile.info.pids[0] if self.profile.info.pids else os.getpid()
        )
        requests = self.options.outputs or [OutputRequest(Path(f"jitprof-{default_name}.svg"), "svg")]
        shown = with_originals(self.profile)
        if self.options.js_only:
            shown = registry.language_view(shown)
        if self.options.group_by:
            shown = grouped_by(shown, self.options.group_by)
        return Summary.of(self.profile, write_outputs(self.profile, requests, output_owner(self.environ), shown), processes)

    def _forget(self, pid: int) -> None:
        """(On the symbolizer thread.) An exited process's files and state go."""
        assert self._jit_sources is not None and self._tracker is not None and self._followed is not None
        self._jit_sources.forget(pid, self._run_as_uid if self._removes_jit_files() else None)
        self._tracker.forget(pid)
        self._followed.forget(pid)
        if self._threadpools is not None:
            self._threadpools.detach(pid)
        if self._push is not None:
            self._push.apps.forget(pid)

    def _removes_jit_files(self) -> bool:
        """Did jitprof make the programs write perf maps and V8 logs (so it removes them)?"""
        return self._inject and not self.options.keep_jit_files and self._run_as_uid is not None

    def _remove_jit_files(self) -> None:
        """Perf maps exist because jitprof asked for them: remove them."""
        if self.options.keep_jit_files or self._jit_sources is None:
            return
        self._jit_sources.remove_asked_files()  # asked for when attached too
        if not self._removes_jit_files():
            return
        assert self._followed is not None and self._run_as_uid is not None
        self._jit_sources.remove_files(self._run_as_uid, self._followed.seen)

    def _stop_unwind_tables(self, tables: UnwindTableStore) -> None:
        tables.stop()
        if tables.stats.skipped_at_exit:
            say(
                f"jitprof: note: unwind tables of {tables.stats.skipped_at_exit} files were not finished in time; "
                "a later run builds the rest"
            )

    def _problems(self) -> list[str]:
        """The warnings, notes and hints said after the summary: files
        refused, code unnamed, stacks cut short, each with what to do."""
        assert self._tracker is not None and self._symbolizer is not None
        lines = self._jit_sources.end_messages(self.profile) if self._jit_sources is not None else []
        lines += self._labels.warnings() if self._labels is not None else []
        if self._originals is not None:
            lines += [f"{WARNING}{problem}" for problem in self._originals.problems]
        return (
            lines
            + loss_reasons(self.profile.losses)
            + tracking_problems(
                self._tracker,
                self._unwind_tables.stats if self._unwind_tables is not None else None,
                self._symbolizer.errors,
                self._symbolizer.elf.naming_failures(),
            )
        )

    def _status(self, message: str) -> None:
        if sys.stderr.isatty():
            say(f"jitprof: {message}…")
