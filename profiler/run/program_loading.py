"""The BPF sampler loaded on a thread of its own while the rest of jitprof is
imported: the kernel's verifier takes about 0.3 s and runs without the GIL,
about as long as the imports, and both used to come one after the other
before the program's first instruction."""

from __future__ import annotations

import os
import threading

from profiler.errors import JitprofError
from profiler.kernel import preflight
from profiler.kernel.bpf_program import BpfProgram, LoadOptions
from profiler.labels import context_reader_memo
from profiler.run.options import RecordingOptions
from profiler.run.targets import find_command


class ProgramLoading:
    def __init__(self, options: RecordingOptions) -> None:
        preflight.check_all()  # not root, no tracefs: said first, as before any load
        self._load_options = load_options(options)
        self._program: BpfProgram | None = None
        self._error: BaseException | None = None
        self._taken = False
        self._maps_created = threading.Event()
        self._thread = threading.Thread(target=self._load, name="jitprof-bpf-load", daemon=True)
        self._thread.start()
        # The maps are made in some forty system calls, each giving up the
        # GIL: beside the imports, each waited for it (30 ms where 9 do).
        self._maps_created.wait()

    def _load(self) -> None:
        try:
            self._program = BpfProgram(self._load_options, maps_created=self._maps_created.set)
        except BaseException as error:  # raised again on the main thread, where it is said
            self._error = error
        finally:
            self._maps_created.set()

    def program(self) -> BpfProgram:
        """The loaded program (waiting for it); its load's error raised here."""
        self._thread.join()
        self._taken = True
        if self._error is not None:
            raise self._error
        assert self._program is not None
        return self._program

    def discard(self) -> None:
        """The run ended before it took the program: let the kernel's state go."""
        if self._taken:
            return
        self._thread.join()
        self._taken = True
        if self._program is not None:
            self._program.close()


def load_options(options: RecordingOptions) -> LoadOptions:
    """What the BPF program is loaded with for a run asked for so."""
    return LoadOptions(
        options.frequency_hz,
        options.kernel_stacks,
        options.dwarf,
        options.off_cpu,
        context_reader_at_start=context_reader_wanted_at_start(options),
    )


def context_reader_wanted_at_start(options: RecordingOptions) -> bool:
    """Load V8's context reader with the rest of the program? Yes, unless
    labels are off or each program the run starts with is known (from an
    earlier run) to have no async context frames, as node 20 has none;
    then it is loaded if a node that has them comes (0.1 s of the verifier
    then, not at every start)."""
    if not options.labels:
        return False
    if options.all_processes:
        return True
    executables = _started_with(options)
    return executables is None or any(context_reader_memo.may_need(path) for path in executables)


def remember_reader_needed(options: RecordingOptions) -> None:
    """(At the end of a run that saw its programs through.) Keep, for the
    programs it started with, whether the run needed the reader: only
    node's own executable was remembered, so a bun's, a JVM's or a native
    program's every run verified it at start (0.12 s of the verifier,
    beside a program that may use every CPU)."""
    if not options.labels or options.all_processes:
        return
    for path in _started_with(options) or []:
        try:
            context_reader_memo.remember_started(os.stat(path))
        except OSError:
            pass


def _started_with(options: RecordingOptions) -> list[str] | None:
    """The executables of the processes a run starts with (None: not known)."""
    if options.pids:
        return [f"/proc/{pid}/exe" for pid in options.pids]
    try:
        return [find_command(options.command[0], os.environ.get("PATH", os.defpath))]
    except (JitprofError, IndexError):
        return None  # said when it is spawned
