"""Compile (or load from the cache) bpf/sampler.bpf.c, attach it to the
CPU-clock perf events and tracepoints, and detach it at the end. Its maps
are kernel_maps.KernelMaps (`.maps`), its ring buffer
event_stream.EventStream (`.events`)."""

from __future__ import annotations

import errno
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiler.errors import JitprofError
from profiler.kernel import bpf_calls, bpf_object, preflight
from profiler.kernel.event_stream import EventStream
from profiler.kernel.kernel_btf import task_offsets, task_rseq_offset, thread_pointer_offset
from profiler.kernel.kernel_maps import (
    CONTEXT_READER,
    FOLLOWED_ENTRIES,
    JVM_WALKER,
    KERNEL_STACK_ENTRIES,
    OFF_CPU_THREADS,
    RINGBUF_PAGES,
    SEARCH_STEPS,
    TRIE_ENTRIES,
    UNWIND_ROWS,
    UNWIND_TABLES,
    KernelMaps,
)
from profiler.kernel.kernel_symbols import KernelSymbols
from profiler.kernel.mapping_records import MappingRecords
from profiler.kernel.trie import MAX_PROVISIONAL_LENGTH
from profiler.safety import limits

BPF_DIRECTORY = Path(__file__).resolve().parents[2] / "bpf"
BPF_SOURCE = BPF_DIRECTORY / "sampler.bpf.c"

FRAMES_PER_CALL = 4  # frames per tail call of the walker: 32 calls cover MAX_FRAMES (the kernel allows 33)
# The most stack a deferred sample carries (the copy stops where the stack's
# memory does): node 20's main thread is 5 KiB deep at the median of its
# samples, 11 KiB at the 99th percentile, 22 KiB at the 99.9th (startup and
# workload.js); perf --call-graph dwarf copies 8 KiB. The walk's per-CPU
# scratch, which holds the copy, must stay under 32 KiB.
STACK_COPY_BYTES = 27088  # 26.5 KiB (jitprof_abi.h)
WALKER_PROGRAM = 0
COPIER_PROGRAM = 1
ASYNC_PROGRAM = 2  # reads a V8 sample's async callers, then sends it
CONTEXT_PROGRAM = 3  # reads a V8 sample's context (its request), then walks
JVM_WALKER_PROGRAM = 4  # the walker with HotSpot's steps, for JVMs
# Programs loaded the first time a process needs them (each 0.1-0.2 s of the
# verifier's time): by kind, their names' prefix and tail-call slot. Until
# then, a tail call to their empty slot falls through to what comes after.
LATER_PROGRAMS = {
    JVM_WALKER: ("walk_jvm_stack", JVM_WALKER_PROGRAM),
    CONTEXT_READER: ("read_sample_context", CONTEXT_PROGRAM),
}


@dataclass(frozen=True)
class LoadOptions:
    """What the sampler is loaded with for one run."""

    frequency_hz: int
    kernel_stacks: bool
    dwarf: bool = True
    off_cpu: bool = False
    # Load V8's context reader with the rest; else the first time a process needs it
    # (LATER_PROGRAMS). Not compiled in: the object is the same.
    context_reader_at_start: bool = True
    # New executable mappings from the kernel's mapping records; else (or where
    # they cannot be had) from the mmap and mprotect system calls' tracepoints.
    mapping_records: bool = True


