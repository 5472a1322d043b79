"""V8's objects as read from a live process: type tags, strings, functions'
shared info, scripts, bytecode and code. Everything here is the target's
memory: each pointer's tag and each object's type is checked before it is
followed, each length is capped, each loop bounded. What does not check
out reads as None (the frame stays unnamed): never a guess."""

from __future__ import annotations

import bisect
import struct
from array import array
from dataclasses import dataclass

from profiler.jit.v8.heap.layout import POINTER, V8Layout
from profiler.kernel.process_memory import USER_SPACE_END, ProcessMemory

HEAP_OBJECT_TAG = 1
TAG_MASK = 3
MAX_NAME_CHARS = 1024  # a function's or script's name
MAX_SOURCE_CHARS = 64 << 20  # a script's source, read to find its lines
MAX_STRING_DEPTH = 32  # cons and sliced strings within strings
MAX_TABLE_BYTES = 4 << 20  # a position table, or the line ends of a script
MAX_LINE_ENDS = MAX_TABLE_BYTES // 8  # a script's lines known, from V8's table (words) or counted in its source
MAX_SCOPE_SLOTS = 16  # ScopeInfo slots searched for the name and positions, past the locals
SCOPE_HEAD_SLOTS = 8
SCOPE_NEEDED_SLOTS = 5  # of the head: the flags and counts, and (V8 12.8 on) the positions at 3 and 4
INFERRED_NAME_DISTANCE = 2  # slots from the function's name to its inferred name  # flags, counts and (V8 12.8 on) positions
MAX_CONTEXT_LOCALS = 1 << 20
SCOPE_TYPE_MASK = 0xF  # a ScopeInfo's flags begin with its scope type
TOP_LEVEL_SCOPES = (1, 3, 4)  # eval, module, script: their code begins at 0
MAX_INLINED_LOCAL_NAMES = 75  # past this V8 keeps a scope's local names in a hash table (one slot)
EXTERNAL_RESOURCE_DATA = 24
CODE_SCAN_SPANS = (4 << 10, 64 << 10, 512 << 10)  # how far before a pc its code's header is looked for
CODE_STEP = 32  # instructions start at least this aligned
PAGE_BYTES = 4096  # what memory is mapped by
MAX_MAPS_SEEN = 4096  # an external string's cached pointer to its characters
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_S32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")
_SIGN_CLEAR = bytes(range(0x80))  # a word's top byte without its sign bit


def is_heap_object(tagged: int) -> bool:
    return tagged & TAG_MASK == HEAP_OBJECT_TAG and tagged > 0xFFFF


def _may_be_object(word: int) -> bool:
    """Can word point to an object (8-aligned, tagged, in user space)?"""
    return word & 7 == HEAP_OBJECT_TAG and 0xFFFF < word < USER_SPACE_END


def is_smi(word: int) -> bool:
    return word & 0xFFFFFFFF == 0  # 64-bit Smis (node has no pointer compression): the value in the upper half


def smi_value(word: int) -> int:
    return _S32.unpack(_U32.pack(word >> 32))[0]


@dataclass(frozen=True)
class Script:
    """A script read from the heap: its name and where its lines end."""

    name: str
    line_ends: array | None  # offset of each line's end (its newline), ascending; None: not known

    def position(self, offset: int) -> tuple[int, int] | None:
        """(line, column), both 1-based, of a source offset."""
        if self.line_ends is None or offset < 0:
            return None
        line = bisect.bisect_left(self.line_ends, offset)
        if line >= len(self.line_ends) and (not self.line_ends or offset > self.line_ends[-1]):
            return None
        start = self.line_ends[line - 1] + 1 if line > 0 else 0
        return line + 1, offset - start + 1


@dataclass(frozen=True)
class SharedInfo:
    """A JS function as V8 shares it among its closures."""

    name: str
    script: Script | None
    start: int  # source offset where the function begins, -1 if unknown


@dataclass(frozen=True)
class CodeInfo:
    """What naming needs of a Code object read from the heap."""

    kind: int
    instruction_start: int
    instruction_size: int
    positions: bytes  # source-position table (baseline: pc to bytecode offsets)
    deoptimization_data: int  # tagged; 0 if none


