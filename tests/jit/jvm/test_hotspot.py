"""Reading HotSpot's structures: its compressed tables (as HotSpot's own
writers lay them out, both UNSIGNED5 encodings), Java's descriptors, and the
object reader and source over memory that lies (unlisted methods, endless
segment maps, blobs replaced under the reader): what does not check out
reads as nothing, never as another method."""

from __future__ import annotations

import contextlib
import dataclasses
import random
import struct
import threading

import pytest

from profiler.jit.jvm import hotspot_source
from profiler.jit.jvm.hotspot import compressed, flag_writer, signatures
from profiler.jit.jvm.hotspot.layout import Field, HotSpotLayout, LayoutError, VMTables, layout_from_tables
from profiler.jit.jvm.hotspot.objects import CodeHeap, HotSpotReader, UnloadingCount
from profiler.jit.jvm.hotspot_source import EARLY_SLACK_NS, INLINED_UNKNOWN, UNKNOWN_JIT, HotSpotStructures, _Jvm, frame_size_walk
from profiler.kernel.events import V8_NO_BYTECODE_OFFSET, RawSample, V8FrameSlots, WalkEnd
from profiler.kernel.kernel_maps import HotSpotCode, KernelMaps
from profiler.kernel.procmaps import MapEntry
from profiler.model.profile import FrameKind
from tests.helpers import LaidOutMemory

# HotSpot's writers ----------------------------------------------------------


def unsigned5(value: int, excluded: int) -> bytes:
    """UNSIGNED5::write_uint (JDK 20+, excluded 1) and CompressedWriteStream::write_int_mb (before, 0)."""
    low = 256 - excluded - 64
    out = bytearray()
    remaining = value
    for index in range(5):
        if remaining < low or index == 4:
            out.append(excluded + remaining)
            return bytes(out)
        remaining -= low
        out.append(excluded + low + remaining % 64)
        remaining >>= 6
    return bytes(out)


def signed5(value: int, excluded: int) -> bytes:
    return unsigned5(((value << 1) ^ (value >> 31)) & 0xFFFF_FFFF, excluded)


def line_stream(pairs: list[tuple[int, int]], excluded: int) -> bytes:
    """CompressedLineNumberWriteStream: a byte for small deltas, else 0xFF and two signed numbers; 0 ends it."""
    out = bytearray()
    bci = line = 0
    for next_bci, next_line in pairs:
        bci_delta, line_delta = next_bci - bci, next_line - line
        bci, line = next_bci, next_line
        if bci_delta == 0 and line_delta == 0:
            continue
        if 0 <= bci_delta < 32 and 0 <= line_delta < 8 and (bci_delta << 3 | line_delta) != 0xFF:
            out.append(bci_delta << 3 | line_delta)
        else:
            out += b"\xff" + signed5(bci_delta, excluded) + signed5(line_delta, excluded)
    return bytes(out + b"\0")


@pytest.mark.parametrize("excluded", [0, 1])
def test_unsigned5_reads_what_hotspot_writes(excluded):
    values = [0, 1, 190, 191, 192, 255, 4095, 12_345, 1 << 20, (1 << 31) - 1, 0xFFFF_FFFF]
    data = b"".join(unsigned5(value, excluded) for value in values)
    stream = compressed.Unsigned5(data, 0, excluded)
    assert [stream.unsigned() for _ in values] == values
    assert stream.unsigned() is None  # the end
    negatives = [-1, -200, 7, -(1 << 30)]
    stream = compressed.Unsigned5(b"".join(signed5(value, excluded) for value in negatives), 0, excluded)
    assert [stream.signed() for _ in negatives] == negatives
    if excluded:
        assert compressed.Unsigned5(b"\0", 0, 1).unsigned() is None  # an excluded byte


@pytest.mark.parametrize("excluded", [0, 1])
def test_line_tables_decode_short_and_long_deltas(excluded):
    pairs = [(0, 10), (4, 11), (9, 11), (60, 40), (61, 3), (300, 1000)]
    data = line_stream(pairs, excluded) + b"junk after the end"
    assert compressed.line_table(data, excluded) == tuple(pairs)
    assert compressed.table_length(data, excluded) == len(line_stream(pairs, excluded))
    assert compressed.line_of(tuple(pairs), 5) == 11 and compressed.line_of(tuple(pairs), 0) == 10
    assert compressed.line_of(tuple(pairs), 299) == 3 and compressed.line_of((), 5) == 0


def test_damaged_line_tables_decode_to_nothing():
    assert compressed.line_table(b"\x08\x09", 0) == ()  # no end
    assert compressed.line_table(b"\xff\xc0\xc0\xc0", 0) == ()  # a number running off the end
    assert compressed.line_table(b"\xff" + signed5(-5, 0) + signed5(1, 0) + b"\0", 0) == ()  # a negative bci
    assert compressed.table_length(b"\x08" * 100_000, 0) == -1


def scopes(chain: list[tuple[int, int]], excluded: int) -> tuple[bytes, int]:
    """Scope descriptors as DebugInformationRecorder writes them, outermost
    first (each sender before it), after its leading 0xFF; returns the data
    and the innermost's offset."""
    data = bytearray(b"\xff")
    sender = 0
    for method_index, bci in chain:
        offset = len(data)
        data += unsigned5(sender, excluded) + unsigned5(method_index, excluded) + unsigned5(bci + 1, excluded)
        data += unsigned5(0, excluded) * 3  # locals, expressions, monitors: none
        sender = offset
    return bytes(data), sender


@pytest.mark.parametrize("excluded", [0, 1])
def test_scope_chain_restores_inlining_innermost_first(excluded):
    data, innermost = scopes([(1, 7), (2, 3), (3, -1)], excluded)
    chain = compressed.scope_chain(data, innermost, excluded)
    assert [(scope.method_index, scope.bci) for scope in chain] == [(3, -1), (2, 3), (1, 7)]


def test_a_scope_chain_that_points_forward_or_loops_is_nothing():
    data = bytearray(b"\xff" + unsigned5(1, 0) + b"\x01\x01")  # its sender is itself
    assert compressed.scope_chain(bytes(data), 1, 0) == ()
    forward = b"\xff" + unsigned5(9, 0) + b"\x01\x01" + b"\0" * 8  # a sender after it
    assert compressed.scope_chain(forward, 1, 0) == ()
    assert compressed.scope_chain(b"\xff", 40, 0) == ()  # outside the data


def test_pc_descriptors_the_first_at_or_after_the_pc():
    table = b"".join(struct.pack("<iiii", pc, scope, 0, 0) for pc, scope in [(-1, 0), (16, 5), (40, 9), (80, 0)])
    index = compressed.pc_index(table, 16, 0, 4)
    assert index is not None
    assert index.scope_at(16) == 5  # exactly there
    assert index.scope_at(17) == 9
    assert index.scope_at(70) == 0  # a descriptor without scope
    assert index.scope_at(81) is None
    assert compressed.pc_index(table, 16, 0, 14) is None  # a field past the descriptor's size


def test_pc_descriptors_found_by_bisection_as_by_a_scan_of_the_table():
    """The index answers as a scan of the table in its own order does: the
    smallest pc at or after, the first of several at one pc; exact, only at it.
    Tables in pc order (as HotSpot writes them) and out of it (a torn read)."""
    chooser = random.Random(5)

    def scanned(table: list[tuple[int, int]], relative: int, exact: bool) -> int | None:
        best = None
        for pc, scope in table:
            if relative <= pc and (best is None or pc < best[0]) and (pc == relative or not exact):
                best = (pc, scope)
        return best[1] if best is not None else None

    for _round in range(200):
        table = [(chooser.randrange(-1, 60), chooser.randrange(0, 1000)) for _ in range(chooser.randrange(0, 12))]
        if chooser.random() < 0.5:
            table.sort(key=lambda descriptor: descriptor[0])
        raw = b"".join(struct.pack("<iiii", pc, scope, 0, 0) for pc, scope in table)
        index = compressed.pc_index(raw, 16, 0, 4)
        assert index is not None
        for relative in range(-2, 63):
            for exact in (False, True):
                assert index.scope_at(relative, exact) == scanned(table, relative, exact), (table, relative, exact)


