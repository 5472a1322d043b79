"""Compile and load bpf/sampler.bpf.c with BCC; own its maps and perf events."""

from __future__ import annotations

import ctypes
import errno
import mmap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from profiler.errors import JitprofError
from profiler.kernel import preflight
from profiler.kernel.events import COUNTER_COUNT, MAX_FRAMES, Counter, MalformedEvent, ProcessEvent, RawSample, decode_event
from profiler.kernel.trie import MAX_PROVISIONAL_LENGTH, TriePrefix

BPF_SOURCE = Path(__file__).resolve().parents[2] / "bpf" / "sampler.bpf.c"

TRIE_ENTRIES = 131072  # a mapping takes 1 to ~60 prefixes
FOLLOWED_ENTRIES = 16384
KERNEL_STACK_ENTRIES = 16384
RINGBUF_PAGES = 1024  # 4 MiB: about 4000 samples in flight
UNWIND_ROWS = 1 << 21  # 32 MiB of rows: node (≈ 400 k) plus every library of a busy process
UNWIND_TABLES = 4096
SEARCH_STEPS = 22  # ceil(log2(UNWIND_ROWS)) + 1
UNWIND_ROW_SIZE = 16
FRAMES_PER_CALL = 8  # frames per tail call of the walker: 16 calls cover MAX_FRAMES

CONSUME_BUDGET_S = 0.2  # the longest one poll spends taking records

MAPPING_ELF = 1
MAPPING_JIT = 2


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


