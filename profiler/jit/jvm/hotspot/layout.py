"""Where HotSpot keeps what names a Java frame, for one JVM: the offsets and
sizes its own introspection tables give (gHotSpotVMStructs and
gHotSpotVMTypes, exported by libjvm.so for the Serviceability Agent; the
same tables tell JDK 8 from JDK 26). Read once per libjvm.so build from the
process's memory, every name, count and offset within caps, and checked: an
offset past its type's size, a size past MAX_TYPE_SIZE or a field missing
refuses the JVM with a LayoutError saying which, and its frames are named
as before (perf map) or not at all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from profiler.native import elf_format
from profiler.native.elf import MAX_ELF_BYTES
from profiler.safety import files

MAX_ENTRIES = 1 << 13  # a JDK 25 table has about 3,000 structs' fields: more is no JVM's
MAX_STRIDE = 256
MAX_TYPE_SIZE = 64 << 10
MAX_NAME = 256
# The collectors that unload classes outside their pauses: no count that
# stood still says a method is still there.
CONCURRENT_UNLOADING_FLAGS = ("UseZGC", "UseShenandoahGC")
# G1 unloads classes at the Remark pause of its concurrent cycle but counts
# that cycle among its collections only at the Cleanup pause after it: its
# collection count does not vouch, its count of safepoints does.
LATE_COUNTING_FLAG = "UseG1GC"
# Every other collector unloads classes only at a safepoint, and the counter
# moves at each one's start (odd while it runs) and end: read from .symtab,
# where a JDK keeps it (its tables do not list it).
SAFEPOINT_COUNTER_SYMBOL = b"_ZN20SafepointSynchronize18_safepoint_counterE"
MIN_MAJOR = 11  # PreserveFramePointer and the code heaps' layout: JDK 9; tested from 17
_WORD = struct.Struct("<Q")
_S32 = struct.Struct("<i")
_SYMBOLS = (
    "gHotSpotVMStructs",
    "gHotSpotVMStructEntryArrayStride",
    "gHotSpotVMStructEntryTypeNameOffset",
    "gHotSpotVMStructEntryFieldNameOffset",
    "gHotSpotVMStructEntryTypeStringOffset",
    "gHotSpotVMStructEntryIsStaticOffset",
    "gHotSpotVMStructEntryOffsetOffset",
    "gHotSpotVMStructEntryAddressOffset",
    "gHotSpotVMTypes",
    "gHotSpotVMTypeEntryArrayStride",
    "gHotSpotVMTypeEntryTypeNameOffset",
    "gHotSpotVMTypeEntrySizeOffset",
)
# The types whose fields are read (the tables hold about 600 types).
_WANTED_TYPES = frozenset(
    {
        "Abstract_VM_Version",
        "JDK_Version",
        "AbstractInterpreter",
        "StubQueue",
        "CodeCache",
        "CodeHeap",
        "VirtualSpace",
        "GrowableArrayBase",
        "GenericGrowableArray",
        "GrowableArray<int>",
        "HeapBlock",
        "HeapBlock::Header",
        "CodeBlob",
        "CompiledMethod",
        "nmethod",
        "PcDesc",
        "Method",
        "ConstMethod",
        "ConstantPool",
        "Klass",
        "InstanceKlass",
        "Symbol",
        "Array<Method*>",
        "Array<int>",
        "JVMFlag",
        "Universe",
        "CollectedHeap",
        "ImmutableOopMapSet",
        "ImmutableOopMapPair",
    }
)


class LayoutError(Exception):
    """This JVM cannot be read; the message says why, for the user."""


class BuildRefused(LayoutError):
    """No JVM of this libjvm.so build could be read for LAYOUT_SETTLE_S: the
    next ones are refused at once, without reading its tables again."""


class Memory(Protocol):
    def read(self, address: int, length: int) -> bytes | None: ...

    def word(self, address: int) -> int | None: ...


@dataclass(frozen=True)
class Field:
    offset: int
    size: int  # of its type, when the tables give it (0: unknown)


@dataclass
class VMTables:
    """What the introspection tables say, for the types jitprof reads."""

    sizes: dict[str, int]
    fields: dict[tuple[str, str], Field]
    statics: dict[tuple[str, str], int]  # the address of a static field, in the file (add the load bias)

    def size(self, *types: str) -> int:
        for name in types:
            if name in self.sizes:
                return self.sizes[name]
        raise LayoutError(f"its introspection tables lack the size of {types[0]}")

    def field(self, types: Iterable[str], names: Iterable[str], optional: bool = False) -> Field | None:
        types, names = tuple(types), tuple(names)
        for name in names:
            for type_name in types:
                found = self.fields.get((type_name, name))
                if found is not None:
                    return found
        if optional:
            return None
        raise LayoutError(f"its introspection tables lack {types[0]}::{names[0]}")

    def offset(self, types: Iterable[str], *names: str) -> int:
        found = self.field(types, names)
        assert found is not None
        return found.offset

    def static(self, type_name: str, *names: str, optional: bool = False) -> int:
        for name in names:
            if (type_name, name) in self.statics:
                return self.statics[(type_name, name)]
        if optional:
            return 0
        raise LayoutError(f"its introspection tables lack {type_name}::{names[0]}")


@dataclass(frozen=True)
class HotSpotLayout:
    major: int  # the JDK's feature release: 17, 21, 25
    excluded_byte: int  # UNSIGNED5's X: 1 from JDK 20
    # Where the code is: the code heaps (a GrowableArray of CodeHeap*), the interpreter's stubs.
    code_heaps_at: int  # file address of CodeCache::_heaps (add the load bias)
    growable_length: int
    growable_data: int
    heap_memory: int  # CodeHeap::_memory (a VirtualSpace)
    heap_segmap: int
    heap_log2_segment: int
    space_low: int  # VirtualSpace::_low_boundary
    space_high: int
    heap_block_size: int  # the header before each blob
    heap_block_used: int  # HeapBlock::Header::_used, -1 unknown
    interpreter_code_at: int  # file address of AbstractInterpreter::_code (a StubQueue*)
    stub_buffer: int
    stub_buffer_limit: int
    # CodeBlob and nmethod.
    blob_name: int
    blob_size: int
    blob_code_begin: int  # a pointer until JDK 22, an offset from the blob after
    blob_code_end: int
    blob_offsets: bool  # code begin and end as offsets
    blob_mutable_data: int  # JDK 25: the metadata is in the mutable data after the relocations (-1 before)
    blob_relocation_size: int
    blob_mutable_data_size: int
    nmethod_size: int
    nmethod_method: int
    nmethod_compile_id: int
    nmethod_entry_bci: int
    nmethod_comp_level: Field | None
    nmethod_metadata: int  # offset field (JDK 17: from the blob; JDK 23-24: from the code's end)
    nmethod_scopes_data: int  # JDK 17: a pointer; JDK 23: an offset into the immutable data
    nmethod_scopes_pcs: int
    nmethod_dependencies: int  # JDK 17: the end of the scopes' PcDescs (-1 after)
    nmethod_immutable_data: int  # JDK 23+ (-1 before)
    nmethod_immutable_size: int
    pc_desc_size: int
    pc_desc_pc_offset: int
    pc_desc_scope: int
    # Methods and their classes.
    method_const_method: int
    const_method_size: int
    const_method_constants: int
    const_method_code_size: int
    const_method_flags: int
    const_method_name_index: int
    const_method_signature_index: int
    pool_size: int
    pool_holder: int
    pool_length: int
    pool_source_file_index: int
    klass_name: int
    instance_klass_methods: int
    instance_klass_constants: int
    array_length: int
    array_data: int  # of Array<Method*>
    symbol_length: int
    symbol_body: int
    preserve_frame_pointer_at: int  # file address of the -XX:PreserveFramePointer bool; -1 unknown (flags not read)
    debug_non_safepoints_at: int  # and of -XX:DebugNonSafepoints's
    concurrent_unloading_flags_at: tuple[int, ...]  # file addresses of the bools of the GCs that unload concurrently
    late_counting_flag_at: int  # of -XX:+UseG1GC's (-1 unknown)
    collected_heap_at: int  # file address of Universe::_collectedHeap (0 unknown): its GC count
    heap_total_collections: int  # CollectedHeap::_total_collections (-1 unknown)
    safepoint_counter_at: int = -1  # file address of SafepointSynchronize::_safepoint_counter (-1 unknown)
    # For stepping over a compiled frame by its size (-1 unknown).
    blob_frame_size: int = -1  # CodeBlob::_frame_size (words)
    blob_frame_complete: int = -1  # CodeBlob::_frame_complete_offset (bytes from the code)
    blob_frame_complete_bytes: int = 4  # its size: an int16_t from JDK 25
    # Where an nmethod's safepoints are (-1 unknown): a PcDesc at none of them
    # is a record only -XX:+DebugNonSafepoints (or a JVMTI agent) makes.
    blob_oop_maps: int = -1  # CodeBlob::_oop_maps
    oop_map_set_size: int = -1  # sizeof(ImmutableOopMapSet): its pairs follow it
    oop_map_set_count: int = -1
    oop_map_pair_size: int = -1
    oop_map_pair_pc: int = -1


def forget_layout(path: str) -> None:
    """The layout read for the libjvm.so at path is read again next time
    (it was read while its JVM was still loading it)."""
    try:
        info = os.stat(path)
    except OSError:
        return
    with _layouts_lock:
        _layouts.pop((info.st_dev, info.st_ino, info.st_mtime_ns), None)


@contextlib.contextmanager
def opened_libjvm(path: str) -> Iterator[tuple[tuple[int, int, int], Callable[[], dict[str, int]]]]:
    """The file's identity (device, inode, mtime: its tables are the same
    for every JVM of it), and how to read the file addresses of the tables'
    exported symbols (and of the safepoint counter, from .symtab), from the
    one file opened."""
    with files.open_regular(path, MAX_ELF_BYTES) as handle:
        info = os.fstat(handle.fileno())
        yield (info.st_dev, info.st_ino, info.st_mtime_ns), lambda: _symbols_of(handle)


def _symbols_of(handle: BinaryIO) -> dict[str, int]:
    found = elf_format.symbols_named(handle, (b"gHotSpotVM",), 64, elf_format.SHT_DYNSYM)
    found += elf_format.symbols_named(handle, (SAFEPOINT_COUNTER_SYMBOL,), 1, elf_format.SHT_SYMTAB)
    symbols = {symbol.name.partition("@")[0]: symbol.value for symbol in found}
    missing = [name for name in _SYMBOLS if name not in symbols]
    if missing:
        raise LayoutError(f"its libjvm.so exports no {missing[0]} (not a HotSpot JVM, or a very old one)")
    return symbols


class _Strings:
    """C strings of the process, by address, cached: type names repeat."""

    def __init__(self, memory: Memory) -> None:
        self._memory = memory
        self._known: dict[int, str | None] = {}

    def at(self, address: int) -> str | None:
        if address in self._known:
            return self._known[address]
        text = None
        data = self._memory.read(address, 64) if address else None
        if data is not None and b"\0" not in data:
            data = self._memory.read(address, MAX_NAME)
        if data is not None and b"\0" in data:
            text = data.partition(b"\0")[0].decode("ascii", "replace")
        self._known[address] = text
        return text


def read_tables(memory: Memory, symbols: dict[str, int], bias: int) -> VMTables:
    """The sizes, fields and static addresses of the wanted types, read
    from the process (the tables are built as libjvm.so loads)."""

    def word(name: str) -> int:
        value = memory.word(symbols[name] + bias)
        if value is None:
            raise LayoutError(f"cannot read its {name}")
        return value

    strings = _Strings(memory)
    tables = VMTables({}, {}, {})
    stride = word("gHotSpotVMTypeEntryArrayStride")
    type_name_at, size_at = word("gHotSpotVMTypeEntryTypeNameOffset"), word("gHotSpotVMTypeEntrySizeOffset")
    for entry in _entries(memory, word("gHotSpotVMTypes"), stride, (type_name_at, size_at)):
        name = strings.at(_WORD.unpack_from(entry, type_name_at)[0])
        if name is not None:
            tables.sizes[name] = _WORD.unpack_from(entry, size_at)[0]
    stride = word("gHotSpotVMStructEntryArrayStride")
    offsets = tuple(
        word(f"gHotSpotVMStructEntry{name}Offset")
        for name in ("TypeName", "FieldName", "TypeString", "IsStatic", "Offset", "Address")
    )
    type_at, field_at, type_string_at, static_at, offset_at, address_at = offsets
    for entry in _entries(memory, word("gHotSpotVMStructs"), stride, offsets):
        type_name = strings.at(_WORD.unpack_from(entry, type_at)[0])
        if type_name not in _WANTED_TYPES:
            continue
        field_name = strings.at(_WORD.unpack_from(entry, field_at)[0])
        if not field_name:
            continue
        if _S32.unpack_from(entry, static_at)[0]:
            tables.statics[(type_name, field_name)] = _WORD.unpack_from(entry, address_at)[0] - bias
        else:
            declared = strings.at(_WORD.unpack_from(entry, type_string_at)[0]) or ""
            size = tables.sizes.get(declared, 8 if declared.endswith("*") else 0)
            tables.fields[(type_name, field_name)] = Field(_WORD.unpack_from(entry, offset_at)[0], size)
    return tables


def _entries(memory: Memory, base: int, stride: int, offsets: tuple[int, ...]) -> Iterable[bytes]:
    """The entries of a table, to the one whose first name is null."""
    if not base or not 0 < stride <= MAX_STRIDE or any(offset + 8 > stride for offset in offsets):
        raise LayoutError("its introspection tables are malformed")
    chunk = 128
    for first in range(0, MAX_ENTRIES, chunk):
        data = memory.read(base + first * stride, chunk * stride)
        for index in range(chunk):
            if data is not None:
                entry: bytes | None = data[index * stride : (index + 1) * stride]
            else:  # the table ends near the end of its mapping: an entry at a time
                entry = memory.read(base + (first + index) * stride, stride)
            if entry is None:
                raise LayoutError("cannot read its introspection tables")
            if _WORD.unpack_from(entry, offsets[0])[0] == 0:
                return
            yield entry
    raise LayoutError("its introspection tables do not end")


def _major_version(memory: Memory, tables: VMTables, bias: int) -> int:
    current = tables.static("JDK_Version", "_current", optional=True)
    if current:  # JDK 8 to 21: the major version is its first byte
        value = memory.read(current + bias, 4)
        return value[0] if value is not None else 0
    major = tables.static("Abstract_VM_Version", "_vm_major_version")
    value = memory.read(major + bias, 4)
    return _S32.unpack(value)[0] if value is not None else 0


def layout_from_tables(memory: Memory, tables: VMTables, bias: int) -> HotSpotLayout:
    """What jitprof reads, from the tables (static addresses stay file
    addresses: the layout is shared by every JVM of one libjvm.so)."""
    major = _major_version(memory, tables, bias)
    if major < MIN_MAJOR:
        raise LayoutError(f"it is JDK {major or 'of an unknown version'}; jitprof reads HotSpot from JDK {MIN_MAJOR}")
    blob = ("CodeBlob",)
    nmethod = ("nmethod", "CompiledMethod")
    code_begin = tables.field(blob, ("_code_begin",), optional=True)
    immutable = tables.field(nmethod, ("_immutable_data",), optional=True)
    used = tables.field(("HeapBlock::Header",), ("_used",), optional=True)
    flags = _flag_addresses(
        memory, tables, bias, ("PreserveFramePointer", "DebugNonSafepoints", LATE_COUNTING_FLAG, *CONCURRENT_UNLOADING_FLAGS)
    )
    layout = HotSpotLayout(
        major=major,
        excluded_byte=1 if major >= 20 else 0,
        code_heaps_at=tables.static("CodeCache", "_heaps"),
        growable_length=tables.offset(("GrowableArrayBase", "GenericGrowableArray"), "_len"),
        growable_data=tables.offset(("GrowableArray<int>",), "_data"),
        heap_memory=tables.offset(("CodeHeap",), "_memory"),
        heap_segmap=tables.offset(("CodeHeap",), "_segmap"),
        heap_log2_segment=tables.offset(("CodeHeap",), "_log2_segment_size"),
        space_low=tables.offset(("VirtualSpace",), "_low_boundary"),
        space_high=tables.offset(("VirtualSpace",), "_high_boundary"),
        heap_block_size=tables.size("HeapBlock"),
        heap_block_used=used.offset if used is not None else -1,
        interpreter_code_at=tables.static("AbstractInterpreter", "_code"),
        stub_buffer=tables.offset(("StubQueue",), "_stub_buffer"),
        stub_buffer_limit=tables.offset(("StubQueue",), "_buffer_limit"),
        blob_name=tables.offset(blob, "_name"),
        blob_size=tables.offset(blob, "_size"),
        blob_code_begin=code_begin.offset if code_begin is not None else tables.offset(blob, "_code_offset"),
        blob_code_end=tables.offset(blob, "_code_end") if code_begin is not None else tables.offset(blob, "_data_offset"),
        blob_offsets=code_begin is None,
        blob_mutable_data=_optional(tables, blob, "_mutable_data"),
        blob_relocation_size=_optional(tables, blob, "_relocation_size"),
        blob_mutable_data_size=_optional(tables, blob, "_mutable_data_size"),
        nmethod_size=tables.size("nmethod"),
        nmethod_method=tables.offset(nmethod, "_method"),
        nmethod_compile_id=tables.offset(nmethod, "_compile_id"),
        nmethod_entry_bci=tables.offset(nmethod, "_entry_bci"),
        nmethod_comp_level=tables.field(nmethod, ("_comp_level",), optional=True),
        nmethod_metadata=_optional(tables, nmethod, "_metadata_offset"),
        nmethod_scopes_data=tables.offset(nmethod, "_scopes_data_begin", "_scopes_data_offset"),
        nmethod_scopes_pcs=tables.offset(nmethod, "_scopes_pcs_offset"),
        nmethod_dependencies=_optional(tables, nmethod, "_dependencies_offset"),
        nmethod_immutable_data=immutable.offset if immutable is not None else -1,
        nmethod_immutable_size=_optional(tables, nmethod, "_immutable_data_size"),
        pc_desc_size=tables.size("PcDesc"),
        pc_desc_pc_offset=tables.offset(("PcDesc",), "_pc_offset"),
        pc_desc_scope=tables.offset(("PcDesc",), "_scope_decode_offset"),
        method_const_method=tables.offset(("Method",), "_constMethod"),
        const_method_size=tables.size("ConstMethod"),
        const_method_constants=tables.offset(("ConstMethod",), "_constants"),
        const_method_code_size=tables.offset(("ConstMethod",), "_code_size"),
        const_method_flags=tables.offset(("ConstMethod",), "_flags._flags", "_flags"),
        const_method_name_index=tables.offset(("ConstMethod",), "_name_index"),
        const_method_signature_index=tables.offset(("ConstMethod",), "_signature_index"),
        pool_size=tables.size("ConstantPool"),
        pool_holder=tables.offset(("ConstantPool",), "_pool_holder"),
        pool_length=tables.offset(("ConstantPool",), "_length"),
        pool_source_file_index=tables.offset(("ConstantPool",), "_source_file_name_index"),
        klass_name=tables.offset(("Klass", "InstanceKlass"), "_name"),
        instance_klass_methods=tables.offset(("InstanceKlass",), "_methods"),
        instance_klass_constants=tables.offset(("InstanceKlass",), "_constants"),
        array_length=_optional(tables, ("Array<int>", "Array<Method*>"), "_length", default=0),
        array_data=_optional(tables, ("Array<Method*>",), "_data", default=8),
        symbol_length=_symbol_length(tables),
        symbol_body=tables.offset(("Symbol",), "_body"),
        preserve_frame_pointer_at=flags.get("PreserveFramePointer", -1),
        debug_non_safepoints_at=flags.get("DebugNonSafepoints", -1),
        concurrent_unloading_flags_at=tuple(flags[name] for name in CONCURRENT_UNLOADING_FLAGS if name in flags),
        late_counting_flag_at=flags.get(LATE_COUNTING_FLAG, -1),
        collected_heap_at=tables.static("Universe", "_collectedHeap", optional=True),
        heap_total_collections=_optional(tables, "CollectedHeap", "_total_collections"),
        blob_frame_size=_optional(tables, blob, "_frame_size"),
        blob_frame_complete=_optional(tables, blob, "_frame_complete_offset"),
        blob_frame_complete_bytes=_field_bytes(tables, blob, "_frame_complete_offset"),
        blob_oop_maps=_optional(tables, blob, "_oop_maps"),
        oop_map_set_size=tables.sizes.get("ImmutableOopMapSet", -1),
        oop_map_set_count=_optional(tables, "ImmutableOopMapSet", "_count"),
        oop_map_pair_size=tables.sizes.get("ImmutableOopMapPair", -1),
        oop_map_pair_pc=_optional(tables, "ImmutableOopMapPair", "_pc_offset"),
    )
    _check(layout, tables)
    return layout


def _flag_addresses(memory: Memory, tables: VMTables, bias: int, names: tuple[str, ...]) -> dict[str, int]:
    """The file addresses of -XX flags' values, from the JVM's table of flags: those found."""
    flags_at = tables.static("JVMFlag", "flags", optional=True)
    count_at = tables.static("JVMFlag", "numFlags", optional=True)
    size = tables.sizes.get("JVMFlag", 0)
    name_field = tables.field(("JVMFlag",), ("_name",), optional=True)
    address_field = tables.field(("JVMFlag",), ("_addr",), optional=True)
    if not flags_at or not count_at or name_field is None or address_field is None:
        return {}
    array, count = memory.word(flags_at + bias), memory.word(count_at + bias)
    if not array or count is None or not 0 < count <= 8192 or not max(name_field.offset, address_field.offset) + 8 <= size <= 256:
        return {}
    data = memory.read(array, count * size)
    if data is None:
        return {}
    strings = _Strings(memory)
    found: dict[str, int] = {}
    for start in range(0, len(data), size):
        name = strings.at(_WORD.unpack_from(data, start + name_field.offset)[0])
        if name in names and name not in found:
            found[name] = _WORD.unpack_from(data, start + address_field.offset)[0] - bias
    return found


def _field_bytes(tables: VMTables, types: tuple[str, ...], name: str) -> int:
    """A field's size where the tables give its type's (an int until JDK 25's int16_t)."""
    found = tables.field(types, (name,), optional=True)
    return found.size if found is not None and found.size in (2, 4) else 4


def _optional(tables: VMTables, types: str | tuple[str, ...], name: str, default: int = -1) -> int:
    found = tables.field((types,) if isinstance(types, str) else types, (name,), optional=True)
    return found.offset if found is not None else default


def _symbol_length(tables: VMTables) -> int:
    length = tables.field(("Symbol",), ("_length",), optional=True)
    if length is not None:
        return length.offset
    return tables.offset(("Symbol",), "_length_and_refcount") + 2  # JDK 12 to 13: the length is its high half


def _check(layout: HotSpotLayout, tables: VMTables) -> None:
    """Every offset inside its type, every size within MAX_TYPE_SIZE: these are the target's numbers."""
    bounded = {
        "nmethod": (layout.nmethod_method, layout.nmethod_compile_id, layout.nmethod_scopes_pcs, layout.blob_name),
        "ConstMethod": (layout.const_method_constants, layout.const_method_name_index, layout.const_method_signature_index),
        "ConstantPool": (layout.pool_holder, layout.pool_length, layout.pool_source_file_index),
        "PcDesc": (layout.pc_desc_pc_offset, layout.pc_desc_scope),
    }
    for type_name, offsets in bounded.items():
        size = tables.sizes.get(type_name, 0)
        if not 0 < size <= MAX_TYPE_SIZE or any(not 0 <= offset < size for offset in offsets):
            raise LayoutError(f"its introspection tables give {type_name} an impossible layout")
    if not 0 < layout.heap_block_size <= 64 or not 0 <= layout.symbol_body <= 64 or not 0 <= layout.symbol_length <= 64:
        raise LayoutError("its introspection tables give Symbol or HeapBlock an impossible layout")


_layouts: dict[tuple[int, int, int], HotSpotLayout] = {}
_layouts_lock = threading.Lock()
MAX_LAYOUTS = 64
# A build whose tables do not check out is read again only after a pause
# that doubles (a libjvm.so just mapped reads as nonsense until relocated),
# whatever JVM of it asks: a user's fake JVM forking four children a second,
# each with 32,767-entry tables, once had every child read them (0.6 s each).
# Failing for LAYOUT_SETTLE_S, the build is refused for good.
FIRST_PAUSE_S = 0.2
LONGEST_PAUSE_S = 2.0
LAYOUT_SETTLE_S = 5.0


@dataclass
class _Failures:
    first: float
    next_read: float
    pause: float
    why: str
    refused: bool = False


_failures: dict[tuple[int, int, int], _Failures] = {}


def _failed(identity: tuple[int, int, int], why: str, now: float) -> None:
    with _layouts_lock:
        known = _failures.get(identity)
        if known is None:
            if len(_failures) >= MAX_LAYOUTS:
                _failures.pop(next(iter(_failures)))
            _failures[identity] = _Failures(now, now + FIRST_PAUSE_S, FIRST_PAUSE_S, why)
            return
        known.pause = min(2 * known.pause, LONGEST_PAUSE_S)
        known.next_read, known.why = now + known.pause, why
        known.refused = now - known.first >= LAYOUT_SETTLE_S


def remembered_failure(path: str) -> LayoutError | None:
    """What to answer now, without reading anything of it, for the build of
    the libjvm.so at path: its refusal, or its last error while it pauses;
    None when it may be read. (Checked before a JVM's memory is opened: a
    user's fake JVM forking children would otherwise cost each child that.)"""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return _remembered((info.st_dev, info.st_ino, info.st_mtime_ns))


def _remembered(identity: tuple[int, int, int]) -> LayoutError | None:
    with _layouts_lock:
        failed = _failures.get(identity)
    if failed is not None and failed.refused:
        return BuildRefused(failed.why)
    if failed is not None and time.monotonic() < failed.next_read:
        return LayoutError(failed.why)
    return None


def layout_of(memory: Memory, path: str, bias: int) -> HotSpotLayout:
    """The layout of the JVM whose libjvm.so is at path (a /proc/PID/map_files
    entry) and loaded at bias, read once per build; LayoutError (or OSError)
    when there is none."""
    with opened_libjvm(path) as (identity, read_symbols):
        # Known by its identity before its symbols are read: every JVM of a
        # build (a program forking children on it) costs one read.
        with _layouts_lock:
            known = _layouts.get(identity)
        if known is not None:
            return known
        waiting = _remembered(identity)
        if waiting is not None:
            raise waiting
        now = time.monotonic()
        try:
            symbols = read_symbols()
        except LayoutError as error:
            _failed(identity, str(error), now)
            raise
    try:
        known = layout_from_tables(memory, read_tables(memory, symbols, bias), bias)
        counter = symbols.get(SAFEPOINT_COUNTER_SYMBOL.decode())
        if counter:
            known = dataclasses.replace(known, safepoint_counter_at=counter)
    except LayoutError as error:
        _failed(identity, str(error), now)
        raise
    with _layouts_lock:
        if len(_layouts) >= MAX_LAYOUTS:
            _layouts.clear()
        _layouts[identity] = known
        _failures.pop(identity, None)
    return known