def test_descriptors_read_as_the_perf_map_writes_them():
    assert signatures.method_display("Hot", "leaf", "(I)J") == "Hot.leaf(int)"
    assert signatures.method_display("Hot", "main", "([Ljava/lang/String;)V") == "Hot.main(java.lang.String[])"
    assert signatures.method_display(
        "java/util/HashMap", "putVal", "(ILjava/lang/Object;Ljava/lang/Object;ZZ)Ljava/lang/Object;"
    ) == ("java.util.HashMap.putVal(int, java.lang.Object, java.lang.Object, boolean, boolean)")
    assert signatures.method_display("A", "m", "([[J[Z)V") == "A.m(long[][], boolean[])"
    assert signatures.parameter_types("(Lbroken") is None and signatures.parameter_types("(Q)V") is None
    assert signatures.method_display("A", "m", "nonsense") == "A.m(?)"


# The introspection tables ----------------------------------------------------


def test_a_layout_needs_every_field_and_sane_sizes():
    memory = LaidOutMemory()
    memory.put(0x5000, struct.pack("<i", 17))
    tables = VMTables({}, {}, {("Abstract_VM_Version", "_vm_major_version"): 0x5000})
    with pytest.raises(LayoutError, match="lack"):
        layout_from_tables(memory, tables, 0)
    memory.put(0x5000, struct.pack("<i", 8))
    with pytest.raises(LayoutError, match="JDK 8"):
        layout_from_tables(memory, tables, 0)


# Objects over laid-out memory -------------------------------------------------

BIAS = 0x7F00_0000_0000
LAYOUT = HotSpotLayout(
    major=17,
    excluded_byte=0,
    code_heaps_at=0x1000,
    growable_length=0,
    growable_data=8,
    heap_memory=0,
    heap_segmap=0x40,
    heap_log2_segment=0x80,
    space_low=0,
    space_high=8,
    heap_block_size=16,
    heap_block_used=8,
    interpreter_code_at=0x1008,
    stub_buffer=0,
    stub_buffer_limit=8,
    blob_name=0,
    blob_size=8,
    blob_code_begin=16,
    blob_code_end=24,
    blob_offsets=False,
    blob_mutable_data=-1,
    blob_relocation_size=-1,
    blob_mutable_data_size=-1,
    nmethod_size=0x100,
    nmethod_method=0x30,
    nmethod_compile_id=0x38,
    nmethod_entry_bci=0x3C,
    nmethod_comp_level=Field(0x40, 4),
    nmethod_metadata=0x44,
    nmethod_scopes_data=0x48,
    nmethod_scopes_pcs=0x50,
    nmethod_dependencies=0x54,
    nmethod_immutable_data=-1,
    nmethod_immutable_size=-1,
    pc_desc_size=16,
    pc_desc_pc_offset=0,
    pc_desc_scope=4,
    method_const_method=8,
    const_method_size=0x30,
    const_method_constants=8,
    const_method_code_size=0x10,
    const_method_flags=0x12,
    const_method_name_index=0x14,
    const_method_signature_index=0x16,
    pool_size=0x50,
    pool_holder=0x10,
    pool_length=0x18,
    pool_source_file_index=0x1C,
    klass_name=0x10,
    instance_klass_methods=0x20,
    instance_klass_constants=0x28,
    array_length=0,
    array_data=8,
    symbol_length=4,
    symbol_body=6,
    preserve_frame_pointer_at=0x1010,
    debug_non_safepoints_at=-1,
    concurrent_unloading_flags_at=(0x1011, 0x1012),  # UseZGC, UseShenandoahGC
    late_counting_flag_at=0x1013,  # UseG1GC
    collected_heap_at=0x1018,
    heap_total_collections=0x40,
    blob_oop_maps=0x60,
    oop_map_set_size=8,
    oop_map_set_count=0,
    oop_map_pair_size=8,
    oop_map_pair_pc=0,
)
CODE = 0x7E00_0000_0000  # the code heap
SEGMENT = 64


class Jvm:
    """A JVM's objects laid out at fixed addresses."""

    def __init__(self) -> None:
        self.memory = LaidOutMemory()
        self.next = 0x5000_0000
        self.segmap = bytearray(b"\xff" * 1024)
        self.code = bytearray(1024 * SEGMENT)
        self.memory.put(BIAS + 0x1010, b"\x01\x00\x00\x00")  # -XX:+PreserveFramePointer, not ZGC, Shenandoah or G1
        self.collected_heap = self.next  # only its count is read: the count's block alone is laid out
        self.next += 0x100
        self.memory.put(BIAS + 0x1018, struct.pack("<Q", self.collected_heap))
        self.collections(3)
        self.blob_names: dict[str, int] = {}
        heaps = self.allocate(struct.pack("<iiQ", 1, 0, 0))
        heap = bytearray(0x100)
        struct.pack_into("<QQ", heap, 0, CODE, CODE + len(self.code))
        struct.pack_into("<QQ", heap, 0x40, CODE + 0x100_0000, CODE + 0x100_0000 + len(self.segmap))
        struct.pack_into("<i", heap, 0x80, 6)
        heap_at = self.allocate(bytes(heap))
        self.memory.put(heaps, struct.pack("<iiQ", 1, 0, self.allocate(struct.pack("<Q", heap_at))))
        self.memory.put(BIAS + 0x1000, struct.pack("<Q", heaps))
        queue = self.allocate(struct.pack("<Qi4x", CODE, SEGMENT * 4))
        self.memory.put(BIAS + 0x1008, struct.pack("<Q", queue))
        self.publish()

    def collections(self, count: int) -> None:
        """The JVM's GC count (CollectedHeap::_total_collections)."""
        self.memory.put(self.collected_heap + 0x40, struct.pack("<I", count))

    def publish(self) -> None:
        self.memory.put(CODE, bytes(self.code))
        self.memory.put(CODE + 0x100_0000, bytes(self.segmap))

    def allocate(self, data: bytes) -> int:
        """data at the next free address, padded with zeros to a 256-byte slot (memory is read past an object's end)."""
        address = self.next
        size = (len(data) + 0xFF) & ~0xFF
        self.next += size
        self.memory.put(address, data + bytes(size - len(data)))
        return address

    def symbol(self, text: str) -> int:
        body = text.encode()
        return self.allocate(struct.pack("<IH", 1, len(body)) + body)

    def klass(self, name: str, source: str, methods: list[tuple[str, str, list[tuple[int, int]]]]) -> list[int]:
        """A class with its pool and methods (name, descriptor, line table); returns the Method*s."""
        entries = [0, self.symbol(source)]
        indexes = []
        for method_name, descriptor, _lines in methods:
            indexes.append((len(entries), len(entries) + 1))
            entries += [self.symbol(method_name), self.symbol(descriptor)]
        klass_at = self.allocate(bytes(0x100))
        pool = bytearray(LAYOUT.pool_size)
        struct.pack_into("<Qi", pool, LAYOUT.pool_holder, klass_at, len(entries))
        struct.pack_into("<H", pool, LAYOUT.pool_source_file_index, 1)
        pool_at = self.allocate(bytes(pool) + b"".join(struct.pack("<Q", entry) for entry in entries))
        method_addresses = []
        for (_name, _descriptor, lines), (name_index, signature_index) in zip(methods, indexes, strict=True):
            const = bytearray(LAYOUT.const_method_size)
            struct.pack_into("<Q", const, LAYOUT.const_method_constants, pool_at)
            struct.pack_into("<HHHH", const, LAYOUT.const_method_code_size, 40, 1, name_index, signature_index)
            const_at = self.allocate(bytes(const) + bytes(40) + line_stream(lines, 0))
            method_addresses.append(self.allocate(struct.pack("<QQ", 0, const_at)))
        listed = self.allocate(
            struct.pack("<i4x", len(method_addresses)) + b"".join(struct.pack("<Q", address) for address in method_addresses)
        )
        body = bytearray(0x100)
        struct.pack_into("<Q", body, LAYOUT.klass_name, self.symbol(name))
        struct.pack_into("<QQ", body, LAYOUT.instance_klass_methods, listed, pool_at)
        self.memory.put(klass_at, bytes(body))
        return method_addresses

    def blob_name(self, name: str) -> int:
        if name not in self.blob_names:
            self.blob_names[name] = self.allocate(name.encode() + b"\0")
        return self.blob_names[name]

    def nmethod(
        self,
        first_segment: int,
        segments: int,
        method: int,
        compile_id: int,
        metadata: list[int],
        pcs: list[tuple[int, int]],
        data: bytes,
        safepoints: list[int] | None = None,
        code_size: int = 128,
    ) -> int:
        """An nmethod of `segments` segments from first_segment; returns where
        its code begins. safepoints: the pcs with an oop map (default: every
        PcDesc's, as HotSpot compiles without -XX:+DebugNonSafepoints)."""
        for index in range(segments):
            self.segmap[first_segment + index] = index  # hops back to the block's start (HotSpot's template, short blocks)
        block = first_segment * SEGMENT
        address = CODE + block + LAYOUT.heap_block_size
        struct.pack_into("<Q?", self.code, block, segments, True)
        header = bytearray(LAYOUT.nmethod_size)
        code_begin = address + LAYOUT.nmethod_size
        code_end = code_begin + code_size
        tables = b"".join(struct.pack("<Q", entry) for entry in metadata)
        metadata_offset = code_end - address
        scopes_at = code_end + len(tables)
        pcs_table = b"".join(struct.pack("<iiii", pc, scope, 0, 0) for pc, scope in pcs)
        pcs_offset = scopes_at - address + len(data)
        end_offset = pcs_offset + len(pcs_table)
        assert end_offset <= segments * SEGMENT - LAYOUT.heap_block_size
        struct.pack_into("<QiiQQ", header, 0, self.blob_name("nmethod"), segments * SEGMENT - 16, 0, code_begin, code_end)
        struct.pack_into("<Qii", header, LAYOUT.nmethod_method, method, compile_id, -1)
        mapped = [pc for pc, _scope in pcs] if safepoints is None else safepoints
        oop_maps = self.allocate(struct.pack("<ii", len(mapped), 0) + b"".join(struct.pack("<ii", pc, 0) for pc in mapped))
        struct.pack_into("<Q", header, LAYOUT.blob_oop_maps, oop_maps)
        struct.pack_into(
            "<iiQii", header, LAYOUT.nmethod_comp_level.offset, 4, metadata_offset, scopes_at, pcs_offset, end_offset
        )
        blob = bytes(header) + bytes(code_size) + tables + data + pcs_table
        self.code[block + 16 : block + 16 + len(blob)] = blob
        self.publish()
        return code_begin

    def stub(self, first_segment: int, name: str) -> int:
        self.segmap[first_segment] = 0
        block = first_segment * SEGMENT
        address = CODE + block + 16
        struct.pack_into("<Q?", self.code, block, 1, True)
        struct.pack_into("<QiiQQ", self.code, block + 16, self.blob_name(name), 48, 0, address + 32, address + 48)
        self.publish()
        return address + 32

    def free(self, first_segment: int, segments: int) -> None:
        """As HotSpot frees a block: marked free, its bytes left as they were."""
        for index in range(segments):
            self.segmap[first_segment + index] = 0xFF
        struct.pack_into("<?", self.code, first_segment * SEGMENT + LAYOUT.heap_block_used, False)
        self.publish()


