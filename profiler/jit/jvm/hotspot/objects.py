"""HotSpot's objects read from a JVM's memory through its layout
(jit/jvm/hotspot/layout.py): a Method with its class, name, descriptor,
source file and line table; the code blob at a pc, found through the code
heaps' segment maps; an nmethod's method, compile id, tier and scope tables.

Everything read is the target's: every pointer is checked to be a
plausible address, every length capped, and a Method is believed only when
its class lists it among its methods (a Method freed by class unloading,
or a stale pointer, then reads as nothing). Nothing here caches across
calls: the caller (jvm/hotspot_source.py) decides what is still true."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from profiler.jit.jvm.hotspot import compressed, signatures
from profiler.jit.jvm.hotspot.layout import HotSpotLayout, Memory
from profiler.kernel.process_memory import USER_SPACE_END

MAX_CODE_HEAPS = 16
MAX_METHODS_PER_CLASS = 65_535
MAX_SYMBOL = 65_535
MAX_NMETHOD_TABLES = 4 << 20  # an nmethod's metadata and scope tables together (a big one has 100 KiB)
MAX_LINE_TABLE = 256 << 10
MAX_OOP_MAPS = 1 << 16  # safepoints and calls of one nmethod
# A real block is reached in a few dozen hops (each up to 254 segments);
# a map of 0x01s crafted to walk a whole heap stops here (it cost 4 ms a pc).
MAX_SEGMAP_HOPS = 1 << 10
SEGMAP_WINDOW = 4096
FREE_SEGMENT = 0xFF
HAS_LINE_TABLE = 1
NMETHOD_NAMES = frozenset({"nmethod", "native nmethod"})  # compiled Java; a native method's wrapper
_WORD = struct.Struct("<Q")
_S32 = struct.Struct("<i")
_U16 = struct.Struct("<H")


@dataclass(frozen=True)
class JavaMethod:
    klass: str  # internal form: java/util/HashMap
    name: str
    descriptor: str
    source_file: str  # "HashMap.java"; "" when the class has none (a lambda's, a generated one)
    lines: tuple[tuple[int, int], ...]  # (bytecode index, line)
    bytecode_start: int  # where its bytecodes are in the process (an interpreted frame's bcp points in)
    bytecode_size: int

    @property
    def display(self) -> str:
        return signatures.method_display(self.klass, self.name, self.descriptor)

    @property
    def first_line(self) -> int:
        return min((line for _bci, line in self.lines if line > 0), default=0)

    def line_at(self, bci: int) -> int:
        return compressed.line_of(self.lines, bci) if 0 <= bci < max(self.bytecode_size, 1) else 0


@dataclass(frozen=True)
class CodeHeap:
    low: int
    high: int
    segmap: int
    log2_segment: int


@dataclass(frozen=True)
class CodeBlob:
    address: int
    name: str
    code_begin: int
    code_end: int
    header: bytes  # the blob's first bytes (an nmethod's fields)


@dataclass(frozen=True)
class UnloadingCount:
    """Where a JVM counts what may unload classes: its 4 low bytes are sent
    with each sample's frames."""

    address: int
    # SafepointSynchronize's counter: odd while a safepoint runs, when an
    # unloading may still come before the count moves again.
    counts_safepoints: bool

    def vouches(self, value: int) -> bool:
        """Does a read of value, and the same value later, say nothing was
        unloaded in between?"""
        return not (self.counts_safepoints and value & 1)


@dataclass(frozen=True)
class CompiledCode:
    """An nmethod: its code range and what names the pcs in it."""

    blob: CodeBlob
    compile_id: int
    method: int  # its Method*
    level: int  # 1 to 3: C1; 4: C2
    on_stack_replacement: bool
    metadata: bytes  # Metadata* words; a scope's method index i is word i - 1
    scopes_data: bytes
    scopes_pcs: bytes
    # HotSpot recorded the inlined methods at every pc, not only at safepoints
    # and calls: compiled while -XX:+DebugNonSafepoints was on (or a JVMTI agent asked).
    records_every_pc: bool = False
    # The pcs (from the code's start) with an oop map: calls' return addresses,
    # and safepoint polls, whose record is at the poll instruction itself.
    safepoints: frozenset[int] = frozenset()

    def method_at(self, index: int) -> int:
        """The Method* of a scope's metadata index (0: none)."""
        start = (index - 1) * 8
        if index <= 0 or start + 8 > len(self.metadata):
            return 0
        return _WORD.unpack_from(self.metadata, start)[0]


