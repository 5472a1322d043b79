"""The sampler's maps, as user space reads and writes them: which processes
are followed, the mapping trie, the unwind tables, the counters and the
kernel stacks. Each run creates its own maps (kernel/bpf_object)."""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from profiler.kernel import bpf_calls
from profiler.kernel.events import COUNTER_COUNT, Counter
from profiler.kernel.trie import TriePrefix

TRIE_ENTRIES = 131072  # a mapping takes 1 to ~60 prefixes
FOLLOWED_ENTRIES = 16384
KERNEL_STACK_ENTRIES = 16384
RINGBUF_PAGES = 1024  # 4 MiB: about 4000 samples in flight
UNWIND_ROWS = 1 << 21  # 32 MiB of rows: node (≈ 400 k) plus every library of a busy process
UNWIND_TABLES = 4096
SEARCH_STEPS = 22  # ceil(log2(UNWIND_ROWS)) + 1
OFF_CPU_THREADS = 65536  # --off-cpu: threads of followed processes timed at once (72 bytes each)
UNWIND_ROW_SIZE = 16
BPF_ANY = 0
BPF_NOEXIST = 1


@dataclass(frozen=True)
class KernelCounters:
    """The kernel side's counters, summed over the CPUs."""

    samples: int
    ringbuf_full: int
    kernel_stack_failed: int
    events_lost: int
    off_cpu_untracked: int = 0


@dataclass(frozen=True)
class UnreportedWaits:
    """--off-cpu: what a thread's entry holds at the end of a run: waits
    not reported yet, and the one it is in (left_ns, 0: none)."""

    pid: int
    tid: int
    short_wait_ns: int
    short_waits: int
    waited_ns: int
    left_ns: int
    runnable_ns: int
    runnable: bool  # since left_ns: preempted, not waiting


class _TrieKey(ctypes.Structure):
    _fields_ = [("prefixlen", ctypes.c_uint32), ("pid_be", ctypes.c_uint32), ("address_be", ctypes.c_uint64)]


class _MappingInfo(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_uint32), ("table_id", ctypes.c_uint32), ("load_bias", ctypes.c_uint64)]


class _V8Process(ctypes.Structure):
    _fields_ = [
        ("builtins_start", ctypes.c_uint64),
        ("builtins_end", ctypes.c_uint64),
        ("copy_start", ctypes.c_uint64),
        ("copy_end", ctypes.c_uint64),
        ("function_window", ctypes.c_uint32),
        ("shared_at", ctypes.c_uint8),
        ("code_at", ctypes.c_uint8),
        ("kind", ctypes.c_uint16),
    ]


V8_CONTEXT_MAPS = 4
V8_STORE_FIELDS = 3


class _V8ContextConfig(ctypes.Structure):
    _fields_ = [
        ("isolate_tls", ctypes.c_int64),
        ("cped_offset", ctypes.c_uint32),
        ("js_map_type", ctypes.c_uint16),
        ("first_nonstring_type", ctypes.c_uint16),
        ("map_type_at", ctypes.c_uint8),
        ("string_tag_mask", ctypes.c_uint8),
        ("seq_one_byte_tag", ctypes.c_uint8),
        ("sliced_one_byte_tag", ctypes.c_uint8),
        ("string_length_at", ctypes.c_uint8),
        ("string_chars_at", ctypes.c_uint8),
        ("sliced_parent_at", ctypes.c_uint8),
        ("sliced_offset_at", ctypes.c_uint8),
        ("store_key", ctypes.c_uint64),
        ("span_key", ctypes.c_uint64),
        ("context_maps", ctypes.c_uint64 * V8_CONTEXT_MAPS),
        ("context_map_at", ctypes.c_uint16 * V8_CONTEXT_MAPS),
        ("span_maps", ctypes.c_uint64 * V8_CONTEXT_MAPS),
        ("span_context_at", ctypes.c_uint16 * V8_CONTEXT_MAPS),
        ("span_context_maps", ctypes.c_uint64 * V8_CONTEXT_MAPS),
        ("trace_id_at", ctypes.c_uint16 * V8_CONTEXT_MAPS),
        ("span_id_at", ctypes.c_uint16 * V8_CONTEXT_MAPS),
        ("attributes_at", ctypes.c_uint16 * V8_CONTEXT_MAPS),
        ("span_name_at", ctypes.c_uint16 * V8_CONTEXT_MAPS),
        ("attributes_maps", ctypes.c_uint64 * V8_CONTEXT_MAPS),
        ("route_at", ctypes.c_uint16 * V8_CONTEXT_MAPS),
        ("label_store_key", ctypes.c_uint64),
        ("label_store_maps", ctypes.c_uint64 * V8_CONTEXT_MAPS),
        ("label_store_at", (ctypes.c_uint16 * V8_STORE_FIELDS) * V8_CONTEXT_MAPS),
        ("heap_number_type", ctypes.c_uint16),
        ("learning", ctypes.c_uint8),
        ("thin_one_byte_tag", ctypes.c_uint8),
        ("thin_actual_at", ctypes.c_uint8),
        ("cons_one_byte_tag", ctypes.c_uint8),
        ("cons_first_at", ctypes.c_uint8),
        ("reserved", ctypes.c_uint8),
    ]


