"""Compile and load bpf/sampler.bpf.c with BCC; own its maps and perf events."""

from __future__ import annotations

import ctypes
import errno
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from profiler import preflight
from profiler.errors import JitprofError
from profiler.events import COUNTER_COUNT, MAX_FRAMES, Counter, MalformedEvent, ProcessEvent, RawSample, decode_event
from profiler.trie import TriePrefix

BPF_SOURCE = Path(__file__).resolve().parent.parent / "bpf" / "sampler.bpf.c"

TRIE_ENTRIES = 262144
FOLLOWED_ENTRIES = 16384
KERNEL_STACK_ENTRIES = 16384
RINGBUF_PAGES = 1024  # 4 MiB: about 4000 samples in flight

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
        ]
        if options.kernel_stacks:
            cflags.append("-DWITH_KERNEL_STACKS")
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

    def attach(self) -> None:
        """Attach the CPU-clock sampler on every online CPU."""
        bcc = self._bcc
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
        self.detach()
        self._bpf.cleanup()

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

    # Events --------------------------------------------------------------

    def on_event(self, handler: Callable[[RawSample | ProcessEvent], None]) -> None:
        self._handlers.append(handler)
        if len(self._handlers) == 1:
            self._bpf["events"].open_ring_buffer(self._dispatch)

    def _dispatch(self, _ctx: int, data: int, size: int) -> None:
        try:
            event = decode_event(data, size)
        except MalformedEvent:
            self.malformed_events += 1
            return
        for handler in self._handlers:
            handler(event)

    def poll(self, timeout_ms: int) -> None:
        """Wait for a process event or the timeout, then take every record."""
        self._bpf.ring_buffer_poll(timeout_ms)
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
    if "operation not permitted" in lowered or f"errno {errno.EPERM}" in lowered or "permission" in lowered:
        return JitprofError(
            "the kernel refused to load the BPF program (operation not permitted)",
            "jitprof needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN); run as root outside restricted containers",
        )
    if "function not implemented" in lowered or "not supported" in lowered:
        return JitprofError(
            "this kernel does not support BPF",
            "a kernel with CONFIG_BPF_SYSCALL and CONFIG_BPF_EVENTS is needed",
        )
    if "failed to compile" in lowered or "no such file" in lowered:
        return JitprofError(
            f"BCC could not compile the sampler: {text.splitlines()[0] if text else 'unknown error'}",
            "check the kernel headers (`make setup`) and BCC installation",
        )
    first_line = text.splitlines()[0] if text else type(error).__name__
    return JitprofError(f"cannot load the BPF program: {first_line}", "run `make setup`; see README, Known limits")