def hot_class(jvm: Jvm) -> list[int]:
    return jvm.klass(
        "Hot",
        "Hot.java",
        [("run", "(J)J", [(0, 20), (5, 21)]), ("step", "(J)J", [(0, 30), (3, 31)]), ("leaf", "(J)J", [(0, 40), (2, 41)])],
    )


def test_methods_are_read_with_their_class_source_and_lines():
    jvm = Jvm()
    run, step, leaf = hot_class(jvm)
    reader = HotSpotReader(jvm.memory, LAYOUT, BIAS)
    method = reader.method(leaf)
    assert method is not None and (method.display, method.source_file, method.first_line) == ("Hot.leaf(long)", "Hot.java", 40)
    assert method.line_at(1) == 40 and method.line_at(2) == 41 and method.line_at(1000) == 0
    assert reader.preserves_frame_pointers() is True
    assert reader.interpreter_range() == (CODE, CODE + 4 * SEGMENT)


def test_a_method_its_class_does_not_list_is_not_believed():
    jvm = Jvm()
    run, _step, _leaf = hot_class(jvm)
    forged = jvm.allocate(jvm.memory.read(run, 16))  # the same words, elsewhere: a freed Method's copy
    jvm.memory.put(0x6000_0000, struct.pack("<QQ", 0, run))  # a Method whose ConstMethod is a Method
    reader = HotSpotReader(jvm.memory, LAYOUT, BIAS)
    assert reader.method(run) is not None and reader.method(forged) is None
    assert reader.method(0x1234) is None and reader.method(0x6000_0000) is None


def test_a_compiled_pc_names_the_methods_inlined_there():
    jvm = Jvm()
    run, step, leaf = hot_class(jvm)
    data, innermost = scopes([(1, 5), (2, 3), (3, 2)], 0)
    # Compiled with -XX:+DebugNonSafepoints: a record at a pc that is neither a safepoint nor a call.
    begin = jvm.nmethod(10, 8, run, 77, [run, step, leaf], [(-1, 0), (48, innermost), (64, innermost), (96, 0)], data, [64])
    stub_code = jvm.stub(4, "StubRoutines (1)")
    source = HotSpotStructures(None, lambda _pid: True)
    pid = 4242
    ready = _Jvm(
        pid, 0.0, HotSpotReader(jvm.memory, LAYOUT, BIAS), _Thread(), (CODE, CODE + 4 * SEGMENT), ((CODE, CODE + len(jvm.code)),)
    )
    source._jvms[pid] = ready
    now = _now()
    frames = source.expand(pid, now, begin + 40)
    assert [(frame.name, frame.line, frame.inlined, frame.tier) for frame in frames] == [
        ("Hot.run(long)", 21, False, "c2"),
        ("Hot.step(long)", 31, True, "c2"),
        ("Hot.leaf(long)", 41, True, "c2"),
    ]
    assert frames[0].file == "Hot.java" and frames[2].line_exact
    assert source.expand(pid, now, stub_code + 4)[0].name == "[stub] StubRoutines (1)"
    assert source.expand(pid, now, stub_code + 4)[0].kind is FrameKind.JIT
    assert source.expand(pid, now, CODE + 500 * SEGMENT) == (UNKNOWN_JIT,)  # free space
    assert source.expand(pid, now, 0x1000) is None  # not the code cache: another source's