V8_ASYNC_BUILTINS = 16


class _V8AsyncConfig(ctypes.Structure):
    _fields_ = [
        ("isolate_tls", ctypes.c_int64),
        ("microtask_at", ctypes.c_uint32),
        ("function_types", ctypes.c_uint16 * 2),
        ("fulfill_job_type", ctypes.c_uint16),
        ("reject_job_type", ctypes.c_uint16),
        ("promise_type", ctypes.c_uint16),
        ("reaction_type", ctypes.c_uint16),
        ("async_function_type", ctypes.c_uint16),
        ("async_generator_type", ctypes.c_uint16),
        ("request_type", ctypes.c_uint16),
        ("capability_type", ctypes.c_uint16),
        ("native_context_type", ctypes.c_uint16),
        ("builtin_ids", ctypes.c_uint16 * V8_ASYNC_BUILTINS),
        ("builtin_roles", ctypes.c_uint8 * V8_ASYNC_BUILTINS),
        ("map_type_at", ctypes.c_uint8),
        ("function_shared_at", ctypes.c_uint8),
        ("function_context_at", ctypes.c_uint8),
        ("shared_builtin_at", ctypes.c_uint8),
        ("task_handler_at", ctypes.c_uint8),
        ("task_promise_at", ctypes.c_uint8),
        ("reaction_next_at", ctypes.c_uint8),
        ("reaction_reject_at", ctypes.c_uint8),
        ("reaction_fulfill_at", ctypes.c_uint8),
        ("reaction_promise_at", ctypes.c_uint8),
        ("promise_reactions_at", ctypes.c_uint8),
        ("promise_flags_at", ctypes.c_uint8),
        ("generator_function_at", ctypes.c_uint8),
        ("generator_position_at", ctypes.c_uint8),
        ("generator_continuation_at", ctypes.c_uint8),
        ("generator_promise_at", ctypes.c_uint8),
        ("generator_queue_at", ctypes.c_uint8),
        ("request_promise_at", ctypes.c_uint8),
        ("capability_promise_at", ctypes.c_uint8),
        ("context_extension_at", ctypes.c_uint8),
        ("combinator_capability_at", ctypes.c_uint8),
        ("resolve_promise_at", ctypes.c_uint8),
        ("properties_at", ctypes.c_uint8),
        ("reserved", ctypes.c_uint8 * 3),
    ]


RUNTIME_V8 = 0
RUNTIME_HOTSPOT = 1
# Kinds of the program's programs loaded the first time a process needs them.
JVM_WALKER = "JVM walker"
CONTEXT_READER = "context reader"
HOTSPOT_CODE_HEAPS = 3
HOTSPOT_BLOB_HEADER_BYTES = 64


class _HotSpotCode(ctypes.Structure):
    _fields_ = [
        ("heap_low", ctypes.c_uint64 * HOTSPOT_CODE_HEAPS),
        ("heap_high", ctypes.c_uint64 * HOTSPOT_CODE_HEAPS),
        ("segmap", ctypes.c_uint64 * HOTSPOT_CODE_HEAPS),
        ("log2_segment", ctypes.c_uint32),
        ("block_header", ctypes.c_uint16),
        ("frame_size_at", ctypes.c_uint8),
        ("frame_complete_at", ctypes.c_uint8),
        ("code_begin_at", ctypes.c_uint8),
        ("code_begin_offset", ctypes.c_uint8),
        ("frame_complete_bytes", ctypes.c_uint8),
        ("frame_pointers", ctypes.c_uint8),
        ("name_at", ctypes.c_uint16),
        ("reserved", ctypes.c_uint8 * 2),
    ]