def plausible(address: int) -> bool:
    return 0x1000 <= address < USER_SPACE_END and address % 8 == 0


class HotSpotReader:
    """Reads one JVM's objects (on its MemoryThread)."""

    def __init__(self, memory: Memory, layout: HotSpotLayout, bias: int) -> None:
        self.memory = memory
        self.layout = layout
        self.bias = bias
        self._heaps: tuple[CodeHeap, ...] | None = None
        self._names: dict[int, str | None] = {}

    # Where code is ------------------------------------------------------

    def code_heaps(self) -> tuple[CodeHeap, ...]:
        if self._heaps:
            return self._heaps
        layout = self.layout
        heaps: list[CodeHeap] = []
        array = self.memory.word(layout.code_heaps_at + self.bias)
        header = (
            self.memory.read(array, max(layout.growable_length, layout.growable_data) + 8) if array and plausible(array) else None
        )
        if header is None:
            return ()
        length = _S32.unpack_from(header, layout.growable_length)[0]
        data = _WORD.unpack_from(header, layout.growable_data)[0]
        pointers = self.memory.read(data, 8 * length) if 0 < length <= MAX_CODE_HEAPS and plausible(data) else None
        if pointers is None:
            return ()
        for (pointer,) in _WORD.iter_unpack(pointers):
            size = max(layout.heap_memory, layout.heap_segmap) + max(layout.space_low, layout.space_high) + 8
            heap = self.memory.read(pointer, max(size, layout.heap_log2_segment + 4)) if plausible(pointer) else None
            if heap is None:
                continue
            low = _WORD.unpack_from(heap, layout.heap_memory + layout.space_low)[0]
            high = _WORD.unpack_from(heap, layout.heap_memory + layout.space_high)[0]
            segmap = _WORD.unpack_from(heap, layout.heap_segmap + layout.space_low)[0]
            log2 = _S32.unpack_from(heap, layout.heap_log2_segment)[0]
            if 0 < low < high <= USER_SPACE_END and segmap and 4 <= log2 <= 16:
                heaps.append(CodeHeap(low, high, segmap, log2))
        self._heaps = tuple(heaps)
        return self._heaps

    def interpreter_range(self) -> tuple[int, int] | None:
        """Where the template interpreter's code is: [start, end)."""
        layout = self.layout
        queue = self.memory.word(layout.interpreter_code_at + self.bias)
        data = (
            self.memory.read(queue, max(layout.stub_buffer, layout.stub_buffer_limit) + 8) if queue and plausible(queue) else None
        )
        if data is None:
            return None
        start = _WORD.unpack_from(data, layout.stub_buffer)[0]
        size = _S32.unpack_from(data, layout.stub_buffer_limit)[0]
        if not start or not 0 < size <= 64 << 20 or start + size > USER_SPACE_END:
            return None
        return start, start + size

    def preserves_frame_pointers(self) -> bool | None:
        """Does the JVM run with -XX:+PreserveFramePointer? None: not known."""
        if self.layout.preserve_frame_pointer_at < 0:
            return None
        value = self.memory.read(self.layout.preserve_frame_pointer_at + self.bias, 1)
        return bool(value[0]) if value is not None else None

    def records_non_safepoints(self) -> bool | None:
        """Does the JVM run with -XX:+DebugNonSafepoints (its compilers then
        record the inlined methods at every pc, not only at safepoints and
        calls)? None: not known."""
        if self.layout.debug_non_safepoints_at < 0:
            return None
        value = self.memory.read(self.layout.debug_non_safepoints_at + self.bias, 1)
        return bool(value[0]) if value is not None else None

    def unloads_classes_concurrently(self) -> bool | None:
        """Does the JVM run a collector that frees classes while the program
        runs (ZGC, Shenandoah)? None: its flags could not be read."""
        if self.layout.preserve_frame_pointer_at < 0:
            return None
        for flag_at in self.layout.concurrent_unloading_flags_at:
            value = self.memory.read(flag_at + self.bias, 1)
            if value is None:
                return None
            if value[0]:
                return True
        return False

    def unloading_count(self) -> UnloadingCount | None:
        """A count that moves whenever classes may have been unloaded (and
        their methods freed) since it was read, or None: none does."""
        layout = self.layout
        if self.unloads_classes_concurrently() is not False:
            return None
        if layout.safepoint_counter_at > 0:
            # Every such collector unloads only at a safepoint.
            return UnloadingCount(layout.safepoint_counter_at + self.bias, counts_safepoints=True)
        late = self.memory.read(layout.late_counting_flag_at + self.bias, 1) if layout.late_counting_flag_at >= 0 else None
        if late is None or late[0]:
            return None  # G1 (or not known): its collection count moves after it unloads
        if not layout.collected_heap_at or layout.heap_total_collections < 0:
            return None
        heap = self.memory.word(layout.collected_heap_at + self.bias)
        if not heap or not plausible(heap):
            return None
        return UnloadingCount(heap + layout.heap_total_collections, counts_safepoints=False)

    def blob_at(self, pc: int) -> CodeBlob | None:
        """The code blob whose code holds pc, or None (free space, not code)."""
        heap = next((heap for heap in self.code_heaps() if heap.low <= pc < heap.high), None)
        if heap is None:
            return None
        segment = self._block_start(heap, (pc - heap.low) >> heap.log2_segment)
        if segment is None:
            return None
        block = heap.low + (segment << heap.log2_segment)
        layout = self.layout
        if layout.heap_block_used >= 0:
            used = self.memory.read(block + layout.heap_block_used, 1)
            if used is None or used[0] != 1:
                return None
        address = block + layout.heap_block_size
        header = self.memory.read(address, max(layout.nmethod_size, layout.blob_name + 8))
        if header is None:
            return None
        begin = (
            _WORD.unpack_from(header, layout.blob_code_begin)[0]
            if not layout.blob_offsets
            else address + _S32.unpack_from(header, layout.blob_code_begin)[0]
        )
        end = (
            _WORD.unpack_from(header, layout.blob_code_end)[0]
            if not layout.blob_offsets
            else address + _S32.unpack_from(header, layout.blob_code_end)[0]
        )
        if not address < begin <= pc < end <= heap.high:
            return None
        name = self._name(_WORD.unpack_from(header, layout.blob_name)[0])
        if name is None:
            return None
        return CodeBlob(address, name, begin, end, header)

    def _block_start(self, heap: CodeHeap, segment: int) -> int | None:
        """The first segment of the block holding segment: each segment's
        byte in the segment map says how far back to go (0: here; 0xFF: free)."""
        window_start = window_end = -1
        window = b""
        for _hop in range(MAX_SEGMAP_HOPS):
            if segment < 0:
                return None
            if not window_start <= segment < window_end:
                window_start = max(0, segment - SEGMAP_WINDOW + 1)
                window_end = segment + 1
                read = self.memory.read(heap.segmap + window_start, window_end - window_start)
                if read is None:
                    return None
                window = read
            tag = window[segment - window_start]
            if tag == FREE_SEGMENT:
                return None
            if tag == 0:
                return segment
            segment -= tag
        return None

    def _name(self, address: int) -> str | None:
        """A blob's name: a string in libjvm.so, the same few hundred for all blobs."""
        if address in self._names:
            return self._names[address]
        data = self.memory.read(address, 128) if address else None
        name = None
        if data is not None and b"\0" in data:
            text = data.partition(b"\0")[0].decode("utf-8", "replace")
            name = text if text.isprintable() else None
        if len(self._names) < 4096:
            self._names[address] = name
        return name

    # Compiled code ------------------------------------------------------

    def compiled(self, blob: CodeBlob) -> CompiledCode | None:
        """The nmethod a blob is, with its tables; None when it is not one or does not add up."""
        if blob.name not in NMETHOD_NAMES:
            return None
        layout, header, address = self.layout, blob.header, blob.address
        method = _WORD.unpack_from(header, layout.nmethod_method)[0]
        compile_id = _S32.unpack_from(header, layout.nmethod_compile_id)[0]
        entry_bci = _S32.unpack_from(header, layout.nmethod_entry_bci)[0]
        level = 0
        if layout.nmethod_comp_level is not None:
            width = layout.nmethod_comp_level.size if layout.nmethod_comp_level.size in (1, 2, 4) else 4
            level = int.from_bytes(
                header[layout.nmethod_comp_level.offset : layout.nmethod_comp_level.offset + width], "little", signed=True
            )
        if not plausible(method) or compile_id <= 0:
            return None
        tables = self._tables(address, header)
        if tables is None:
            return None
        metadata, scopes_data, scopes_pcs = tables
        return CompiledCode(
            blob,
            compile_id,
            method,
            level,
            entry_bci != compressed.INVOCATION_ENTRY_BCI,
            metadata,
            scopes_data,
            scopes_pcs,
            *self._safepoints(blob, scopes_pcs),
        )

    def _safepoints(self, blob: CodeBlob, scopes_pcs: bytes) -> tuple[bool, frozenset[int]]:
        """Does the nmethod have a PcDesc at a pc with no oop map (neither a
        safepoint nor a call)? Only -XX:+DebugNonSafepoints makes those, and
        HotSpot reads that flag once per compilation: so this, not the flag
        now, says how a method compiled before or after the flag changed was
        recorded. The first and the last PcDesc are sentinels, never mapped.
        And the pcs with an oop map."""
        mapped = self._oop_map_pcs(blob)
        pcs = compressed.pc_offsets(scopes_pcs, self.layout.pc_desc_size, self.layout.pc_desc_pc_offset)
        if mapped is None or len(pcs) < 3:
            return False, frozenset(mapped or ())
        return any(pc >= 0 and pc not in mapped for pc in pcs[1:-1]), frozenset(mapped)

    def _oop_map_pcs(self, blob: CodeBlob) -> set[int] | None:
        """The pcs of the nmethod's oop maps (None: not readable)."""
        layout = self.layout
        if layout.blob_oop_maps < 0 or layout.blob_oop_maps + 8 > len(blob.header):
            return None
        if not (
            0 < layout.oop_map_set_size <= 64
            and 0 <= layout.oop_map_set_count <= layout.oop_map_set_size - 4
            and 0 < layout.oop_map_pair_size <= 32
            and 0 <= layout.oop_map_pair_pc <= layout.oop_map_pair_size - 4
        ):
            return None
        maps = _WORD.unpack_from(blob.header, layout.blob_oop_maps)[0]
        header = self.memory.read(maps, layout.oop_map_set_size) if plausible(maps) else None
        if header is None:
            return None
        count = _S32.unpack_from(header, layout.oop_map_set_count)[0]
        pairs = (
            self.memory.read(maps + layout.oop_map_set_size, count * layout.oop_map_pair_size)
            if 0 < count <= MAX_OOP_MAPS
            else None
        )
        if pairs is None:
            return None
        return {
            _S32.unpack_from(pairs, start + layout.oop_map_pair_pc)[0] for start in range(0, len(pairs), layout.oop_map_pair_size)
        }

    def _tables(self, address: int, header: bytes) -> tuple[bytes, bytes, bytes] | None:
        layout = self.layout
        size = _S32.unpack_from(header, layout.blob_size)[0]
        if layout.nmethod_immutable_data < 0:  # JDK 9 to 22: all inside the blob
            metadata = address + _S32.unpack_from(header, layout.nmethod_metadata)[0]
            scopes_data = _WORD.unpack_from(header, layout.nmethod_scopes_data)[0]
            scopes_pcs = address + _S32.unpack_from(header, layout.nmethod_scopes_pcs)[0]
            end = address + _S32.unpack_from(header, layout.nmethod_dependencies)[0]
            if (
                not address < metadata <= scopes_data <= scopes_pcs <= end <= address + size
                or end - metadata > MAX_NMETHOD_TABLES
            ):
                return None
            data = self.memory.read(metadata, end - metadata) if end > metadata else b""  # a native wrapper's are empty
            if data is None:
                return None
            return (
                data[: scopes_data - metadata],
                data[scopes_data - metadata : scopes_pcs - metadata],
                data[scopes_pcs - metadata :],
            )
        # JDK 23 on: the scopes in the immutable data; the metadata after the
        # relocations in the mutable data (JDK 25), or after the code (23, 24).
        immutable = _WORD.unpack_from(header, layout.nmethod_immutable_data)[0]
        immutable_size = _S32.unpack_from(header, layout.nmethod_immutable_size)[0]
        pcs_offset = _S32.unpack_from(header, layout.nmethod_scopes_pcs)[0]
        data_offset = _S32.unpack_from(header, layout.nmethod_scopes_data)[0]
        if not plausible(immutable) or not 0 <= pcs_offset <= data_offset <= immutable_size <= MAX_NMETHOD_TABLES:
            return None
        if layout.blob_mutable_data >= 0:
            mutable = _WORD.unpack_from(header, layout.blob_mutable_data)[0]
            relocations = _S32.unpack_from(header, layout.blob_relocation_size)[0]
            mutable_size = _S32.unpack_from(header, layout.blob_mutable_data_size)[0]
            metadata_at, metadata_size = mutable + relocations, mutable_size - relocations
        else:
            code_end = _S32.unpack_from(header, layout.blob_code_end)[0]
            metadata_offset = _U16.unpack_from(header, layout.nmethod_metadata)[0]
            metadata_at, metadata_size = address + code_end + metadata_offset, size - code_end - metadata_offset
        if not 0 <= metadata_size <= MAX_NMETHOD_TABLES or not plausible(metadata_at):
            return None
        metadata = self.memory.read(metadata_at, metadata_size) if metadata_size else b""
        scopes = self.memory.read(immutable + pcs_offset, immutable_size - pcs_offset)
        if metadata is None or scopes is None:
            return None
        return metadata, scopes[data_offset - pcs_offset :], scopes[: data_offset - pcs_offset]

    # Methods ------------------------------------------------------------

    def method(self, address: int) -> JavaMethod | None:
        """The Method at address, if its class lists it; else None."""
        if not plausible(address):
            return None
        layout, memory = self.layout, self.memory
        const_method = memory.word(address + layout.method_const_method)
        if const_method is None or not plausible(const_method):
            return None
        const = memory.read(const_method, layout.const_method_size)
        if const is None:
            return None
        pool = _WORD.unpack_from(const, layout.const_method_constants)[0]
        pool_header = memory.read(pool, layout.pool_size) if plausible(pool) else None
        if pool_header is None:
            return None
        holder = _WORD.unpack_from(pool_header, layout.pool_holder)[0]
        if not plausible(holder) or not self._lists(holder, pool, address):
            return None
        pool_length = _S32.unpack_from(pool_header, layout.pool_length)[0]

        def pool_symbol(index: int) -> str | None:
            if not 0 < index < pool_length:
                return None
            entry = memory.word(pool + layout.pool_size + 8 * index)
            return self.symbol(entry & ~1) if entry else None

        name = pool_symbol(_U16.unpack_from(const, layout.const_method_name_index)[0])
        descriptor = pool_symbol(_U16.unpack_from(const, layout.const_method_signature_index)[0])
        klass_symbol = memory.word(holder + layout.klass_name)
        klass = self.symbol(klass_symbol) if klass_symbol else None
        if name is None or descriptor is None or klass is None:
            return None
        source_file = pool_symbol(_U16.unpack_from(pool_header, layout.pool_source_file_index)[0]) or ""
        code_size = _U16.unpack_from(const, layout.const_method_code_size)[0]
        bytecode_start = const_method + layout.const_method_size
        lines: tuple[tuple[int, int], ...] = ()
        if const[layout.const_method_flags] & HAS_LINE_TABLE:
            lines = self._line_table(bytecode_start + code_size)
        return JavaMethod(klass, name, descriptor, source_file, lines, bytecode_start, code_size)

    def _lists(self, holder: int, pool: int, method: int) -> bool:
        """Is method one of holder's, and pool holder's constant pool?"""
        layout, memory = self.layout, self.memory
        if memory.word(holder + layout.instance_klass_constants) != pool:
            return False
        methods = memory.word(holder + layout.instance_klass_methods)
        if not methods or not plausible(methods):
            return False
        length_bytes = memory.read(methods + layout.array_length, 4)
        if length_bytes is None:
            return False
        length = _S32.unpack(length_bytes)[0]
        if not 0 < length <= MAX_METHODS_PER_CLASS:
            return False
        listed = memory.read(methods + layout.array_data, 8 * length)
        if listed is None:
            return False
        wanted = _WORD.pack(method)
        at = listed.find(wanted)
        while at >= 0 and at % 8:  # a word of the array, not bytes across two
            at = listed.find(wanted, at + 1)
        return at >= 0

    def _line_table(self, address: int) -> tuple[tuple[int, int], ...]:
        """The table after the bytecodes: its length is only known by decoding it (reads grow, a few at most)."""
        for size in (64, 1024, 16 << 10, MAX_LINE_TABLE):
            data = self.memory.read(address, size)
            if data is None:
                return ()
            if compressed.table_length(data, self.layout.excluded_byte) > 0:
                return compressed.line_table(data, self.layout.excluded_byte)
        return ()

    def symbol(self, address: int) -> str | None:
        """A Symbol's text (modified UTF-8, read as UTF-8), or None."""
        if not plausible(address):
            return None
        layout = self.layout
        head = self.memory.read(address, layout.symbol_body + 120)
        if head is None:
            return None
        length = _U16.unpack_from(head, layout.symbol_length)[0]
        body = head[layout.symbol_body : layout.symbol_body + length]
        if len(body) < length:
            rest = self.memory.read(address + layout.symbol_body + len(body), length - len(body))
            if rest is None:
                return None
            body += rest
        text = body.decode("utf-8", "replace")
        return text if text and text.isprintable() else None