def test_a_leaf_at_a_descriptor_is_named_by_the_next_one():
    """HotSpot records a scope where its instructions end: a descriptor at
    the leaf's own pc ends the instruction before it (here step's), and the
    leaf's instruction is the next one's (leaf inlined), as HotSpot's own
    sampler reads it (pc_desc_near(pc + 1)). Taken at the pc, a churning
    JVM's sample was once named with the method inlined just before."""
    jvm = Jvm()
    run, step, leaf = hot_class(jvm)
    data, innermost = scopes([(1, 5), (2, 3), (3, 2)], 0)
    _prefix, middle = scopes([(1, 5), (2, 3)], 0)
    pcs = [(-1, 0), (48, middle), (64, innermost), (96, 0)]
    begin = jvm.nmethod(10, 8, run, 77, [run, step, leaf], pcs, data, [96])
    source = HotSpotStructures(None, lambda _pid: True)
    pid = 4242
    source._jvms[pid] = _Jvm(
        pid, 0.0, HotSpotReader(jvm.memory, LAYOUT, BIAS), _Thread(), (CODE, CODE + 4 * SEGMENT), ((CODE, CODE + len(jvm.code)),)
    )
    now = _now()
    assert [frame.name for frame in source.expand(pid, now, begin + 47)] == ["Hot.run(long)", "Hot.step(long)"]
    assert [frame.name for frame in source.expand(pid, now, begin + 48)] == ["Hot.run(long)", "Hot.step(long)", "Hot.leaf(long)"]
    # A caller's return address is its call's own descriptor.
    called = source.expand(pid, now, begin + 47, caller=True)
    assert [frame.name for frame in called] == ["Hot.run(long)", "Hot.step(long)"]
    # A safepoint poll's descriptor is at the poll itself (where it faults).
    polled = jvm.nmethod(30, 8, run, 78, [run, step, leaf], pcs, data, [64, 96])
    jvm.code[polled + 64 - CODE : polled + 67 - CODE] = bytes([0x41, 0x85, 0x02])  # test [r10], eax
    jvm.publish()
    at_poll = source.expand(pid, now, polled + 64)
    assert [frame.name for frame in at_poll] == ["Hot.run(long)", "Hot.step(long)", "Hot.leaf(long)"]
    # A call's oop map is at its return address: the instruction there is the next record's.
    assert [frame.name for frame in source.expand(pid, now, polled + 48)] == ["Hot.run(long)", "Hot.step(long)", "Hot.leaf(long)"]


def test_without_debug_non_safepoints_inlined_methods_are_named_only_where_recorded():
    """HotSpot records which methods are inlined at a pc only at safepoints
    and calls unless -XX:+DebugNonSafepoints: a leaf pc elsewhere, or a call
    into the runtime it records nothing for, gets the compiled method and a
    frame saying the rest is unknown, never the nearest record's chain."""
    jvm = Jvm()
    run, step, leaf = hot_class(jvm)
    data, innermost = scopes([(1, 5), (2, 3), (3, 2)], 0)
    begin = jvm.nmethod(10, 8, run, 77, [run, step, leaf], [(-1, 0), (64, innermost)], data)
    lone = jvm.nmethod(30, 8, step, 78, [step], [(64, scopes([(1, 3)], 0)[1])], scopes([(1, 3)], 0)[0])
    source = HotSpotStructures(None, lambda _pid: True)
    pid = 4242
    ready = _Jvm(
        pid, 0.0, HotSpotReader(jvm.memory, LAYOUT, BIAS), _Thread(), (CODE, CODE + 4 * SEGMENT), ((CODE, CODE + len(jvm.code)),)
    )
    ready.records_non_safepoints = False
    source._jvms[pid] = ready
    now = _now()
    assert [frame.name for frame in source.expand(pid, now, begin + 40)] == ["Hot.run(long)", INLINED_UNKNOWN.name]
    # A call's return address is recorded: its chain is the call's.
    called = source.expand(pid, now, begin + 63, caller=True)
    assert [frame.name for frame in called] == ["Hot.run(long)", "Hot.step(long)", "Hot.leaf(long)"]
    # A call with no record (a leaf call into the runtime).
    assert [frame.name for frame in source.expand(pid, now, begin + 50, caller=True)] == ["Hot.run(long)", INLINED_UNKNOWN.name]
    # A compiled method that inlines nothing is itself at every pc.
    assert [frame.name for frame in source.expand(pid, now, lone + 10)] == ["Hot.step(long)"]
    assert ready.unknown_inlining == 2
    assert any("-XX:+DebugNonSafepoints" in line for line in source.warnings())
    # The flag turned on since (by jitprof, at the user's word): code compiled before keeps its sparse records.
    ready.records_non_safepoints = True
    ready.blobs.clear()
    ready.starts.clear()
    assert [frame.name for frame in source.expand(pid, now, begin + 40)] == ["Hot.run(long)", INLINED_UNKNOWN.name]


def test_a_flag_is_written_only_inside_libjvm_data():
    """The flag's address is the target's word: only libjvm.so's writable
    mappings, or the anonymous .bss right after them, are written."""
    libjvm = "/usr/lib/jvm/java-17/lib/server/libjvm.so"
    maps = [
        MapEntry(0x1000, 0x9000, True, False, True, 0, "08:01", 7, libjvm),
        MapEntry(0x9000, 0xA000, True, True, False, 0x8000, "08:01", 7, libjvm),
        MapEntry(0xA000, 0xC000, True, True, False, 0, "00:00", 0, ""),  # its .bss
        MapEntry(0xD000, 0xE000, True, True, False, 0, "00:00", 0, ""),  # the heap, apart
        MapEntry(0xE000, 0xF000, True, True, False, 0, "08:01", 9, "/usr/lib/libc.so.6"),
    ]
    assert flag_writer.in_libjvm_data(maps, 0x9010)
    assert flag_writer.in_libjvm_data(maps, 0xB000)
    assert not flag_writer.in_libjvm_data(maps, 0x2000)  # its code: not writable
    assert not flag_writer.in_libjvm_data(maps, 0xD010)
    assert not flag_writer.in_libjvm_data(maps, 0xE010)
    assert not flag_writer.in_libjvm_data(maps, 0x10_0000)


def test_code_replaced_under_the_reader_is_never_named_with_the_old_method():
    jvm = Jvm()
    run, step, leaf = hot_class(jvm)
    other = jvm.klass("Other", "Other.java", [("spin", "(J)J", [(0, 7)])])[0]
    begin = jvm.nmethod(10, 8, run, 77, [run], [(64, 0)], b"")
    source, pid = compiling_source(jvm)
    before = _now()
    assert source.expand(pid, before, begin + 8)[0].name == "Hot.run(long)"
    revision = source.epoch(pid)[0]
    # The nmethod is freed and another, of another method, is compiled in its place.
    jvm.free(10, 8)
    jvm.nmethod(10, 8, other, 78, [other], [(64, 0)], b"")
    # The first sample to find the new one is from after the old one's last
    # sight: the new one, read now, cannot say it was there then.
    last_seen = source._jvms[pid].blobs[0].confirmed_ns
    assert source.expand(pid, last_seen + 1, begin + 8) == (UNKNOWN_JIT,)
    after = _now()
    assert source.expand(pid, after, begin + 8)[0].name == "Other.spin(long)"
    assert source.epoch(pid)[0] > revision  # what was named from the old one is named anew
    # A sample from while the old one was seen is still its; one from between
    # its last sight and the new one's first is nobody's: the swap's moment is not known.
    assert source.expand(pid, before, begin + 8)[0].name == "Hot.run(long)"
    last_seen = source._jvms[pid].retired[-1].confirmed_ns
    assert source.expand(pid, last_seen + 1, begin + 8) == (UNKNOWN_JIT,)
    # A sample from before the new one was read, beyond the slack: not known.
    assert source.expand(pid, after - 2 * EARLY_SLACK_NS, begin + 8) == (UNKNOWN_JIT,)


def test_a_blob_s_lifetime_says_which_samples_its_kept_frames_name():
    """The symbolizer keeps a compiled pc's frames with its blob: they name a
    sample from while the blob was seen there, never one after its last
    sight (not yet checked), and nothing once another took its place."""
    jvm = Jvm()
    run, _step, _leaf = hot_class(jvm)
    other = jvm.klass("Other", "Other.java", [("spin", "(J)J", [(0, 7)])])[0]
    begin = jvm.nmethod(10, 8, run, 77, [run], [(64, 0)], b"")
    source, pid = compiling_source(jvm)
    assert source.code_lifetime(pid, begin + 8) is None  # nothing read there yet
    before = _now()
    assert source.expand(pid, before, begin + 8)[0].name == "Hot.run(long)"
    lifetime = source.code_lifetime(pid, begin + 8)
    assert lifetime is not None and lifetime.names_sample_at(before)
    assert not lifetime.names_sample_at(lifetime.confirmed_ns + 1)  # after its last sight: to be checked first
    assert source.code_lifetime(4243, begin + 8) is None
    jvm.free(10, 8)
    jvm.nmethod(10, 8, other, 78, [other], [(64, 0)], b"")
    source.expand(pid, lifetime.confirmed_ns + 1, begin + 8)  # finds the new code
    after = _now()
    assert source.expand(pid, after, begin + 8)[0].name == "Other.spin(long)"
    assert not lifetime.names_sample_at(before)  # gone: its frames are not taken any more
    replaced = source.code_lifetime(pid, begin + 8)
    assert replaced is not lifetime and replaced.names_sample_at(after) and not replaced.names_sample_at(before)


