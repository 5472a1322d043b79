"""Compile and load bpf/sampler.bpf.c with BCC; own its maps and perf events."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiler.errors import JitprofError
from profiler.kernel import bpf_object, preflight
from profiler.kernel.events import (
    COUNTER_COUNT,
    Counter,
    KernelTraffic,
    MalformedEvent,
    ProcessEvent,
    RawSample,
    decode_event,
)
from profiler.kernel.trie import MAX_PROVISIONAL_LENGTH, TriePrefix
from profiler.safety import limits

BPF_DIRECTORY = Path(__file__).resolve().parents[2] / "bpf"
BPF_SOURCE = BPF_DIRECTORY / "sampler.bpf.c"

TRIE_ENTRIES = 131072  # a mapping takes 1 to ~60 prefixes
FOLLOWED_ENTRIES = 16384
KERNEL_STACK_ENTRIES = 16384
RINGBUF_PAGES = 1024  # 4 MiB: about 4000 samples in flight
UNWIND_ROWS = 1 << 21  # 32 MiB of rows: node (≈ 400 k) plus every library of a busy process
UNWIND_TABLES = 4096
SEARCH_STEPS = 22  # ceil(log2(UNWIND_ROWS)) + 1
UNWIND_ROW_SIZE = 16
FRAMES_PER_CALL = 8  # frames per tail call of the walker: 16 calls cover MAX_FRAMES
# The most stack a deferred sample carries (the copy stops where the stack's
# memory does): node 20's main thread is 5 KiB deep at the median of its
# samples, 11 KiB at the 99th percentile, 22 KiB at the 99.9th (startup and
# workload.js); perf --call-graph dwarf copies 8 KiB. The walk's per-CPU
# scratch, which holds the copy, must stay under 32 KiB.
STACK_COPY_BYTES = 28 << 10  # (jitprof_abi.h)
WALKER_PROGRAM = 0
COPIER_PROGRAM = 1

CONSUME_BUDGET_S = 0.2  # the longest one poll spends taking records


@dataclass(frozen=True)
class KernelCounters:
    samples: int
    ringbuf_full: int
    kernel_stack_failed: int
    events_lost: int


@dataclass(frozen=True)
class LoadOptions:
    frequency_hz: int
    kernel_stacks: bool
    dwarf: bool = True


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


def compile_object(bcc: Any, cflags: list[str]) -> bpf_object.BpfObject:
    """bpf/sampler.bpf.c compiled by BCC (seconds: clang and LLVM)."""
    try:
        compiled = bcc.BPF(text=BPF_SOURCE.read_bytes(), cflags=[*cflags, f"-I{BPF_DIRECTORY}"])
    except Exception as error:  # BCC raises bare Exception for compile and load errors
        raise _explain_load_failure(error) from error
    try:
        return bpf_object.from_bcc_module(compiled.module)
    finally:
        compiled.cleanup()


class _TrieKey(ctypes.Structure):
    _fields_ = [("prefixlen", ctypes.c_uint32), ("pid_be", ctypes.c_uint32), ("address_be", ctypes.c_uint64)]


class _MappingInfo(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_uint32), ("table_id", ctypes.c_uint32), ("load_bias", ctypes.c_uint64)]


class _UnwindTable(ctypes.Structure):
    _fields_ = [("first_row", ctypes.c_uint32), ("row_count", ctypes.c_uint32)]


BPF_ANY = 0
BPF_NOEXIST = 1
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CPU_CLOCK = 0


class BpfProgram:
    """The loaded sampler: its own maps and programs, by descriptor. Not
    thread-safe except where noted."""

    def __init__(self, options: LoadOptions) -> None:
        self.options = options
        bcc = preflight.import_bcc()
        self._bcc = bcc
        self._lib = bpf_object.load_library()
        cflags = compile_flags(options)
        self.compiled_now = False
        spec = self._compiled(cflags)
        try:
            self._loaded = bpf_object.load(spec)
        except bpf_object.BpfLoadError as error:
            if self.compiled_now:
                raise _explain_load_failure(error) from error
            # A kept object this kernel refuses: compile afresh, once.
            try:
                self._loaded = bpf_object.load(self._compiled(cflags, use_cache=False))
            except bpf_object.BpfLoadError as second_error:
                raise _explain_load_failure(second_error) from second_error
        self._maps = self._loaded.map_fds
        self._programs = self._loaded.program_fds
        self._perf_event_fds: list[int] = []
        self._tracepoint_fds: list[int] = []
        self._ring: int | None = None
        self._ring_callback: Any = None
        self._handlers: list[Callable[[RawSample | ProcessEvent], None]] = []
        self.malformed_events = 0
        self.traffic = KernelTraffic()
        self._consume_until = 0.0
        self._possible_cpus = _possible_cpus()
        self._attach_tracepoints()

    def _compiled(self, cflags: list[str], use_cache: bool = True) -> bpf_object.BpfObject:
        """The object kept by set-up or an earlier run, or compiled by BCC
        now (and kept)."""
        key = bpf_object.object_key(bpf_source(), cflags)
        cached = bpf_object.load_cached(key) if use_cache else None
        if cached is not None:
            return cached
        spec = compile_object(self._bcc, cflags)
        bpf_object.store(key, spec)
        self.compiled_now = True
        return spec

    def _attach_tracepoints(self) -> None:
        """Follow forks, execs, exits and executable mappings from now on."""
        for name, descriptor in self._programs.items():
            if not name.startswith(bpf_object.TRACEPOINT_PREFIX):
                continue
            category, _, event = name[len(bpf_object.TRACEPOINT_PREFIX) :].partition("__")
            perf_fd = self._lib.bpf_attach_tracepoint(descriptor, category.encode(), event.encode())
            if perf_fd < 0:
                self.close()
                raise JitprofError(
                    f"cannot attach to the tracepoint {category}:{event}",
                    "jitprof needs tracefs and the syscall tracepoints (CONFIG_FTRACE_SYSCALLS)",
                )
            self._tracepoint_fds.append(perf_fd)

    def attach(self) -> None:
        """Install the stack walker, then attach the sampler on every online CPU."""
        walkers = self._maps["stack_walkers"]
        self._update(walkers, ctypes.c_int(WALKER_PROGRAM), ctypes.c_int(self._programs["walk_user_stack"]))
        self._update(walkers, ctypes.c_int(COPIER_PROGRAM), ctypes.c_int(self._programs["copy_user_stack"]))
        sampler = self._programs["on_cpu_sample"]
        for cpu in _online_cpus():
            descriptor = self._lib.bpf_attach_perf_event(
                sampler, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, 0, self.options.frequency_hz, -1, cpu, -1
            )
            if descriptor < 0:
                self.stop_sampling()
                raise JitprofError(
                    f"cannot attach perf events on CPU {cpu}",
                    "jitprof needs perf events (CONFIG_PERF_EVENTS) and CAP_PERFMON or root",
                )
            self._perf_event_fds.append(descriptor)

    def stop_sampling(self) -> None:
        """Stop sampling and following at once: no more samples or process
        events come (the programs find no followed pid). The events
        themselves are closed by close()."""
        self.follow_nothing()

    def followed_pids(self) -> list[int]:
        """The followed map's keys: processes, and threads until their fork
        event is read."""
        followed = self._maps.get("followed")
        if followed is None:
            return []
        key, next_key = ctypes.c_uint32(), ctypes.c_uint32()
        pids: list[int] = []
        pointer = None
        while self._lib.bpf_get_next_key(followed, pointer, ctypes.byref(next_key)) == 0:
            pids.append(next_key.value)
            key.value = next_key.value
            pointer = ctypes.byref(key)
        return pids

    def follow_nothing(self) -> None:
        """No more samples or process events from now on (the programs check these maps)."""
        followed = self._maps.get("followed")
        if followed is None:
            return
        self._update(self._maps["settings"], ctypes.c_uint32(0), ctypes.c_uint32(0))
        for pid in self.followed_pids():
            self._delete(followed, ctypes.c_uint32(pid))

    def close(self, in_background: bool = False) -> None:
        """Detach everything and free the maps. The kernel's side of a
        detach waits for RCU grace periods (0.1-0.4 s for all the events,
        closed side by side); in_background hands the last references to a
        short-lived child process that closes them, so the run ends now."""
        self.stop_sampling()
        if self._ring is not None:
            self._lib.bpf_free_ringbuf(self._ring)
            self._ring = None
        events = self._perf_event_fds + self._tracepoint_fds
        self._perf_event_fds, self._tracepoint_fds = [], []
        if in_background and events:
            _release_in_child([*events, *self._loaded.map_fds.values(), *self._loaded.program_fds.values()])
            self._loaded.map_fds.clear()
            self._loaded.program_fds.clear()
        else:
            _close_perf_events(self._lib, events)
        self._loaded.close()

    # Map access -----------------------------------------------------------

    def _update(self, map_fd: int, key: ctypes._CData, value: ctypes._CData, flags: int = BPF_ANY) -> bool:
        return self._lib.bpf_update_elem(map_fd, ctypes.byref(key), ctypes.byref(value), flags) == 0

    def _delete(self, map_fd: int, key: ctypes._CData) -> None:
        self._lib.bpf_delete_elem(map_fd, ctypes.byref(key))

    # Followed processes -------------------------------------------------

    def follow(self, pid: int) -> None:
        """Follow pid; a forked child the program follows already keeps its exec count."""
        self._update(self._maps["followed"], ctypes.c_uint32(pid), ctypes.c_uint32(0), BPF_NOEXIST)

    def follow_all(self, ignored: list[int]) -> None:
        """Every process with user code is followed from its first sample
        (a DISCOVERED event), but the ignored ones (jitprof's own)."""
        for pid in ignored:
            self.ignore(pid)
        self._update(self._maps["settings"], ctypes.c_uint32(0), ctypes.c_uint32(1))

    def ignore(self, pid: int) -> None:
        self._update(self._maps["ignored"], ctypes.c_uint32(pid), ctypes.c_uint8(1))
        self.unfollow(pid)

    def unfollow(self, pid: int) -> None:
        for name in ("followed", "maps_read", "fork_parents", "maps_stale"):
            self._delete(self._maps[name], ctypes.c_uint32(pid))

    def begin_maps_read(self, pid: int) -> int | None:
        """pid's maps are about to be read: changes from now on are news (the
        kernel sends the next maps-changed event). Returns how many times it
        has exec'd since it was followed (None: not followed)."""
        self._delete(self._maps["maps_stale"], ctypes.c_uint32(pid))
        value = ctypes.c_uint32()
        if self._lib.bpf_lookup_elem(self._maps["followed"], ctypes.byref(ctypes.c_uint32(pid)), ctypes.byref(value)) != 0:
            return None
        return value.value

    def mark_maps_read(self, pid: int, exec_count: int) -> None:
        """The trie holds pid's maps as they were after exec number exec_count:
        walks use them from now on (unless it has exec'd since)."""
        self._update(self._maps["maps_read"], ctypes.c_uint32(pid), ctypes.c_uint32(exec_count))
        self._delete(self._maps["fork_parents"], ctypes.c_uint32(pid))

    # Mapping trie --------------------------------------------------------

    def add_prefixes(self, prefixes: list[TriePrefix], kind: int, load_bias: int, table_id: int = 0) -> int:
        """Insert prefixes; returns how many did not fit (the trie is full)."""
        rejected = 0
        trie = self._maps["mappings"]
        leaf = _MappingInfo(kind, table_id, load_bias & 0xFFFFFFFFFFFFFFFF)
        for prefix in prefixes:
            pid_be, address_be = prefix.key_fields()
            if not self._update(trie, _TrieKey(prefix.prefix_len, pid_be, address_be), leaf):
                rejected += 1
        return rejected

    def remove_prefixes(self, prefixes: list[TriePrefix]) -> None:
        trie = self._maps["mappings"]
        for prefix in prefixes:
            pid_be, address_be = prefix.key_fields()
            self._delete(trie, _TrieKey(prefix.prefix_len, pid_be, address_be))

    # Unwind tables -------------------------------------------------------

    def unwind_rows_memory(self) -> mmap.mmap:
        """The row array, mapped into this process for bulk writes."""
        descriptor = self._maps["unwind_rows"]
        return mmap.mmap(descriptor, UNWIND_ROWS * UNWIND_ROW_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def publish_unwind_table(self, table_id: int, first_row: int, row_count: int) -> None:
        """A live table, or (TABLE_PENDING, 0) for one being built, or (0, 0): none."""
        self._update(self._maps["unwind_tables"], ctypes.c_uint32(table_id), _UnwindTable(first_row, row_count))

    # Events --------------------------------------------------------------

    def on_event(self, handler: Callable[[RawSample | ProcessEvent], None]) -> None:
        self._handlers.append(handler)
        if self._ring is None:
            from bcc.libbcc import _RINGBUF_CB_TYPE  # noqa: PLC0415

            self._ring_callback = _RINGBUF_CB_TYPE(self._dispatch)
            self._ring = self._lib.bpf_new_ringbuf(self._maps["events"], self._ring_callback, None)
            if not self._ring:
                raise JitprofError(
                    "cannot open the BPF ring buffer", "check `ulimit -l` (locked memory) and the kernel's BPF support"
                )

    def _dispatch(self, _ctx: int, data: int, size: int) -> int:
        traffic = self.traffic
        traffic.records += 1
        traffic.bytes += size
        try:
            event = decode_event(data, size)
        except MalformedEvent:
            self.malformed_events += 1
        else:
            if isinstance(event, RawSample):
                traffic.samples += 1
                traffic.sample_bytes += size
                if event.stack_copy is not None:
                    traffic.stack_copies += 1
                    traffic.stack_copy_bytes += len(event.stack_copy.data)
            for handler in self._handlers:
                handler(event)
        # A negative answer stops libbpf's consume loop (this record counts as
        # taken): a storm of events cannot keep the loop from -d and signals.
        return -1 if time.monotonic() > self._consume_until else 0

    def poll(self, timeout_ms: int, budget_s: float = CONSUME_BUDGET_S) -> None:
        """Wait for a process event or the timeout, then take records for at
        most budget_s; what is left waits for the next poll."""
        if self._ring is None:
            time.sleep(timeout_ms / 1000)
            return
        self._consume_until = time.monotonic() + timeout_ms / 1000 + budget_s
        self._lib.bpf_poll_ringbuf(self._ring, timeout_ms)
        self._consume_until = time.monotonic() + budget_s
        self._lib.bpf_consume_ringbuf(self._ring)

    def counters(self) -> KernelCounters:
        totals = [0] * COUNTER_COUNT
        per_cpu = (ctypes.c_uint64 * self._possible_cpus)()
        for index in range(COUNTER_COUNT):
            if self._lib.bpf_lookup_elem(self._maps["counters"], ctypes.byref(ctypes.c_int(index)), per_cpu) == 0:
                totals[index] = sum(per_cpu)
        return KernelCounters(
            samples=totals[Counter.SAMPLES],
            ringbuf_full=totals[Counter.RINGBUF_FULL],
            kernel_stack_failed=totals[Counter.KSTACK_FAILED],
            events_lost=totals[Counter.EVENTS_LOST],
        )

    # Kernel stacks (called from the symbolizer thread) ------------------

    def kernel_stack(self, stack_id: int) -> list[int]:
        """Kernel addresses of a stack id, leaf first; [] if it was evicted."""
        if stack_id < 0 or "kernel_stacks" not in self._maps:
            return []
        depth = self._loaded.specs["kernel_stacks"].value_size // 8
        addresses = (ctypes.c_uint64 * depth)()
        if self._lib.bpf_lookup_elem(self._maps["kernel_stacks"], ctypes.byref(ctypes.c_uint32(stack_id)), addresses) != 0:
            return []
        return [address for address in addresses if address]

    def kernel_symbol(self, address: int) -> str:
        name = self._bcc.BPF.ksym(address, show_module=False, show_offset=False)
        return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)


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


def _close_perf_events(lib: Any, descriptors: list[int]) -> None:
    closers = [threading.Thread(target=lib.bpf_close_perf_event_fd, args=(descriptor,)) for descriptor in descriptors]
    for closer in closers:
        closer.start()
    for closer in closers:
        closer.join()
    descriptors.clear()


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
    return JitprofError(f"cannot load the BPF program: {first_line}", "run `make setup`; see README, Known limits")
