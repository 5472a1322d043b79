"""The BPF sampler loaded on a thread of its own while the rest of jitprof is
imported: the kernel's verifier takes about 0.3 s and runs without the GIL,
about as long as the imports, and both used to come one after the other
before the program's first instruction."""

from __future__ import annotations

import threading

from profiler.kernel import preflight
from profiler.kernel.bpf_program import BpfProgram, LoadOptions
from profiler.run.options import RecordingOptions


class ProgramLoading:
    def __init__(self, options: RecordingOptions) -> None:
        preflight.check_all()  # not root, no tracefs: said first, as before any load
        self._load_options = LoadOptions(options.frequency_hz, options.kernel_stacks, options.dwarf, options.off_cpu)
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