def test_code_carved_from_the_end_of_a_freed_blob_is_never_named_with_the_old_method():
    """HotSpot carves new code from the end of a free block: a freed blob's
    header stays at the block's start, word for word, while other code runs
    at its pcs (a churning JVM at half speed once had a phase's samples
    named with a method seven phases gone). Its block's used flag says it
    is gone."""
    jvm = Jvm()
    run, _step, _leaf = hot_class(jvm)
    other = jvm.klass("Other", "Other.java", [("spin", "(J)J", [(0, 7)])])[0]
    begin = jvm.nmethod(10, 14, run, 77, [run], [(64, 0)], b"", code_size=512)
    source, pid = compiling_source(jvm)
    pc = begin + 200
    assert source.expand(pid, _now(), pc)[0].name == "Hot.run(long)"
    jvm.free(10, 14)
    carved = jvm.nmethod(12, 7, other, 78, [other], [(64, 0)], b"")
    assert carved <= pc < carved + 128
    # Not the old method: when the new code came is not known, so the sample
    # that finds it is nobody's; the ones after its first read are its.
    assert source.expand(pid, _now(), pc) == (UNKNOWN_JIT,)
    assert source.expand(pid, _now(), pc)[0].name == "Other.spin(long)"


class _CountingThread:
    """A MemoryThread on the caller's thread that counts its trips, by the thread that made them."""

    def __init__(self) -> None:
        self.trips: list[str] = []

    def run(self, operation):  # noqa: ANN001, ANN201
        self.trips.append(threading.current_thread().name)
        return operation()

    def close(self) -> None:
        return None


def test_blobs_seen_again_are_checked_in_one_trip_and_naming_waits_for_it(monkeypatch):
    """A busy JVM's samples find the same blobs again and again, each newer
    than its last sight: the reader checks them all in one trip a batch,
    and naming waits for that trip instead of making one per blob."""
    monkeypatch.setattr(hotspot_source, "AHEAD_WAIT_S", 60.0)  # however slow this machine's reader is
    jvm = Jvm()
    methods = hot_class(jvm)
    begins = [
        jvm.nmethod(10 + 8 * index, 8, method, 77 + index, [method], [(64, 0)], b"") for index, method in enumerate(methods)
    ]
    memory_thread = _CountingThread()
    source, pid = compiling_source(jvm, memory_thread)
    leaf, callers = begins[2] + 8, (begins[1] + 9, begins[0] + 9)  # callers: return addresses

    def sample_now() -> RawSample:
        return RawSample(pid, pid, 0, _now(), "java", (leaf, *callers), WalkEnd.COMPLETE, -1, True)

    source._thread = threading.Thread(target=source._run, name="reader", daemon=True)
    source._thread.start()
    try:
        for _round in range(3):
            memory_thread.trips.clear()
            sample = sample_now()
            source.note_sample(sample)
            names = [source.expand(pid, sample.time_ns, leaf)[0].name] + [
                source.expand(pid, sample.time_ns, address - 1, caller=True)[0].name for address in callers
            ]
            assert names == ["Hot.leaf(long)", "Hot.step(long)", "Hot.run(long)"]
            assert "MainThread" not in memory_thread.trips
        assert memory_thread.trips == ["reader"]  # the three blobs known: one check for all
        # Freed since: the reader's check retires it, and naming does not take the old method.
        jvm.free(26, 8)
        memory_thread.trips.clear()
        sample = sample_now()
        source.note_sample(sample)
        assert source.expand(pid, sample.time_ns, leaf) == (UNKNOWN_JIT,)
        assert source.expand(pid, sample.time_ns, callers[0] - 1, caller=True)[0].name == "Hot.step(long)"
        assert "MainThread" not in memory_thread.trips
    finally:
        source.close()


class _FreeingThread(_CountingThread):
    """Frees a block of the fake JVM's code cache as its trip number `at` begins."""

    def __init__(self, jvm: Jvm, at: int, block: tuple[int, int]) -> None:
        super().__init__()
        self.jvm, self.at, self.block = jvm, at, block

    def run(self, operation):  # noqa: ANN001, ANN201
        if len(self.trips) + 1 == self.at:
            self.jvm.free(*self.block)
        return super().run(operation)


def _inlining_pair(jvm: Jvm) -> tuple[int, int]:
    """Two nmethods, each of run with step and leaf inlined at its pc 48; where their code begins."""
    run, step, leaf = hot_class(jvm)
    data, innermost = scopes([(1, 5), (2, 3), (3, 2)], 0)
    table = [(-1, 0), (48, innermost), (96, 0)]
    first = jvm.nmethod(10, 8, run, 77, [run, step, leaf], table, data, [96])
    second = jvm.nmethod(18, 8, run, 78, [run, step, leaf], table, data, [96])
    return first, second


def _read_ahead_of_naming(source: HotSpotStructures, pid: int, addresses: tuple[int, ...]) -> int:
    """A sample the reader takes before naming; its time."""
    sample = RawSample(pid, pid, 0, _now(), "java", addresses, WalkEnd.COMPLETE, -1, True)
    source.note_sample(sample)
    return sample.time_ns


def test_a_batchs_new_code_is_read_and_checked_in_a_trip_each(monkeypatch):
    """A compiling JVM's samples run in new nmethods batch after batch: the
    reader reads the batch's new blobs in one trip, the methods a pc's
    scopes name in one, and checks each blob is still there after its
    methods were read in one more; naming then makes none."""
    monkeypatch.setattr(hotspot_source, "AHEAD_WAIT_S", 60.0)  # however slow this machine's reader is
    jvm = Jvm()
    first, second = _inlining_pair(jvm)
    source = HotSpotStructures(None, lambda _pid: True)
    pid = 4242
    memory_thread = _CountingThread()
    reader = HotSpotReader(jvm.memory, LAYOUT, BIAS)
    source._jvms[pid] = _Jvm(
        pid, 0.0, reader, memory_thread, (CODE, CODE), ((CODE, CODE + len(jvm.code)),), reader.unloading_count()
    )
    source._thread = threading.Thread(target=source._run, name="reader", daemon=True)
    source._thread.start()
    try:
        leaf, caller = first + 40, second + 48  # the caller's return address: its call's record is there
        time_ns = _read_ahead_of_naming(source, pid, (leaf, caller))
        names = [frame.name for frame in source.expand(pid, time_ns, leaf)]
        names += [frame.name for frame in source.expand(pid, time_ns, caller - 1, caller=True)]
        assert names == ["Hot.run(long)", "Hot.step(long)", "Hot.leaf(long)"] * 2
        # The blobs, the three Methods (with the GC count), the check: one trip each, none from naming.
        assert memory_thread.trips == ["reader"] * 3
    finally:
        source.close()


def test_frames_read_from_a_blob_freed_before_its_check_are_not_kept(monkeypatch):
    """The methods a blob's pcs name were its methods only if it was still
    there after they were read: a blob freed before the reader's check
    names nothing, the other of the batch its methods."""
    monkeypatch.setattr(hotspot_source, "AHEAD_WAIT_S", 60.0)
    jvm = Jvm()
    first, second = _inlining_pair(jvm)
    source = HotSpotStructures(None, lambda _pid: True)
    pid = 4242
    reader = HotSpotReader(jvm.memory, LAYOUT, BIAS)
    memory_thread = _FreeingThread(jvm, 3, (10, 8))  # the first nmethod freed as the check begins
    source._jvms[pid] = _Jvm(
        pid, 0.0, reader, memory_thread, (CODE, CODE), ((CODE, CODE + len(jvm.code)),), reader.unloading_count()
    )
    source._thread = threading.Thread(target=source._run, name="reader", daemon=True)
    source._thread.start()
    try:
        leaf, caller = first + 40, second + 48
        time_ns = _read_ahead_of_naming(source, pid, (leaf, caller))
        assert source.expand(pid, time_ns, leaf) == (UNKNOWN_JIT,)
        assert source.expand(pid, time_ns, caller - 1, caller=True)[0].name == "Hot.run(long)"
        assert memory_thread.trips[:3] == ["reader"] * 3
        # Retired with nothing named from it: a sample from while it was seen finds no methods read after.
        (freed,) = source._jvms[pid].retired
        assert freed.start == first and freed.frames == {}
    finally:
        source.close()