class HeapReader:
    def __init__(self, memory: ProcessMemory, layout: V8Layout) -> None:
        self.memory = memory
        self.layout = layout
        # Map -> instance type: a process has a few thousand maps, and a map
        # never changes its type (a map that died and whose place another
        # object took reads as a wrong type at worst: every use checks more).
        self._map_types: dict[int, int | None] = {}

    # Objects -----------------------------------------------------------

    def instance_type(self, tagged: int) -> int | None:
        if not is_heap_object(tagged):
            return None
        map_word = self.memory.word(tagged - HEAP_OBJECT_TAG)
        if map_word is None or not is_heap_object(map_word):
            return None
        return self.map_type(map_word)

    def map_type(self, map_word: int) -> int | None:
        """The instance type a Map (tagged) gives its objects."""
        if map_word in self._map_types:
            return self._map_types[map_word]
        data = self.memory.read(map_word - HEAP_OBJECT_TAG + self.layout.map_instance_type, 2)
        kind = _U16.unpack(data)[0] if data is not None else None
        if len(self._map_types) >= MAX_MAPS_SEEN:
            self._map_types.clear()
        self._map_types[map_word] = kind
        return kind

    def field(self, tagged: int, offset: int) -> int | None:
        return self.memory.word(tagged - HEAP_OBJECT_TAG + offset)

    def array_bytes(self, tagged: int, types: frozenset[int], header: int, element_size: int) -> bytes | None:
        """The elements of a (byte or fixed) array of one of types."""
        if self.instance_type(tagged) not in types:
            return None
        length_word = self.field(tagged, self.layout.array_length)
        if length_word is None or not is_smi(length_word):
            return None
        length = smi_value(length_word) * element_size
        if not 0 <= length <= MAX_TABLE_BYTES:
            return None
        if length == 0:
            return b""
        return self.memory.read(tagged - HEAP_OBJECT_TAG + header, length)

    def byte_array(self, tagged: int) -> bytes | None:
        return self.array_bytes(tagged, self.layout.type_byte_arrays, self.layout.array_data, 1)

    def smi_array(self, tagged: int) -> array | None:
        """A FixedArray of Smis as their values, or None if it is not one or
        any is negative. Checked and converted in bulk: a script's line ends
        (tsc's 140,000) cost 53 ms element by element, 1.3 ms so."""
        data = self.array_bytes(tagged, self.layout.type_fixed_arrays, self.layout.array_data, POINTER)
        if data is None:
            return None
        zero = bytes(len(data) // POINTER)
        # A 64-bit Smi: its lower half zero, its value in the upper half.
        if any(data[index::POINTER] != zero for index in range(4)) or data[7::POINTER].translate(None, _SIGN_CLEAR):
            return None
        halves = array("I")
        halves.frombytes(data)
        return halves[1::2]

    # Strings -----------------------------------------------------------

    def string(self, tagged: int, max_chars: int = MAX_NAME_CHARS) -> str | None:
        """A String's text (one-byte, two-byte, cons, sliced, thin or
        external with cached data), cut at max_chars."""
        pieces: list[str] = []
        if not self._append_string(tagged, max_chars, pieces, 0):
            return None
        return "".join(pieces)[:max_chars]

    def _append_string(self, tagged: int, max_chars: int, pieces: list[str], depth: int) -> bool:
        layout = self.layout
        if depth > MAX_STRING_DEPTH:
            return False
        kind = self.instance_type(tagged)
        if kind is None or kind >= layout.first_nonstring_type:
            return False
        length_data = self.memory.read(tagged - HEAP_OBJECT_TAG + layout.string_length, 4)
        if length_data is None:
            return False
        length = _U32.unpack(length_data)[0]
        if length > MAX_SOURCE_CHARS:
            return False
        wanted = min(length, max_chars - sum(len(piece) for piece in pieces))
        if wanted <= 0:
            return True
        representation = kind & layout.string_representation_mask
        one_byte = kind & layout.string_encoding_mask == layout.one_byte_string_tag
        if representation == 0:  # sequential
            return self._append_chars(tagged - HEAP_OBJECT_TAG + layout.seq_string_chars, wanted, one_byte, pieces)
        if representation == layout.cons_string_tag:
            first, second = self.field(tagged, layout.cons_first), self.field(tagged, layout.cons_second)
            if first is None or second is None or not self._append_string(first, max_chars, pieces, depth + 1):
                return False
            return self._append_string(second, max_chars, pieces, depth + 1)
        if representation == layout.thin_string_tag:
            actual = self.field(tagged, layout.thin_actual)
            return actual is not None and self._append_string(actual, max_chars, pieces, depth + 1)
        if representation == layout.sliced_string_tag:
            parent, offset_word = self.field(tagged, layout.sliced_parent), self.field(tagged, layout.sliced_offset)
            if parent is None or offset_word is None or not is_smi(offset_word):
                return False
            whole = self.string(parent, smi_value(offset_word) + wanted) if depth < MAX_STRING_DEPTH else None
            if whole is None:
                return False
            pieces.append(whole[smi_value(offset_word) :][:wanted])
            return True
        if representation == layout.external_string_tag:
            data = self.field(tagged, EXTERNAL_RESOURCE_DATA)
            return data is not None and data != 0 and self._append_chars(data, wanted, one_byte, pieces)
        return False

    def _append_chars(self, address: int, count: int, one_byte: bool, pieces: list[str]) -> bool:
        data = self.memory.read(address, count if one_byte else 2 * count)
        if data is None:
            return False
        pieces.append(data.decode("latin-1") if one_byte else data.decode("utf-16-le", "replace"))
        return True

    def string_line_ends(self, tagged: int) -> array | None:
        """Where each line of a source String ends, in UTF-16 units, as V8 counts them."""
        text = self.string(tagged, MAX_SOURCE_CHARS)
        if text is None:
            return None
        ends = array("I")
        position = text.find("\n")
        while position >= 0:
            if len(ends) >= MAX_LINE_ENDS:  # as many as V8's own table may hold: later lines stay unknown
                return ends
            ends.append(position)
            position = text.find("\n", position + 1)
        ends.append(len(text))
        return ends

    # Functions ---------------------------------------------------------

    def shared_info(self, tagged: int, scripts: dict[int, Script]) -> SharedInfo | None:
        """A SharedFunctionInfo's name, script and start; scripts caches
        what was read of each script (by its address)."""
        layout = self.layout
        if self.instance_type(tagged) != layout.type_shared_function_info:
            return None
        name_or_scope = self.field(tagged, layout.shared_name_or_scope_info)
        if name_or_scope is None:
            return None
        name, start = "", -1
        kind = self.instance_type(name_or_scope)
        if kind == layout.type_scope_info:
            name, start = self._scope_name_and_start(name_or_scope)
        elif kind is not None and kind < layout.first_nonstring_type:
            name = self.string(name_or_scope) or ""
        script = None
        script_tagged = self.field(tagged, layout.shared_script)
        if script_tagged is not None and self.instance_type(script_tagged) == layout.type_script:
            script = scripts.get(script_tagged)
            if script is None:
                script = scripts[script_tagged] = self._script(script_tagged)
        return SharedInfo(name, script, start)

    def _scope_name_and_start(self, scope_info: int) -> tuple[str, int]:
        """A ScopeInfo's function name and start position. Its layout varies
        with the flags in it and V8's version; past the context locals, the
        first string is the name, and the positions are at fixed slots (V8
        12.8 on) or the first ascending pair of Smis after it. A script's
        own scope begins at 0."""
        layout = self.layout
        base = scope_info - HEAP_OBJECT_TAG + POINTER
        head = self._read_in_page(base, SCOPE_HEAD_SLOTS * POINTER)
        if head is None or len(head) < SCOPE_NEEDED_SLOTS * POINTER:
            return "", -1
        # Past the object's end, where its page ends the mapping: no slot (not a Smi).
        slots = [word for (word,) in _U64.iter_unpack(head)] + [HEAP_OBJECT_TAG] * (SCOPE_HEAD_SLOTS - len(head) // POINTER)
        flags, locals_word = slots[0], slots[layout.scope_info_context_locals]
        # V8 12.8 on keeps the flags as a raw word; before, as a Smi.
        if not is_smi(locals_word) or not (layout.scope_info_fixed_positions or is_smi(flags)):
            return "", -1
        local_count = smi_value(locals_word)
        if not 0 <= local_count <= MAX_CONTEXT_LOCALS:
            return "", -1
        start = -1
        if layout.scope_info_fixed_positions and is_smi(slots[3]) and is_smi(slots[4]):
            start = smi_value(slots[3])
        elif smi_value(flags) & SCOPE_TYPE_MASK in TOP_LEVEL_SCOPES:
            start = 0
        names_slots = 1 if local_count > MAX_INLINED_LOCAL_NAMES else local_count
        first = layout.scope_info_first_vars + names_slots + local_count
        data = self._read_in_page(base + first * POINTER, MAX_SCOPE_SLOTS * POINTER)
        if data is None:
            return "", start
        name = ""
        previous = 1  # not a Smi
        name_slot = -1
        for index, (word,) in enumerate(_U64.iter_unpack(data)):
            if not name and is_heap_object(word) and (name_slot < 0 or index - name_slot <= INFERRED_NAME_DISTANCE):
                kind = self.instance_type(word)
                if kind is not None and kind < layout.first_nonstring_type:
                    # The function's own name, then (when that is empty) the
                    # name inferred from where it was defined: "obj.method".
                    name = self.string(word) or ""
                    name_slot = index if name_slot < 0 else name_slot
                    if name and (layout.scope_info_fixed_positions or start == 0):
                        break
            if not layout.scope_info_fixed_positions and start < 0 and is_smi(word) and is_smi(previous):
                low, high = smi_value(previous), smi_value(word)
                if 0 <= low < high:
                    start = low
                    break
            previous = word
        return name, start

    def _read_in_page(self, address: int, length: int) -> bytes | None:
        """length bytes at address, or (a small object that ends a mapped
        region: the read past it fails) as many as its page holds, whole
        words; None if none."""
        data = self.memory.read(address, length)
        if data is not None:
            return data
        room = (PAGE_BYTES - address % PAGE_BYTES) // POINTER * POINTER
        return self.memory.read(address, room) if 0 < room < length else None

    def _script(self, tagged: int) -> Script:
        layout = self.layout
        name_tagged = self.field(tagged, layout.script_name)
        name = (self.string(name_tagged) if name_tagged is not None else None) or ""
        line_ends = None
        ends_tagged = self.field(tagged, layout.script_line_ends)
        if ends_tagged is not None:
            line_ends = self.smi_array(ends_tagged) or None
        if line_ends is None:
            source = self.field(tagged, layout.script_source)
            if source is not None:
                line_ends = self.string_line_ends(source)
        return Script(name, line_ends)

    # Code --------------------------------------------------------------

    def code(self, tagged: int) -> CodeInfo | None:
        layout = self.layout
        if self.instance_type(tagged) != layout.type_code:
            return None
        size = max(layout.code_flags, layout.code_instruction_size, layout.code_instruction_start) + 8
        data = self.memory.read(tagged - HEAP_OBJECT_TAG, size)
        if data is None:
            return None
        flags = _U32.unpack_from(data, layout.code_flags)[0]
        start = _U64.unpack_from(data, layout.code_instruction_start)[0]
        instruction_size = _U32.unpack_from(data, layout.code_instruction_size)[0]
        positions_tagged = _U64.unpack_from(data, layout.code_source_positions)[0]
        positions = self.byte_array(positions_tagged) or b""
        deoptimization = _U64.unpack_from(data, layout.code_deoptimization_data)[0]
        return CodeInfo(flags & layout.code_kind_mask, start, instruction_size, positions, deoptimization)

    def code_containing(self, pc: int) -> int | None:
        """The Code (tagged) whose instructions hold pc, found by its
        InstructionStream's header somewhere before pc: for code no function
        points to (on-stack replacement, say). Looked for in a few KiB
        first (most functions are smaller), then further."""
        for span in CODE_SCAN_SPANS:
            found = self._code_within(pc, span)
            if found is not None:
                return found or None
        return None

    def _code_within(self, pc: int, span: int) -> int | None:
        """The Code holding pc if its header is within span bytes before it;
        0: a header was found and its code does not hold pc (look no further);
        None: no header within span."""
        layout = self.layout
        header = layout.instruction_stream_header
        if header < layout.instruction_stream_code + 8:
            return 0  # metadata that cannot be: the map and the Code pointer come before the instructions
        window_start = max(pc - span, 0) & ~(CODE_STEP - 1)
        data = self.memory.read(window_start, pc - window_start)
        if data is None:
            window_start = self._mapping_start(window_start, pc)
            data = self.memory.read(window_start, pc - window_start) if window_start < pc else None
            if data is None:
                return 0  # nothing mapped at pc (code freed since, or a forged address)
        # Instructions start CODE_STEP-aligned; the stream's header precedes them.
        candidate = (pc & ~(CODE_STEP - 1)) - window_start
        while candidate - header >= 0:
            object_offset = candidate - header
            map_word = _U64.unpack_from(data, object_offset)[0]
            code = _U64.unpack_from(data, object_offset + layout.instruction_stream_code)[0]
            # Most of the words scanned are instructions: only a pair that can
            # be a map and a Code pointer costs a read.
            if _may_be_object(map_word) and _may_be_object(code) and self.map_type(map_word) == layout.type_instruction_stream:
                info = self.code(code)
                start = window_start + candidate
                if info is not None and info.instruction_start == start and start <= pc < start + info.instruction_size:
                    return code
                return 0  # the nearest stream does not hold pc
            candidate -= CODE_STEP
        return None if window_start > 0 and pc - window_start >= span - CODE_STEP else 0

    def _mapping_start(self, unreadable: int, pc: int) -> int:
        """The lowest page from which memory reads up to pc, above an address
        that does not: in log2(pages) one-byte reads."""
        readable = pc & ~(PAGE_BYTES - 1)
        if self.memory.read(readable, 1) is None:
            return pc
        while readable - unreadable > PAGE_BYTES:
            middle = ((unreadable + readable) // 2) & ~(PAGE_BYTES - 1)
            if middle <= unreadable:
                break
            if self.memory.read(middle, 1) is None:
                unreadable = middle
            else:
                readable = middle
        return readable

    def bytecode_positions(self, tagged: int) -> bytes | None:
        """A BytecodeArray's source-position table."""
        if self.instance_type(tagged) != self.layout.type_bytecode_array:
            return None
        table = self.field(tagged, self.layout.bytecode_source_positions)
        return self.byte_array(table) if table is not None else None