def compile_flags(options: LoadOptions) -> list[str]:
    """The -D flags: the sizes of maps and the walk's settings (the records'
    own numbers are in jitprof_abi.h)."""
    cflags = [
        f"-DTRIE_ENTRIES={TRIE_ENTRIES}",
        f"-DFOLLOWED_ENTRIES={FOLLOWED_ENTRIES}",
        f"-DKERNEL_STACK_ENTRIES={KERNEL_STACK_ENTRIES}",
        f"-DRINGBUF_PAGES={RINGBUF_PAGES}",
        f"-DFRAMES_PER_CALL={FRAMES_PER_CALL}",
        f"-DMAX_PROVISIONAL_LENGTH={MAX_PROVISIONAL_LENGTH}ULL",
    ]
    if options.kernel_stacks:
        cflags.append("-DWITH_KERNEL_STACKS")
    thread_pointer_at = thread_pointer_offset()
    if thread_pointer_at is not None:  # OpenTelemetry thread contexts are read from it
        cflags.append(f"-DTASK_FSBASE_OFFSET={thread_pointer_at}")
    if options.off_cpu:
        pid_offset, flags_offset = task_offsets()
        cflags += [
            "-DWITH_OFF_CPU",
            f"-DOFF_CPU_THREADS={OFF_CPU_THREADS}",
            f"-DTASK_PID_OFFSET={pid_offset}",
            f"-DTASK_FLAGS_OFFSET={flags_offset}",
        ]
        rseq_offset = task_rseq_offset()
        if rseq_offset is not None:
            cflags.append(f"-DTASK_RSEQ_OFFSET={rseq_offset}")
    if options.dwarf:
        cflags += [
            "-DWITH_DWARF",
            f"-DUNWIND_ROWS={UNWIND_ROWS}",
            f"-DUNWIND_TABLES={UNWIND_TABLES}",
            f"-DSEARCH_STEPS={SEARCH_STEPS}",
        ]
    return cflags


def bpf_source() -> bytes:
    """What the compiled program is made of (its cache key): the program and the headers it includes."""
    headers = sorted(BPF_DIRECTORY.glob("*.h"))
    return b"\0".join([BPF_SOURCE.read_bytes(), *(header.name.encode() + b"\0" + header.read_bytes() for header in headers)])


# The program's parts, one concern each (bpf/*.bpf.h), are put into one text
# for BCC: it rewrites map calls (map.lookup(...)) in its main file only.
_PART = re.compile(rb'^#include "([a-z0-9_]+\.bpf\.h)"$', re.MULTILINE)


def program_text() -> bytes:
    """bpf/sampler.bpf.c with its parts in place, each marked with #line for the compiler's messages."""
    main = BPF_SOURCE.read_bytes()
    pieces: list[bytes] = []
    position = 0
    for found in _PART.finditer(main):
        pieces.append(main[position : found.start()])
        part = (BPF_DIRECTORY / found.group(1).decode()).read_bytes().replace(b"#pragma once\n", b"\n", 1)
        line_after = main.count(b"\n", 0, found.end()) + 2
        pieces.append(b'#line 1 "%s"\n%s\n#line %d "sampler.bpf.c"' % (found.group(1), part, line_after))
        position = found.end()
    pieces.append(main[position:])
    return b"".join(pieces)


def compile_object(bcc: Any, cflags: list[str]) -> bpf_object.BpfObject:
    """bpf/sampler.bpf.c compiled by BCC (seconds: clang and LLVM)."""
    try:
        compiled = bcc.BPF(text=program_text(), cflags=[*cflags, f"-I{BPF_DIRECTORY}"])
    except Exception as error:  # BCC raises bare Exception for compile and load errors
        raise _explain_load_failure(error) from error
    try:
        return bpf_object.from_bcc_module(compiled.module)
    finally:
        compiled.cleanup()


# The system calls whose tracepoints tell new executable mappings where the
# kernel's mapping records cannot be had (bpf/process_events.bpf.h;
# profiler/kernel/mapping_records.py).
MAPPING_CALLS = {f"sys_{edge}_{call}" for edge in ("enter", "exit") for call in ("mmap", "mprotect", "pkey_mprotect")}
# --off-cpu: where a thread back from a wait is walked (bpf/off_cpu.bpf.h).
RSEQ_UPDATE = "rseq_update"
SYSTEM_CALL_EXIT = "sys_exit"
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CPU_CLOCK = 0