def test_naming_does_not_wait_for_a_sample_the_reader_never_had(monkeypatch):
    monkeypatch.setattr(hotspot_source, "AHEAD_WAIT_S", 60.0)  # a wait would be plain on any machine
    jvm = Jvm()
    run, _step, _leaf = hot_class(jvm)
    begin = jvm.nmethod(10, 8, run, 77, [run], [(64, 0)], b"")
    memory_thread = _CountingThread()
    source, pid = compiling_source(jvm, memory_thread)
    assert source.expand(pid, _now(), begin + 8)[0].name == "Hot.run(long)"
    source._thread = threading.Thread(target=source._run, name="reader", daemon=True)
    source._thread.start()
    try:
        memory_thread.trips.clear()
        started = _now()
        assert source.expand(pid, _now(), begin + 8)[0].name == "Hot.run(long)"  # its queue was full, say
        assert _now() - started < 30_000_000_000  # not the reader's wait (60 s)
        assert memory_thread.trips == ["MainThread"]  # it checked the blob itself
    finally:
        source.close()


def compiling_source(jvm: Jvm, thread: object | None = None) -> tuple[HotSpotStructures, int]:
    """A source reading the fake JVM's compiled code (its memory read on
    thread, else on the caller's), and its pid."""
    source = HotSpotStructures(None, lambda _pid: True)
    pid = 4242
    source._jvms[pid] = _Jvm(
        pid, 0.0, HotSpotReader(jvm.memory, LAYOUT, BIAS), thread or _Thread(), (CODE, CODE), ((CODE, CODE + len(jvm.code)),)
    )
    return source, pid


def interpreting_source(jvm: Jvm) -> tuple[HotSpotStructures, int]:
    """A source reading the fake JVM's interpreted frames (its GC count known), and its pid."""
    source = HotSpotStructures(None, lambda _pid: True)
    pid = 4242
    reader = HotSpotReader(jvm.memory, LAYOUT, BIAS)
    source._jvms[pid] = _Jvm(
        pid, 0.0, reader, _Thread(), (CODE, CODE + 256), ((CODE, CODE + len(jvm.code)),), reader.unloading_count()
    )
    return source, pid


def test_interpreted_frames_are_named_from_the_method_and_bytecode_pointer():
    jvm = Jvm()
    run, step, leaf = hot_class(jvm)
    source, pid = interpreting_source(jvm)
    const_at = jvm.memory.word(step + 8)
    bytecodes = const_at + LAYOUT.const_method_size

    def record(method: int, bcp: int, collections: int = 3) -> V8FrameSlots:
        return V8FrameSlots(0, method, collections + 1, bcp, V8_NO_BYTECODE_OFFSET, True)

    now = _now()
    named = source.expand_recorded(pid, CODE + 8, record(step, bytecodes + 3), True, now)
    assert named is not None and [(frame.name, frame.line, frame.tier) for frame in named.frames] == [
        ("Hot.step(long)", 31, "interpreted")
    ]
    assert source.expand_recorded(pid, CODE + 8, record(step, bytecodes + 4000), True, now) is None  # not its bytecode
    assert source.expand_recorded(pid, CODE + 8, record(0xDEAD000, bytecodes), True, now) is None
    # A sample older than the first read, with a collection between (that may
    # have freed the method it ran and put another there), is nobody's.
    leaf_bytecodes = jvm.memory.word(leaf + 8) + LAYOUT.const_method_size
    jvm.collections(4)
    assert source.expand_recorded(pid, CODE + 8, record(leaf, leaf_bytecodes + 1), True, _now() - 1000) is None
    # Without one, the method read now is the one it ran.
    assert source.expand_recorded(
        pid, CODE + 8, record(run, jvm.memory.word(run + 8) + LAYOUT.const_method_size, 4), True, _now() - 1000
    )
    # The GC count not read (0): only samples from after the first read are named.
    assert source.expand_recorded(
        pid, CODE + 8, V8FrameSlots(0, step, 0, bytecodes + 3, V8_NO_BYTECODE_OFFSET, True), True, _now()
    )


def test_a_late_first_read_is_vouched_for_by_the_samples_own_gc_count():
    """A busy naming thread reaches a sample long after it was taken: the
    method read first then names it if the JVM's count is the sample's (no
    collection since to free it), and nobody's otherwise."""
    jvm = Jvm()
    run, step, leaf = hot_class(jvm)
    source, pid = interpreting_source(jvm)

    def record(method: int, collections: int) -> V8FrameSlots:
        bytecodes = jvm.memory.word(method + 8) + LAYOUT.const_method_size
        return V8FrameSlots(0, method, collections, bytecodes + 1, V8_NO_BYTECODE_OFFSET, True)

    long_ago = _now() - 2 * EARLY_SLACK_NS
    named = source.expand_recorded(pid, CODE + 8, record(step, 3 + 1), True, long_ago)  # the count then: 3, as now
    assert named is not None and [frame.name for frame in named.frames] == ["Hot.step(long)"]
    assert source.expand_recorded(pid, CODE + 8, record(run, 0), True, long_ago) is None  # no count with it
    jvm.collections(4)
    assert source.expand_recorded(pid, CODE + 8, record(leaf, 3 + 1), True, long_ago) is None  # one since


def test_an_endless_segment_map_ends():
    jvm = Jvm()
    for index in range(len(jvm.segmap)):
        jvm.segmap[index] = 0 if index == 0 else 1  # every segment one back: a walk of 1,023 steps to the start
    jvm.segmap[0] = 0x7F  # and the start points before the map
    jvm.publish()
    reader = HotSpotReader(jvm.memory, LAYOUT, BIAS)
    assert reader.blob_at(CODE + 1000 * SEGMENT) is None


class _Thread:
    """A MemoryThread that runs on the caller's thread (the test's memory never blocks)."""

    def run(self, operation):  # noqa: ANN001, ANN201
        return operation()

    def close(self) -> None:
        return None


def _now() -> int:
    import time  # noqa: PLC0415

    return time.monotonic_ns()


class Tables:
    """gHotSpotVMStructs and gHotSpotVMTypes laid out as libjvm.so builds them."""

    STRUCT_STRIDE, TYPE_STRIDE = 48, 40

    def __init__(self) -> None:
        self.jvm = Jvm()
        self.symbols = {name: 0x2000 + 8 * index for index, name in enumerate(layout_symbols())}
        offsets = {
            "gHotSpotVMStructEntryArrayStride": self.STRUCT_STRIDE,
            "gHotSpotVMStructEntryTypeNameOffset": 0,
            "gHotSpotVMStructEntryFieldNameOffset": 8,
            "gHotSpotVMStructEntryTypeStringOffset": 16,
            "gHotSpotVMStructEntryIsStaticOffset": 24,
            "gHotSpotVMStructEntryOffsetOffset": 32,
            "gHotSpotVMStructEntryAddressOffset": 40,
            "gHotSpotVMTypeEntryArrayStride": self.TYPE_STRIDE,
            "gHotSpotVMTypeEntryTypeNameOffset": 0,
            "gHotSpotVMTypeEntrySizeOffset": 32,
        }
        for name, value in offsets.items():
            self.jvm.memory.put(BIAS + self.symbols[name], struct.pack("<Q", value))

    def string(self, text: str) -> int:
        return self.jvm.allocate(text.encode() + b"\0")

    def lay_out(self, types: dict[str, int], fields: list[tuple[str, str, str, int, bool]], end: bool = True) -> None:
        type_table = b"".join(struct.pack("<QQiiiiQ", self.string(name), 0, 0, 0, 0, 0, size) for name, size in types.items())
        struct_table = b"".join(
            struct.pack(
                "<QQQi4xQQ",
                self.string(type_name),
                self.string(field),
                self.string(declared),
                int(static),
                0 if static else value,
                BIAS + value if static else 0,
            )
            for type_name, field, declared, value, static in fields
        )
        ending = (bytes(self.TYPE_STRIDE), bytes(self.STRUCT_STRIDE)) if end else (b"", b"")
        self.jvm.memory.put(BIAS + self.symbols["gHotSpotVMTypes"], struct.pack("<Q", self.jvm.allocate(type_table + ending[0])))
        self.jvm.memory.put(
            BIAS + self.symbols["gHotSpotVMStructs"], struct.pack("<Q", self.jvm.allocate(struct_table + ending[1]))
        )