@dataclass(frozen=True)
class HotSpotCode:
    """What the kernel needs to step over a JVM's compiled frames by their
    size: its code heaps (low, high, segment map), their segment size, and
    where a blob keeps its frame size, frame-complete offset and code start."""

    heaps: tuple[tuple[int, int, int], ...]
    log2_segment: int
    block_header: int
    frame_size_at: int
    frame_complete_at: int
    frame_complete_bytes: int  # 2 or 4
    code_begin_at: int
    code_begin_is_offset: bool
    frame_pointers: bool = False  # the JVM keeps them: only a leaf in a prologue or epilogue is stepped by its blob
    name_at: int = 0  # CodeBlob::_name: the kernel tells the stubs that keep no frame by their name; 0: not read


class _OffCpuThread(ctypes.Structure):
    _fields_ = [
        ("left_ns", ctypes.c_uint64),
        ("waited_ns", ctypes.c_uint64),
        ("short_wait_ns", ctypes.c_uint64),
        ("wait_pc", ctypes.c_uint64),
        ("wait_sp", ctypes.c_uint64),
        ("short_waits", ctypes.c_uint32),
        ("kernel_stack_id", ctypes.c_int32),
        ("tgid", ctypes.c_uint32),
        ("runnable", ctypes.c_uint32),
        ("runnable_ns", ctypes.c_uint64),
        ("without_rseq_since", ctypes.c_uint64),
        ("walk_runnable", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class _TrieGeneration(ctypes.Structure):
    _fields_ = [("kernel", ctypes.c_uint32), ("user", ctypes.c_uint32)]


class _UnwindTable(ctypes.Structure):
    _fields_ = [("first_row", ctypes.c_uint32), ("row_count", ctypes.c_uint32)]


class KernelMaps:
    """Not thread-safe except where noted."""

    def __init__(self, map_fds: dict[str, int], map_specs: dict[str, Any], possible_cpus: int) -> None:
        self._maps = map_fds
        self._specs = map_specs
        self._possible_cpus = possible_cpus
        # Set by the program: a kind of its programs loaded late (once); why not, if it cannot be.
        self.load_later: Callable[[str], str | None] = lambda _kind: None
        self._trie_changes = 0

    def hotspot_walker_problem(self) -> str | None:
        """(Any thread.) Why the kernel cannot walk a JVM's frames as HotSpot
        says, or None: it can (its walker is loaded now if it was not). A
        JVM is told to the kernel only after this."""
        return self.load_later(JVM_WALKER)

    def context_reader_problem(self) -> str | None:
        """(Any thread.) Why the kernel cannot read a node's async context at
        its samples, or None: it can (its reader is loaded now if it was
        not). A node's context settings are given only after this."""
        return self.load_later(CONTEXT_READER)

    def install_walkers(self, programs: dict[int, int], array: str = "stack_walkers") -> None:
        """The walker's tail-call slots: index -> program descriptor."""
        for index, descriptor in programs.items():
            self._update(self._maps[array], ctypes.c_int(index), ctypes.c_int(descriptor))

    def set_shortest_wait(self, nanoseconds: int) -> None:
        """--off-cpu: waits shorter than this are counted, not recorded one by one."""
        self._update(self._maps["off_cpu_settings"], ctypes.c_uint32(0), ctypes.c_uint64(nanoseconds))

    def unreported_waits(self) -> list[UnreportedWaits]:
        """--off-cpu: every timed thread's waits not reported yet."""
        table = self._maps.get("off_cpu_threads")
        if table is None:
            return []
        found: list[UnreportedWaits] = []
        key, next_key, value = ctypes.c_uint32(0), ctypes.c_uint32(0), _OffCpuThread()
        pointer: Any = None
        while len(found) <= OFF_CPU_THREADS and bpf_calls.next_key(table, pointer, ctypes.byref(next_key)):
            if bpf_calls.lookup(table, ctypes.byref(next_key), ctypes.byref(value)):
                found.append(
                    UnreportedWaits(
                        value.tgid,
                        next_key.value,
                        value.short_wait_ns,
                        value.short_waits,
                        value.waited_ns,
                        value.left_ns,
                        value.runnable_ns,
                        bool(value.runnable),
                    )
                )
            key.value = next_key.value
            pointer = ctypes.byref(key)
        return found

    def _update(self, map_fd: int, key: ctypes._CData, value: ctypes._CData, flags: int = BPF_ANY) -> bool:
        return bpf_calls.update(map_fd, ctypes.byref(key), ctypes.byref(value), flags)

    def _delete(self, map_fd: int, key: ctypes._CData) -> None:
        bpf_calls.delete(map_fd, ctypes.byref(key))

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
        for name in (
            "followed",
            "maps_read",
            "fork_parents",
            "maps_stale",
            "v8_processes",
            "hotspot_code",
            "thread_context_offsets",
            "v8_context_settings",
        ):
            self._delete(self._maps[name], ctypes.c_uint32(pid))

    def set_thread_context(self, pid: int, offset: int) -> bool:
        """pid's threads keep a pointer to their OpenTelemetry context record
        at offset from their thread pointer: its samples carry the record."""
        return self._update(self._maps["thread_context_offsets"], ctypes.c_uint32(pid), ctypes.c_int64(offset))

    def clear_thread_context(self, pid: int) -> None:
        self._delete(self._maps["thread_context_offsets"], ctypes.c_uint32(pid))

    def set_v8_context(self, pid: int, config: dict[str, object]) -> bool:
        """pid's node threads have their AsyncLocalStorage read at each
        sample as config says (struct v8_context_config's fields by name;
        the arrays as sequences of V8_CONTEXT_MAPS)."""
        value = _V8ContextConfig()
        for name, given in config.items():
            field = getattr(value, name)
            if isinstance(field, ctypes.Array):
                for index, item in enumerate(list(given)[:V8_CONTEXT_MAPS]):  # type: ignore[call-overload]
                    if isinstance(field[index], ctypes.Array):  # a row of label_store_at
                        for column, slot in enumerate(list(item)[:V8_STORE_FIELDS]):
                            field[index][column] = slot
                    else:
                        field[index] = item
            else:
                setattr(value, name, given)
        return self._update(self._maps["v8_context_settings"], ctypes.c_uint32(pid), value)

    def clear_v8_context(self, pid: int) -> None:
        self._delete(self._maps["v8_context_settings"], ctypes.c_uint32(pid))

    def set_v8_async(self, pid: int, config: dict[str, int | tuple[int, ...]]) -> bool:
        """pid's samples carry the async functions awaiting the running one,
        read as config says (struct v8_async_config's fields by name)."""
        value = _V8AsyncConfig()
        for name, given in config.items():
            field = getattr(value, name)
            if isinstance(field, ctypes.Array):
                assert isinstance(given, tuple) and len(given) <= len(field), name
                for index, item in enumerate(given):
                    field[index] = item
            else:
                setattr(value, name, given)
        return self._update(self._maps["v8_async_settings"], ctypes.c_uint32(pid), value)

    def clear_v8_async(self, pid: int) -> None:
        self._delete(self._maps["v8_async_settings"], ctypes.c_uint32(pid))

    def set_v8_process(
        self, pid: int, builtins: list[tuple[int, int]], function_window: int, shared_at: int, code_at: int
    ) -> bool:
        """pid runs V8 with its builtins at these [start, end) of its address
        space (one or two), its JSFunctions' shared info and code at
        function_window + shared_at and + code_at: its JS frames are sent
        with what identifies them."""
        (start, end), (copy_start, copy_end) = builtins[0], (builtins[1:] or [(0, 0)])[0]
        value = _V8Process(start, end, copy_start, copy_end, function_window, shared_at, code_at, RUNTIME_V8)
        return self._update(self._maps["v8_processes"], ctypes.c_uint32(pid), value)

    def set_hotspot_process(self, pid: int, interpreter: tuple[int, int], gc_count_at: int) -> bool:
        """pid runs HotSpot with its template interpreter at [start, end):
        its interpreted frames are sent with their Method* and bytecode
        pointer, and the JVM's count of what may unload classes (the u32 at
        gc_count_at: its collections or safepoints; 0: none)."""
        value = _V8Process(interpreter[0], interpreter[1], gc_count_at, 0, 0, 0, 0, RUNTIME_HOTSPOT)
        return self._update(self._maps["v8_processes"], ctypes.c_uint32(pid), value)

    def clear_v8_process(self, pid: int) -> None:
        self._delete(self._maps["v8_processes"], ctypes.c_uint32(pid))
        self._delete(self._maps["hotspot_code"], ctypes.c_uint32(pid))

    def set_hotspot_code(self, pid: int, code: HotSpotCode) -> bool:
        """pid's JVM keeps no frame pointers in its compiled code: the kernel
        steps over those frames by their size. False when the layout does not
        fit what the kernel reads (a field past the blob's first 64 bytes)."""
        fields = (code.frame_size_at, code.frame_complete_at, code.code_begin_at)
        if not code.heaps or len(code.heaps) > HOTSPOT_CODE_HEAPS or not 4 <= code.log2_segment <= 16:
            return False
        if any(not 0 <= at <= HOTSPOT_BLOB_HEADER_BYTES - 8 for at in fields) or not 0 <= code.block_header <= 256:
            return False
        if code.frame_complete_bytes not in (2, 4) or code.frame_complete_at % code.frame_complete_bytes:
            return False
        value = _HotSpotCode()
        for index, (low, high, segmap) in enumerate(code.heaps):
            value.heap_low[index], value.heap_high[index], value.segmap[index] = low, high, segmap
        value.log2_segment, value.block_header = code.log2_segment, code.block_header
        value.frame_size_at, value.frame_complete_at, value.code_begin_at = fields
        value.code_begin_offset = int(code.code_begin_is_offset)
        value.frame_complete_bytes = code.frame_complete_bytes
        value.frame_pointers = int(code.frame_pointers)
        if 0 < code.name_at <= 1024 - 8:
            value.name_at = code.name_at
        return self._update(self._maps["hotspot_code"], ctypes.c_uint32(pid), value)

    def begin_maps_read(self, pid: int) -> int | None:
        """pid's maps are about to be read: changes from now on are news (the
        kernel sends the next maps-changed event). Returns how many times it
        has exec'd since it was followed (None: not followed)."""
        self._delete(self._maps["maps_stale"], ctypes.c_uint32(pid))
        return self.exec_count(pid)

    def exec_count(self, pid: int) -> int | None:
        """How many times pid has exec'd since it was followed (None: not followed)."""
        value = ctypes.c_uint32()
        if not bpf_calls.lookup(self._maps["followed"], ctypes.byref(ctypes.c_uint32(pid)), ctypes.byref(value)):
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
        if rejected < len(prefixes):
            self._trie_changed()
        return rejected

    def remove_prefixes(self, prefixes: list[TriePrefix]) -> None:
        trie = self._maps["mappings"]
        for prefix in prefixes:
            pid_be, address_be = prefix.key_fields()
            self._delete(trie, _TrieKey(prefix.prefix_len, pid_be, address_be))
        if prefixes:
            self._trie_changed()

    def _trie_changed(self) -> None:
        """After the trie changed, and only then: the walkers' known frames
        from before, every CPU's, are let go. Our count is new each time; the
        kernel's, written back as read, may lose a step the kernel took
        meanwhile, but ours alone makes the pair one the walkers have not seen."""
        generations = self._maps.get("trie_generations")
        if generations is None:
            return
        value = _TrieGeneration()
        if not bpf_calls.lookup(generations, ctypes.byref(ctypes.c_uint32(0)), ctypes.byref(value)):
            return
        self._trie_changes = (self._trie_changes + 1) & 0xFFFFFFFF
        value.user = self._trie_changes
        self._update(generations, ctypes.c_uint32(0), value)

    # Unwind tables -------------------------------------------------------

    def write_unwind_rows(self, first_row: int, packed: bytes) -> None:
        """Packed rows into the row array from first_row, through a mapping of
        just their pages, let go at once: a mapped BPF array is resident in
        full while the mapping lasts, and its 32 MiB would count in this
        process's memory as well as the kernel's."""
        start = first_row * UNWIND_ROW_SIZE
        end = start + len(packed)
        if first_row < 0 or end > UNWIND_ROWS * UNWIND_ROW_SIZE:
            raise ValueError(f"rows {first_row}+{len(packed) // UNWIND_ROW_SIZE} beyond the array")
        if not packed:
            return
        window_start = start - start % mmap.ALLOCATIONGRANULARITY
        with mmap.mmap(
            self._maps["unwind_rows"],
            end - window_start,
            mmap.MAP_SHARED,
            mmap.PROT_READ | mmap.PROT_WRITE,
            offset=window_start,
        ) as window:
            window[start - window_start :] = packed

    def publish_unwind_table(self, table_id: int, first_row: int, row_count: int) -> None:
        """A live table, or (TABLE_PENDING, 0) for one being built, or (0, 0): none."""
        self._update(self._maps["unwind_tables"], ctypes.c_uint32(table_id), _UnwindTable(first_row, row_count))

    def followed_pids(self) -> list[int]:
        """The followed map's keys: processes, and threads until their fork
        event is read."""
        followed = self._maps.get("followed")
        if followed is None:
            return []
        key, next_key = ctypes.c_uint32(), ctypes.c_uint32()
        pids: list[int] = []
        pointer = None
        while bpf_calls.next_key(followed, pointer, ctypes.byref(next_key)):
            pids.append(next_key.value)
            key.value = next_key.value
            pointer = ctypes.byref(key)
        return pids

    def trie_entries(self) -> list[tuple[TriePrefix, int]]:
        """Every entry of the mapping trie, with its kind (for tests and benchmarks)."""
        trie = self._maps["mappings"]
        key, next_key, value = _TrieKey(), _TrieKey(), _MappingInfo()
        entries: list[tuple[TriePrefix, int]] = []
        pointer = None
        while bpf_calls.next_key(trie, pointer, ctypes.byref(next_key)):
            if bpf_calls.lookup(trie, ctypes.byref(next_key), ctypes.byref(value)):
                pid = int.from_bytes(next_key.pid_be.to_bytes(4, "little"), "big")
                address = int.from_bytes(next_key.address_be.to_bytes(8, "little"), "big")
                entries.append((TriePrefix(pid, address, next_key.prefixlen), value.kind))
            ctypes.memmove(ctypes.byref(key), ctypes.byref(next_key), ctypes.sizeof(key))
            pointer = ctypes.byref(key)
        return entries

    def follow_nothing(self) -> None:
        """No more samples or process events from now on (the programs check these maps)."""
        followed = self._maps.get("followed")
        if followed is None:
            return
        self._update(self._maps["settings"], ctypes.c_uint32(0), ctypes.c_uint32(0))
        for pid in self.followed_pids():
            self._delete(followed, ctypes.c_uint32(pid))

    def counters(self) -> KernelCounters:
        totals = [0] * COUNTER_COUNT
        per_cpu = (ctypes.c_uint64 * self._possible_cpus)()
        for index in range(COUNTER_COUNT):
            if bpf_calls.lookup(self._maps["counters"], ctypes.byref(ctypes.c_int(index)), per_cpu):
                totals[index] = sum(per_cpu)
        return KernelCounters(
            samples=totals[Counter.SAMPLES],
            ringbuf_full=totals[Counter.RINGBUF_FULL],
            kernel_stack_failed=totals[Counter.KSTACK_FAILED],
            events_lost=totals[Counter.EVENTS_LOST],
            off_cpu_untracked=totals[Counter.OFF_CPU_UNTRACKED],
        )

    # Kernel stacks (called from the symbolizer thread) ------------------

    def kernel_stack(self, stack_id: int) -> list[int]:
        """Kernel addresses of a stack id, leaf first; [] if it was evicted."""
        if stack_id < 0 or "kernel_stacks" not in self._maps:
            return []
        depth = self._specs["kernel_stacks"].value_size // 8
        addresses = (ctypes.c_uint64 * depth)()
        if not bpf_calls.lookup(self._maps["kernel_stacks"], ctypes.byref(ctypes.c_uint32(stack_id)), addresses):
            return []
        return [address for address in addresses if address]