class BpfProgram:
    """The loaded sampler: its own maps and programs, by descriptor. Not
    thread-safe except where noted."""

    def __init__(self, options: LoadOptions, maps_created: Callable[[], None] = lambda: None) -> None:
        self.options = options
        cflags = compile_flags(options)
        self.compiled_now = False
        spec = self._compiled(cflags)
        # Later kinds whose programs were loaded (or refused), and why those refused are.
        self._later_tried: set[str] = {CONTEXT_READER} if options.context_reader_at_start else set()
        self._later_problems: dict[str, str] = {}

        # New executable mappings: from the kernel's records, or where they
        # cannot be had from the system calls' tracepoints (then loaded).
        try:
            self.mapping_records = MappingRecords(_online_cpus()) if options.mapping_records else None
        except OSError:
            self.mapping_records = None

        def later(name: str) -> bool:
            if self.mapping_records is not None and _watches_mapping_calls(name):
                return True  # never loaded
            return any(kind not in self._later_tried and _of_kind(name, kind) for kind in LATER_PROGRAMS)

        try:
            try:
                self._loaded = bpf_object.load(spec, later=later, maps_created=maps_created)
            except bpf_object.BpfLoadError as error:
                if self.compiled_now or error.out_of_resources or error.interrupted:
                    raise _explain_load_failure(error) from error
                # A kept object this kernel refuses: compile afresh, once.
                spec = self._compiled(cflags, use_cache=False)
                try:
                    self._loaded = bpf_object.load(spec, later=later, maps_created=maps_created)
                except bpf_object.BpfLoadError as second_error:
                    raise _explain_load_failure(second_error) from second_error
        except BaseException:
            if self.mapping_records is not None:
                self.mapping_records.close()
            raise
        self.maps = KernelMaps(self._loaded.map_fds, self._loaded.specs, _possible_cpus())
        self.events = EventStream(self._loaded.map_fds["events"], self._loaded.specs["events"].max_entries, self.mapping_records)
        self._kernel_symbols = KernelSymbols()
        self._programs = self._loaded.program_fds
        self._perf_event_fds: list[int] = []
        self._tracepoint_fds: list[int] = []
        self._released_fds: list[int] = []  # others' perf events, closed with these (release_later)
        self.waits_at_system_calls = False  # --off-cpu: sys_exit attached
        self._rseq_compiled = any(flag.startswith("-DTASK_RSEQ_OFFSET=") for flag in cflags)
        self._spec = spec
        self._later_lock = threading.Lock()  # held while a later program loads; close() waits for it
        self._state_lock = threading.Lock()  # for _closed and _released_fds
        self._closed = False
        self._attached = False
        self.maps.load_later = self._load_later
        self.tracepoints: list[str] = []  # attached, as category:event
        self._attach_tracepoints()

    def _load_later(self, kind: str) -> str | None:
        """(Any thread.) The programs of a kind of LATER_PROGRAMS, loaded and
        installed the first time a process needs them: None, or why they
        cannot be."""
        with self._later_lock:
            if kind in self._later_tried:
                return self._later_problems.get(kind)
            if self._closed:
                return "the run is ending"
            self._later_tried.add(kind)
            names = [program.name for program in self._spec.programs if _of_kind(program.name, kind)]
            try:
                self._programs.update(bpf_object.load_programs(self._spec, self._loaded.map_fds, names))
            except bpf_object.BpfLoadError as error:
                refused = "could not verify" if error.interrupted else "refused"
                self._later_problems[kind] = f"the kernel {refused} its {kind} ({error})"
                return self._later_problems[kind]
            if self._attached:  # else attach() installs it with the rest
                self._install(kind)
            return None

    def _install(self, kind: str) -> None:
        """A later kind's programs in their slots (of the sampler's walk, and of --off-cpu's)."""
        prefix, slot = LATER_PROGRAMS[kind]
        self.maps.install_walkers({slot: self._programs[prefix]})
        if self.options.off_cpu:
            for suffix in ("off_cpu", "uprobe"):
                name = f"{prefix}_{suffix}"
                if name in self._programs:
                    self.maps.install_walkers({slot: self._programs[name]}, f"{suffix}_walkers")

    def _compiled(self, cflags: list[str], use_cache: bool = True) -> bpf_object.BpfObject:
        """The object kept by set-up or an earlier run, or compiled by BCC
        now (and kept). Only then is BCC loaded."""
        key = bpf_object.object_key(bpf_source(), cflags)
        cached = bpf_object.load_cached(key) if use_cache else None
        if cached is not None:
            return cached
        spec = compile_object(preflight.import_bcc(), cflags)
        bpf_object.store(key, spec)
        self.compiled_now = True
        return spec

    def _attach_tracepoints(self) -> None:
        """Follow forks, execs, exits and executable mappings from now on
        (with --off-cpu, switches and threads' returns to user space too)."""
        rseq_reports = False
        # Raw tracepoints first: where both kinds share an event (a thread's
        # exit), the kernel runs its programs in the order they were attached.
        raw_first = sorted(self._programs.items(), key=lambda item: not item[0].startswith(bpf_object.RAW_TRACEPOINT_PREFIX))
        for name, descriptor in raw_first:
            if name.startswith(bpf_object.RAW_TRACEPOINT_PREFIX):
                event = name[len(bpf_object.RAW_TRACEPOINT_PREFIX) :]
                if event == SYSTEM_CALL_EXIT:
                    continue  # only when a thread without rseq waits, or rseq_update cannot be had
                if event == RSEQ_UPDATE:
                    rseq_reports = self._rseq_compiled and self._attach_raw(event, descriptor) >= 0
                    continue
                self._raw_attached_or_fail(event, self._attach_raw(event, descriptor))
                continue
            if not name.startswith(bpf_object.TRACEPOINT_PREFIX):
                continue
            category, _, event = name[len(bpf_object.TRACEPOINT_PREFIX) :].partition("__")
            self.tracepoints.append(f"{category}:{event}")
            perf_fd = bpf_calls.attach_tracepoint(descriptor, category, event)
            if perf_fd < 0:
                self.close()
                raise JitprofError(
                    f"cannot attach to the tracepoint {category}:{event}",
                    "jitprof needs tracefs and the syscall tracepoints (CONFIG_FTRACE_SYSCALLS)",
                )
            self._tracepoint_fds.append(perf_fd)
        if self.options.off_cpu and not rseq_reports:
            self._raw_attached_or_fail(SYSTEM_CALL_EXIT, self.report_waits_at_system_calls())

    def _raw_attached_or_fail(self, event: str, link: int) -> None:
        if link < 0:
            self.close()
            raise JitprofError(
                f"cannot attach to the raw tracepoint {event}: {os.strerror(-link)}",
                "--off-cpu needs raw tracepoints (Linux 4.17 or later, CONFIG_BPF_EVENTS)",
            )

    def _attach_raw(self, event: str, descriptor: int) -> int:
        link = bpf_calls.attach_raw_tracepoint(descriptor, event)
        if link >= 0:
            self._tracepoint_fds.append(link)
        return link

    def report_waits_at_system_calls(self) -> int:
        """--off-cpu: report waits at every system call's return too, for
        threads that do not pass rseq_update (no rseq registered). Costs every
        system call on the machine a program run. 0, or -errno. (Main thread.)"""
        if self.waits_at_system_calls:
            return 0
        link = self._attach_raw(SYSTEM_CALL_EXIT, self._programs[bpf_object.RAW_TRACEPOINT_PREFIX + SYSTEM_CALL_EXIT])
        self.waits_at_system_calls = link >= 0
        return min(link, 0)

    def attach(self) -> None:
        """Install the stack walker, then attach the sampler on every online CPU."""
        self.maps.install_walkers(
            {
                WALKER_PROGRAM: self._programs["walk_user_stack"],
                COPIER_PROGRAM: self._programs["copy_user_stack"],
                ASYNC_PROGRAM: self._programs["read_async_callers"],
            }
        )
        if self.options.off_cpu:
            for suffix in ("off_cpu", "uprobe"):
                self.maps.install_walkers(
                    {
                        WALKER_PROGRAM: self._programs[f"walk_user_stack_{suffix}"],
                        COPIER_PROGRAM: self._programs[f"copy_user_stack_{suffix}"],
                        ASYNC_PROGRAM: self._programs[f"read_async_callers_{suffix}"],
                    },
                    f"{suffix}_walkers",
                )
        with self._later_lock:
            self._attached = True
            for kind in self._later_tried - self._later_problems.keys():
                self._install(kind)
        sampler = self._programs["on_cpu_sample"]
        for cpu in _online_cpus():
            descriptor = bpf_calls.attach_perf_event(
                sampler, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, self.options.frequency_hz, cpu
            )
            if descriptor < 0:
                self.stop_sampling()
                raise JitprofError(
                    f"cannot attach perf events on CPU {cpu}",
                    "jitprof needs perf events (CONFIG_PERF_EVENTS) and CAP_PERFMON or root",
                )
            self._perf_event_fds.append(descriptor)

    def attach_uprobe(self, program: str, path: str, offset: int, pid: int) -> int:
        """One of the program's uprobe programs at a file offset, for process
        pid alone: the perf event's descriptor (the caller closes it), or -errno."""
        return bpf_calls.attach_uprobe(self._programs[program], path, offset, pid)

    def release_later(self, descriptors: list[int]) -> None:
        """(Any thread.) Perf events attached through attach_uprobe, closed
        with the program's own (in close()), whose release waits for RCU
        grace periods; at once if the program is closed already."""
        with self._state_lock:
            if not self._closed:
                self._released_fds.extend(descriptors)
                return
        self.close_perf_events(descriptors)

    @staticmethod
    def close_perf_events(descriptors: list[int]) -> None:
        """(Any thread.) Perf events closed now, side by side: each release
        may wait for RCU grace periods, and waiting together they share them."""
        _close_perf_events(list(descriptors))

    def stop_sampling(self) -> None:
        """Stop sampling and following at once: no more samples or process
        events come (the programs find no followed pid). The events
        themselves are closed by close()."""
        self.maps.follow_nothing()

    def close(self, in_background: bool = False) -> None:
        """Detach everything and free the maps. The kernel's side of a
        detach waits for RCU grace periods (0.1-0.4 s for all the events,
        closed side by side); in_background hands the last references to a
        short-lived child process that closes them, so the run ends now."""
        self.stop_sampling()
        # Not while a later program is verified: its instructions name the maps by descriptor.
        with self._later_lock, self._state_lock:
            self._closed = True
            released, self._released_fds = self._released_fds, []
        self.events.close()
        records = self.mapping_records.let_go() if self.mapping_records is not None else []
        self.mapping_records = self.events.mapping_records = None
        events = self._perf_event_fds + self._tracepoint_fds + released + records
        self._perf_event_fds, self._tracepoint_fds = [], []
        if in_background and events:
            _release_in_child([*events, *self._loaded.map_fds.values(), *self._loaded.program_fds.values()])
            self._loaded.map_fds.clear()
            self._loaded.program_fds.clear()
        else:
            _close_perf_events(events)
        self._loaded.close()

    def kernel_symbol(self, address: int) -> str:
        """(Symbolizer thread.) The kernel function at address, or ""."""
        return self._kernel_symbols.name(address)