class BpfProgram:
    """The loaded sampler. Not thread-safe except where noted."""

    def __init__(self, options: LoadOptions) -> None:
        self.options = options
        bcc = preflight.import_bcc()
        self._bcc = bcc
        cflags = [
            f"-DMAX_FRAMES={MAX_FRAMES}",
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
        try:
            self._bpf = bcc.BPF(src_file=str(BPF_SOURCE).encode(), cflags=cflags)
        except Exception as error:  # BCC raises bare Exception for compile and load errors
            raise _explain_load_failure(error) from error
        self._followed = self._bpf["followed"]
        self._trie = self._bpf["mappings"]
        self._counters = self._bpf["counters"]
        self._attached = False
        self._handlers: list[Callable[[RawSample | ProcessEvent], None]] = []
        self.malformed_events = 0
        self._consume_until = 0.0

    def attach(self) -> None:
        """Install the stack walker, then attach the sampler on every online CPU."""
        bcc = self._bcc
        try:
            walker = self._bpf.load_func(b"walk_user_stack", bcc.BPF.PERF_EVENT)
        except Exception as error:
            raise _explain_load_failure(error) from error
        self._bpf["stack_walkers"][ctypes.c_int(0)] = ctypes.c_int(walker.fd)
        try:
            self._bpf.attach_perf_event(
                ev_type=bcc.PerfType.SOFTWARE,
                ev_config=bcc.PerfSWConfig.CPU_CLOCK,
                fn_name=b"on_cpu_sample",
                sample_freq=self.options.frequency_hz,
                cpu=-1,
            )
        except Exception as error:
            raise JitprofError(
                f"cannot attach perf events: {error}",
                "jitprof needs perf events (CONFIG_PERF_EVENTS) and CAP_PERFMON or root",
            ) from error
        self._attached = True

    def detach(self) -> None:
        if self._attached:
            self._bpf.detach_perf_event(
                ev_type=self._bcc.PerfType.SOFTWARE, ev_config=self._bcc.PerfSWConfig.CPU_CLOCK
            )
            self._attached = False

    def close(self) -> None:
        """Detach everything and free the maps. Each tracepoint detach waits
        for an RCU grace period in the kernel (about 70 ms): they are done
        side by side, not one after another (ctypes lets go of the GIL)."""
        self.detach()
        tracepoints = list(self._bpf.tracepoint_fds)
        detachers = [threading.Thread(target=self._detach_tracepoint, args=(name,)) for name in tracepoints]
        for detacher in detachers:
            detacher.start()
        for detacher in detachers:
            detacher.join()
        self._bpf.cleanup()

    def _detach_tracepoint(self, name: bytes) -> None:
        try:
            self._bpf.detach_tracepoint(name)
        except Exception:  # noqa: BLE001  (cleanup() tries again for any left attached)
            pass

    # Followed processes -------------------------------------------------

    def follow(self, pid: int) -> None:
        self._followed[ctypes.c_uint32(pid)] = ctypes.c_uint8(1)

    def unfollow(self, pid: int) -> None:
        try:
            del self._followed[ctypes.c_uint32(pid)]
        except KeyError:
            pass

    # Mapping trie --------------------------------------------------------

    def add_prefixes(self, prefixes: list[TriePrefix], kind: int, load_bias: int, table_id: int = 0) -> int:
        """Insert prefixes; returns how many did not fit (the trie is full)."""
        rejected = 0
        for prefix in prefixes:
            key = self._trie.Key()
            key.prefixlen = prefix.prefix_len
            key.pid_be, key.address_be = prefix.key_fields()
            leaf = self._trie.Leaf()
            leaf.kind = kind
            leaf.table_id = table_id
            leaf.load_bias = load_bias & 0xFFFFFFFFFFFFFFFF
            try:
                self._trie[key] = leaf
            except Exception:  # BCC raises Exception with errno text when the map is full
                rejected += 1
        return rejected

    def remove_prefixes(self, prefixes: list[TriePrefix]) -> None:
        for prefix in prefixes:
            key = self._trie.Key()
            key.prefixlen = prefix.prefix_len
            key.pid_be, key.address_be = prefix.key_fields()
            try:
                del self._trie[key]
            except KeyError:
                pass

    # Unwind tables -------------------------------------------------------

    def unwind_rows_memory(self) -> mmap.mmap:
        """The row array, mapped into this process for bulk writes."""
        descriptor = self._bpf["unwind_rows"].map_fd
        return mmap.mmap(descriptor, UNWIND_ROWS * UNWIND_ROW_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def publish_unwind_table(self, table_id: int, first_row: int, row_count: int) -> None:
        tables = self._bpf["unwind_tables"]
        leaf = tables.Leaf()
        leaf.first_row = first_row
        leaf.row_count = row_count
        tables[ctypes.c_int(table_id)] = leaf

    # Events --------------------------------------------------------------

    def on_event(self, handler: Callable[[RawSample | ProcessEvent], None]) -> None:
        self._handlers.append(handler)
        if len(self._handlers) == 1:
            self._bpf["events"].open_ring_buffer(self._dispatch)

    def _dispatch(self, _ctx: int, data: int, size: int) -> int:
        try:
            event = decode_event(data, size)
        except MalformedEvent:
            self.malformed_events += 1
        else:
            for handler in self._handlers:
                handler(event)
        # A negative answer stops libbpf's consume loop (this record counts as
        # taken): a storm of events cannot keep the loop from -d and signals.
        return -1 if time.monotonic() > self._consume_until else 0

    def poll(self, timeout_ms: int, budget_s: float = CONSUME_BUDGET_S) -> None:
        """Wait for a process event or the timeout, then take records for at
        most budget_s; what is left waits for the next poll."""
        self._consume_until = time.monotonic() + timeout_ms / 1000 + budget_s
        self._bpf.ring_buffer_poll(timeout_ms)
        self._consume_until = time.monotonic() + budget_s
        self._bpf.ring_buffer_consume()

    def counters(self) -> KernelCounters:
        totals = [0] * COUNTER_COUNT
        for index in range(COUNTER_COUNT):
            per_cpu = self._counters[ctypes.c_int(index)]
            totals[index] = sum(int(value) for value in per_cpu)
        return KernelCounters(
            samples=totals[Counter.SAMPLES],
            ringbuf_full=totals[Counter.RINGBUF_FULL],
            kernel_stack_failed=totals[Counter.KSTACK_FAILED],
            events_lost=totals[Counter.EVENTS_LOST],
        )

    # Kernel stacks (called from the symbolizer thread) ------------------

    def kernel_stack(self, stack_id: int) -> list[int]:
        """Kernel addresses of a stack id, leaf first; [] if it was evicted."""
        if stack_id < 0:
            return []
        try:
            return [address for address in self._bpf["kernel_stacks"].walk(stack_id) if address]
        except KeyError:
            return []

    def kernel_symbol(self, address: int) -> str:
        name = self._bcc.BPF.ksym(address, show_module=False, show_offset=False)
        return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)


def _explain_load_failure(error: Exception) -> JitprofError:
    text = str(error)
    lowered = text.lower()
    first_line = text.splitlines()[0] if text else type(error).__name__
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