def layout_symbols() -> list[str]:
    from profiler.jit.jvm.hotspot import layout  # noqa: PLC0415

    return list(layout._SYMBOLS)


def test_introspection_tables_are_read_for_the_wanted_types_only():
    from profiler.jit.jvm.hotspot.layout import read_tables  # noqa: PLC0415

    tables = Tables()
    tables.lay_out(
        {"Symbol": 8, "u2": 2, "Unwanted": 64},
        [
            ("Symbol", "_length", "u2", 4, False),
            ("Symbol", "_body", "u1", 6, False),
            ("Unwanted", "_field", "int", 12, False),
            ("CodeCache", "_heaps", "GrowableArray<CodeHeap*>*", 0x1000, True),
        ],
    )
    read = read_tables(tables.jvm.memory, tables.symbols, BIAS)
    assert read.sizes["Symbol"] == 8 and read.fields[("Symbol", "_length")] == Field(4, 2)
    assert ("Unwanted", "_field") not in read.fields
    assert read.statics[("CodeCache", "_heaps")] == 0x1000  # a file address: the bias taken off


def test_introspection_tables_that_lie_are_refused():
    from profiler.jit.jvm.hotspot.layout import read_tables  # noqa: PLC0415

    tables = Tables()
    tables.lay_out({"Symbol": 8}, [("Symbol", "_length", "u2", 4, False)] * 320, end=False)  # 320 entries: no padding after
    with pytest.raises(LayoutError):  # no entry ends the table: read up to the end of what is there, then refused
        read_tables(tables.jvm.memory, tables.symbols, BIAS)
    tables = Tables()
    tables.jvm.memory.put(BIAS + tables.symbols["gHotSpotVMStructEntryArrayStride"], struct.pack("<Q", 1 << 20))
    tables.lay_out({"Symbol": 8}, [])
    with pytest.raises(LayoutError, match="malformed"):
        read_tables(tables.jvm.memory, tables.symbols, BIAS)


def test_collectors_that_free_classes_outside_pauses_are_known():
    """Under ZGC or Shenandoah a class is freed while the program runs: the GC count vouches for nothing."""
    jvm = Jvm()
    reader = HotSpotReader(jvm.memory, LAYOUT, BIAS)
    assert reader.unloads_classes_concurrently() is False
    jvm.memory.put(BIAS + 0x1010, b"\x01\x00\x01")  # -XX:+PreserveFramePointer -XX:+UseShenandoahGC
    assert reader.unloads_classes_concurrently() is True
    unknown = dataclasses.replace(LAYOUT, preserve_frame_pointer_at=-1, concurrent_unloading_flags_at=())
    assert HotSpotReader(jvm.memory, unknown, BIAS).unloads_classes_concurrently() is None  # the flags were not read


def test_what_counts_a_jvms_chances_to_unload_classes():
    """The collections of a collector that unloads in its own pauses; G1's
    count moves a pause after it unloads: its safepoints', odd while one runs
    (an unloading may still come before the count moves), or none."""
    jvm = Jvm()
    reader = HotSpotReader(jvm.memory, LAYOUT, BIAS)
    collections = reader.unloading_count()
    assert collections is not None and collections.address == jvm.collected_heap + 0x40
    assert collections.vouches(3) and collections.vouches(4)
    jvm.memory.put(BIAS + 0x1010, b"\x01\x00\x00\x01")  # -XX:+UseG1GC
    assert reader.unloading_count() is None
    counted = HotSpotReader(jvm.memory, dataclasses.replace(LAYOUT, safepoint_counter_at=0x1020), BIAS)
    safepoints = counted.unloading_count()
    assert safepoints is not None and safepoints.address == BIAS + 0x1020
    assert safepoints.vouches(6) and not safepoints.vouches(7)
    jvm.memory.put(BIAS + 0x1010, b"\x01\x01\x00\x00")  # -XX:+UseZGC: nothing counts its unloading
    assert counted.unloading_count() is None


def test_a_method_read_while_a_safepoint_runs_is_not_vouched_for():
    """The safepoint counter odd at the read: the count unchanged at a later
    sample does not say the Method outlived that safepoint."""
    jvm = Jvm()
    _run, step, leaf = hot_class(jvm)
    source, pid = interpreting_source(jvm)
    jvm.memory.put(BIAS + 0x1020, struct.pack("<Q", 7))
    source._jvms[pid].unloading = UnloadingCount(BIAS + 0x1020, counts_safepoints=True)

    def name(method: int, counted: int) -> str | None:
        bytecodes = jvm.memory.word(method + 8) + LAYOUT.const_method_size
        slots = V8FrameSlots(0, method, counted + 1, bytecodes + 3, V8_NO_BYTECODE_OFFSET, True)
        named = source.expand_recorded(pid, CODE + 8, slots, True, _now() - 1000)  # sampled just before the read
        return named.frames[0].name if named is not None else None

    assert name(step, 7) is None
    jvm.memory.put(BIAS + 0x1020, struct.pack("<Q", 8))
    assert name(leaf, 8) == "Hot.leaf(long)"


def test_a_jvm_refused_after_it_was_watched_is_said_at_the_end():
    """A refusal the attach note did not say (the JVM was still starting then) is said once the run ends."""
    source = HotSpotStructures(None, lambda _pid: True)
    told, untold = _Jvm(10, 0.0), _Jvm(11, 0.0)
    source._refuse(told, "its memory did not answer")
    assert source.refused(10) == "its memory did not answer"  # said by the attach note
    source._refuse(untold, "the kernel's table of JIT processes is full")
    source.forget(11)  # the JVM exited: its refusal is still said
    notes = [line for line in source.warnings() if "could not be read" in line]
    assert len(notes) == 1 and "(pid 11)" in notes[0] and "table of JIT processes is full" in notes[0]


def test_a_jvm_without_frame_pointers_gives_the_kernel_its_frame_sizes():
    """What the kernel needs to step over compiled frames by their size, from
    the layout and the code heaps; refused when a field lies past the blob's
    first 64 bytes (what the kernel reads) or a heap count it cannot hold."""
    layout = dataclasses.replace(LAYOUT, blob_frame_size=28, blob_frame_complete=20, blob_frame_complete_bytes=4)
    heaps = (CodeHeap(0x10000, 0x20000, 0x90000, 7), CodeHeap(0x20000, 0x30000, 0x91000, 7))
    code = frame_size_walk(layout, heaps)
    assert code == HotSpotCode(
        heaps=((0x10000, 0x20000, 0x90000), (0x20000, 0x30000, 0x91000)),
        log2_segment=7,
        block_header=16,
        frame_size_at=28,
        frame_complete_at=20,
        frame_complete_bytes=4,
        code_begin_at=16,
        code_begin_is_offset=False,
    )
    # The blob's name: the kernel tells the stubs that keep no frame by it.
    assert frame_size_walk(dataclasses.replace(layout, blob_name=96), heaps).name_at == 96
    kernel = KernelMaps({}, {}, 1)  # refusals are decided before any map is touched
    assert not kernel.set_hotspot_code(1, dataclasses.replace(code, frame_size_at=60))
    assert not kernel.set_hotspot_code(1, dataclasses.replace(code, frame_size_at=-1))  # not in the tables
    assert not kernel.set_hotspot_code(1, dataclasses.replace(code, heaps=code.heaps * 2))
    assert not kernel.set_hotspot_code(1, dataclasses.replace(code, frame_complete_bytes=2, frame_complete_at=21))