def _watches_mapping_calls(name: str) -> bool:
    """Is this a program of a mapping system call's tracepoint?"""
    return name.startswith(f"{bpf_object.TRACEPOINT_PREFIX}syscalls__") and name.split("__")[-1] in MAPPING_CALLS


def _of_kind(name: str, kind: str) -> bool:
    """Is this program one of a later kind's (a perf event's, a wait's or a uprobe's)?"""
    return name.startswith(LATER_PROGRAMS[kind][0])


def _release_in_child(descriptors: list[int]) -> None:
    """Fork a child that keeps only these descriptors and closes them once
    this process has let go of its own copies (so the child's are the last,
    and the kernel's slow release happens there). It holds nothing else:
    no pipe a reader waits on, no terminal."""
    ready_read, ready_write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(ready_write)
            keep = set(descriptors) | {ready_read}
            null = os.open(os.devnull, os.O_RDWR)
            for standard in (0, 1, 2):
                os.dup2(null, standard)
            for descriptor in range(3, _max_descriptor() + 1):
                if descriptor not in keep:
                    try:
                        os.close(descriptor)
                    except OSError:
                        pass
            os.setsid()
            os.read(ready_read, 1)  # end of file: the parent's copies are closed
        finally:
            os._exit(0)
    os.close(ready_read)
    for descriptor in descriptors:
        try:
            os.close(descriptor)
        except OSError:
            pass
    os.close(ready_write)


def _max_descriptor() -> int:
    try:
        return max(int(name) for name in os.listdir("/proc/self/fd"))
    except (OSError, ValueError):
        return 1024


def _close_perf_events(descriptors: list[int]) -> None:
    closers = [threading.Thread(target=_close_quietly, args=(descriptor,)) for descriptor in descriptors]
    for closer in closers:
        closer.start()
    for closer in closers:
        closer.join()
    descriptors.clear()


def _close_quietly(descriptor: int) -> None:
    try:
        os.close(descriptor)
    except OSError:
        pass


def _cpu_list(path: str) -> list[int]:
    """CPUs of a kernel cpu list file ("0-3,6")."""
    try:
        text = open(path, encoding="ascii").read().strip()
    except OSError:
        return list(range(os.cpu_count() or 1))
    cpus: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def _online_cpus() -> list[int]:
    return _cpu_list("/sys/devices/system/cpu/online")


def _possible_cpus() -> int:
    return max(_cpu_list("/sys/devices/system/cpu/possible")) + 1


def _explain_load_failure(error: Exception) -> JitprofError:
    text = str(error)
    lowered = text.lower()
    first_line = text.splitlines()[0] if text else type(error).__name__
    limited = limits.describe_limits()
    if limited:
        return JitprofError(f"cannot load the BPF program: {first_line}", f"{limited}: raise it and run again")
    if isinstance(error, bpf_object.BpfLoadError) and error.interrupted:
        return JitprofError(
            f"the kernel's verifier could not finish checking the BPF program: {first_line}",
            "something keeps signalling or stopping jitprof (a debugger, or a profiler sampling it such as py-spy); "
            "run it again without that",
        )
    if "operation not permitted" in lowered or f"errno {errno.EPERM}" in lowered:
        return JitprofError(
            "the kernel refused to load the BPF program (operation not permitted)",
            "jitprof needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN); run as root outside restricted containers",
        )
    if "function not implemented" in lowered or "not supported" in lowered:
        return JitprofError(
            "this kernel does not support BPF",
            "a kernel with CONFIG_BPF_SYSCALL and CONFIG_BPF_EVENTS is needed",
        )
    if "failed to load bpf program" in lowered:
        return JitprofError(
            f"the kernel's verifier rejected the BPF program: {first_line}",
            "this is a jitprof bug on this kernel; please report it with `uname -r`, or try --no-dwarf",
        )
    if "failed to compile" in lowered or "no such file" in lowered:
        return JitprofError(
            f"BCC could not compile the sampler: {first_line}",
            "check the kernel headers (`make setup`) and BCC installation",
        )
    return JitprofError(f"cannot load the BPF program: {first_line}", "run `make setup`; see docs/limits.md")