class _SteppingKernel:
    """The kernel's side of a JVM's set-up: it takes every JVM."""

    def hotspot_walker_problem(self) -> str | None:
        return None

    def set_hotspot_process(self, pid: int, interpreter: tuple[int, int], gc_count_at: int) -> bool:
        return True

    def set_hotspot_code(self, pid: int, code: HotSpotCode) -> bool:
        return True

    def clear_v8_process(self, pid: int) -> None:
        return None


def test_a_leaf_in_a_prologue_or_epilogue_sampled_before_the_kernel_stepped_the_jvm_skipped_its_caller():
    """Until the kernel knows a JVM's code heaps, its walk of a JVM that
    keeps frame pointers is by frame pointers alone: a leaf caught before its
    compiled method's frame is built, or after it is taken down, has its
    caller's rbp, and the step from it skips that caller (main went missing
    under run so). Such a sample's callers are not the leaf's; once the
    kernel steps the JVM's code, it handles those leaves itself."""
    layout = dataclasses.replace(LAYOUT, blob_frame_complete=12, blob_frame_complete_bytes=4)
    jvm = Jvm()
    run, _step, _leaf = hot_class(jvm)
    begin = jvm.nmethod(10, 8, run, 77, [run], [(64, 0)], b"")
    struct.pack_into("<i", jvm.code, 10 * SEGMENT + layout.heap_block_size + 12, 16)  # the frame whole 16 bytes in
    jvm.code[begin - CODE + 100 : begin - CODE + 102] = b"\x5d\xc3"  # pop rbp; ret
    jvm.publish()
    source = HotSpotStructures(_SteppingKernel(), lambda _pid: True)
    pid = 4242
    ready = _Jvm(pid, 0.0, HotSpotReader(jvm.memory, layout, BIAS), _Thread(), (CODE, CODE), ((CODE, CODE + len(jvm.code)),))
    ready.preserves_frame_pointers = True
    source._jvms[pid] = ready
    before = _now()
    for pc in (begin + 4, begin + 40, begin + 100):
        assert source.expand(pid, before, pc)[0].name == "Hot.run(long)"
    assert [source.leaf_caller_skipped(pid, before, pc) for pc in (begin + 4, begin + 40, begin + 100)] == [True, False, True]
    assert not source.leaf_caller_skipped(pid, before, 0x1000)  # not the JVM's code
    ready.kernel_steps_since_ns = _now()
    assert source.leaf_caller_skipped(pid, before, begin + 4)  # still walked without it then
    assert not source.leaf_caller_skipped(pid, _now(), begin + 4) and not source.leaf_caller_skipped(pid, _now(), begin + 100)
    ready.preserves_frame_pointers = False  # stepped by frame sizes: the walk ends at compiled code, as it says
    assert not source.leaf_caller_skipped(pid, before, begin + 4)


def test_a_build_whose_tables_do_not_check_out_is_read_again_after_a_growing_pause_then_refused(monkeypatch):
    """A user's fake JVM forks children, each mapping the same fake libjvm.so:
    its tables are read at most once a pause (doubling to 2 s), whatever JVM
    asks, and after failing for 5 s the build is refused without a read."""
    from profiler.jit.jvm.hotspot import layout  # noqa: PLC0415

    tables = Tables()
    tables.lay_out({"Symbol": 8}, [("Symbol", "_length", "u2", 4, False)])  # no code heaps: refused as incomplete
    identity = (1, 2, 3)
    monkeypatch.setattr(layout, "opened_libjvm", lambda _path: contextlib.nullcontext((identity, lambda: tables.symbols)))
    monkeypatch.setattr(layout, "_failures", {})
    monkeypatch.setattr(layout, "_layouts", {})
    clock = [1000.0]
    monkeypatch.setattr(layout.time, "monotonic", lambda: clock[0])
    reads_at: list[float] = []
    for _ in range(200):  # four JVMs of the build asking every 0.05 s, for 10 s
        before = tables.jvm.memory.reads
        with pytest.raises(LayoutError) as raised:
            layout.layout_of(tables.jvm.memory, "/proc/1/map_files/x", BIAS)
        if tables.jvm.memory.reads != before:
            reads_at.append(clock[0])
        clock[0] += 0.05
    pauses = [round(later - earlier, 2) for earlier, later in zip(reads_at, reads_at[1:], strict=False)]
    # Read at the first ask after each pause (asks come every 0.05 s): 6 reads, not 200.
    assert [pause - wanted for pause, wanted in zip(pauses, [0.2, 0.4, 0.8, 1.6, 2.0], strict=True)] == pytest.approx(
        [0.05] * 5, abs=0.011
    ), pauses
    assert isinstance(raised.value, layout.BuildRefused)
    # A build that reads well once is remembered as such, its failures forgotten.
    layout._failures.clear()
    good = Tables()
    good.lay_out({"Symbol": 8}, [])
    symbol_reads = []
    monkeypatch.setattr(
        layout, "opened_libjvm", lambda _path: contextlib.nullcontext(((4, 5, 6), lambda: symbol_reads.append(1) or good.symbols))
    )
    monkeypatch.setattr(layout, "layout_from_tables", lambda _memory, _tables, _bias: LAYOUT)
    assert layout.layout_of(good.jvm.memory, "/proc/2/map_files/x", BIAS) is LAYOUT and layout._failures == {}
    # Another JVM of the build: known by the file's identity, its symbols not read again.
    assert layout.layout_of(good.jvm.memory, "/proc/3/map_files/x", BIAS) is LAYOUT and symbol_reads == [1]


def test_a_segment_map_of_ones_is_walked_a_bounded_number_of_hops():
    """A map whose every byte says "one segment back" walked a whole heap,
    a segment a hop (4 ms a pc over a 64 Ki-segment heap): the walk stops
    after 1,024 hops, within the first window read."""
    from profiler.jit.jvm.hotspot.objects import MAX_SEGMAP_HOPS, SEGMAP_WINDOW, CodeHeap  # noqa: PLC0415

    segments = 1 << 20
    memory = LaidOutMemory()
    memory.put(CODE + 0x100_0000, b"\x01" * segments)
    reader = HotSpotReader(memory, LAYOUT, BIAS)
    heap = CodeHeap(CODE, CODE + segments * SEGMENT, CODE + 0x100_0000, 6)
    assert reader._block_start(heap, segments - 1) is None
    assert MAX_SEGMAP_HOPS <= SEGMAP_WINDOW and memory.reads == 1


def test_a_method_is_vouched_for_by_the_gc_count_until_a_collection(monkeypatch):
    """A class is freed only in a collection: a Method read before a sample,
    with the count unchanged since, is not read again (a deep stack's worth
    of Methods per sample on a busy JVM); after a collection it is."""
    jvm = Jvm()
    _run, step, _leaf = hot_class(jvm)
    source, pid = interpreting_source(jvm)
    bytecodes = jvm.memory.word(step + 8) + LAYOUT.const_method_size
    reads = []
    method = HotSpotReader.method
    monkeypatch.setattr(HotSpotReader, "method", lambda self, address: reads.append(address) or method(self, address))

    def name(collections: int) -> str | None:
        slots = V8FrameSlots(0, step, collections + 1, bytecodes + 3, V8_NO_BYTECODE_OFFSET, True)
        named = source.expand_recorded(pid, CODE + 8, slots, True, _now())
        return named.frames[0].name if named is not None else None

    jvm.collections(3)
    assert name(3) == "Hot.step(long)" and len(reads) == 1
    assert name(3) == "Hot.step(long)" and name(3) == "Hot.step(long)"
    assert len(reads) == 1  # the count, not the Method, read again
    jvm.collections(4)
    assert name(4) == "Hot.step(long)" and len(reads) == 2  # a collection since: read again whole
