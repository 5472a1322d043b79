"""Where V8 keeps what names a JS frame, for one node binary: the object
layouts and type ids its postmortem metadata (the v8dbg_* data symbols every
node build carries) gives, and for the fields it leaves out, the values
V8's own sources fix for its version. Read once per binary from its symbol
table, within elf_format's caps.

Node 20 to 26 (V8 11.3 to 14.6) are known; an older or newer V8, or a binary
without the metadata, gets a LayoutError saying which, and its JS frames
are named as before (perf map, code log) or not at all.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from dataclasses import dataclass
from typing import BinaryIO

from profiler.jit.v8.heap import async_chain, isolate
from profiler.jit.v8.heap.layout_cache import LayoutCache
from profiler.native import elf_format
from profiler.native.elf import MAX_ELF_BYTES, PARSE_ERRORS
from profiler.safety import files

MIN_VERSION = (11, 3)
MAX_VERSION = (14, 6)
MAX_SYMBOLS = 20_000  # node has about 3,000 v8dbg_ and Builtins_ symbols
POINTER = 8
_VERSION_SYMBOLS = {
    "major": "_ZN2v88internal7Version6major_E",
    "minor": "_ZN2v88internal7Version6minor_E",
}
# The frame slots the kernel reads (bpf/jitprof_abi.h: V8_FP_*).
KERNEL_FRAME_SLOTS = {"off_fp_context": -8, "off_fp_function": -16, "off_fp_bytecode_array": -32, "off_fp_bytecode_offset": -40}


class LayoutError(Exception):
    """This binary's V8 cannot be read; the message says why, for the user."""


@dataclass(frozen=True)
class ObjectLayout:
    """How a JS object keeps its named properties (its Map's descriptors),
    and JSMaps and Symbols: what AsyncLocalStorage's stores are read with."""

    js_map_type: int
    heap_number_type: int
    symbol_type: int
    symbol_description: int
    properties: int  # a JSObject's out-of-object properties (or hash)
    map_instance_size_words: int
    map_inobject_start: int
    map_bit_field3: int
    map_descriptors: int
    own_descriptors_mask: int
    own_descriptors_shift: int
    dictionary_map_bit: int
    descriptors_header: int
    descriptor_words: int  # key, details, value
    descriptor_key: int
    descriptor_details: int
    location_mask: int
    location_field: int
    index_mask: int
    index_shift: int


@dataclass(frozen=True)
class V8Layout:
    """The offsets and type ids of one V8 build's objects, from its binary."""

    version: tuple[int, int]
    builtins: tuple[int, int]  # file addresses [start, end) of the embedded builtins
    interpreter_entry: tuple[int, int]  # InterpreterEntryTrampoline's [start, end)
    # Type ids (a Map's instance_type).
    type_shared_function_info: int
    type_script: int
    type_scope_info: int
    type_code: int
    type_bytecode_array: int
    type_interpreter_data: int  # wraps a BytecodeArray with its own trampoline (--interpreted-frames-native-stack)
    type_byte_arrays: frozenset[int]  # ByteArray, TrustedByteArray
    type_fixed_arrays: frozenset[int]  # FixedArray, TrustedFixedArray, ProtectedFixedArray
    type_weak_fixed_arrays: frozenset[int]
    type_js_functions: tuple[int, int]  # first, last
    first_nonstring_type: int
    # Strings.
    string_representation_mask: int
    string_encoding_mask: int
    one_byte_string_tag: int
    cons_string_tag: int
    sliced_string_tag: int
    thin_string_tag: int
    external_string_tag: int
    string_length: int
    seq_string_chars: int
    cons_first: int
    cons_second: int
    sliced_parent: int
    sliced_offset: int
    thin_actual: int
    # Objects.
    map_instance_type: int
    js_function_shared: int
    js_function_code: int
    shared_name_or_scope_info: int
    shared_script: int
    shared_function_data: int
    script_name: int
    script_source: int
    script_line_ends: int
    scope_info_first_vars: int
    scope_info_context_locals: int
    scope_info_fixed_positions: bool  # start and end at slots 3 and 4 (V8 12.8 on)
    position_statement_bit: bool  # position tables mark statements in a bit, not a sign (V8 14 on)
    code_flags: int
    code_kind_mask: int
    code_kind_baseline: int
    code_instruction_start: int
    code_instruction_size: int
    code_source_positions: int
    code_deoptimization_data: int
    type_instruction_stream: int
    instruction_stream_header: int  # where an InstructionStream's instructions begin
    instruction_stream_code: int  # its Code
    bytecode_source_positions: int
    bytecode_data: int
    array_length: int
    array_data: int
    deopt_shared: int  # index of the code's own function
    deopt_shared_wrapped: bool  # ... behind a SharedFunctionInfoWrapper (V8 12.5 on)
    type_shared_function_info_wrapper: int
    deopt_inlined_count: int
    deopt_literals: int
    deopt_inlining_positions: int
    objects: ObjectLayout | None = None  # None: the metadata lacks some of it
    # Where a sample finds AsyncLocalStorage's stores, or why it cannot.
    async_context: isolate.IsolateLocations | isolate.IsolateError | None = None
    # How a sample reads the async functions awaiting the running one, or why it cannot.
    async_callers: async_chain.AsyncChain | async_chain.AsyncChainError | None = None
    async_types: async_chain.ObjectTypes | None = None
    shared_builtin_at: int = POINTER  # a SharedFunctionInfo's (untrusted) function data: a builtin's id
    js_function_context: int = 5 * POINTER
    context_min_slots: int = 2

    def async_config(self) -> dict[str, int | tuple[int, ...]] | str:
        """struct v8_async_config for this V8, or why its async callers cannot be read."""
        if isinstance(self.async_callers, async_chain.AsyncChainError):
            return str(self.async_callers)
        if self.async_callers is None or self.async_types is None:
            return "its V8 metadata lacks the promise and generator classes"
        return async_chain.kernel_config(
            self.async_callers,
            self.async_types,
            self.map_instance_type,
            self.js_function_shared,
            self.js_function_context,
            self.shared_builtin_at,
            self.context_min_slots,
        )

    @property
    def code_kind_maglev(self) -> int:
        return self.code_kind_baseline + 1

    @property
    def code_kind_turbofan(self) -> int:
        return self.code_kind_baseline + 2

    def kernel_window(self) -> tuple[int, int, int]:
        """(window start, shared at, code at): the one read the kernel makes
        of a JSFunction (bpf/jitprof_abi.h, V8_FUNCTION_WINDOW)."""
        start = min(self.js_function_shared, self.js_function_code)
        return start, self.js_function_shared - start, self.js_function_code - start


def read_layout(handle: BinaryIO) -> V8Layout:
    """The layout of the V8 in this node binary; LayoutError if there is none
    jitprof can use."""
    try:
        header = elf_format.read_header(handle)
        sections = elf_format.section_headers(handle, header)
        symbols = elf_format.symbols_named(
            handle,
            (b"v8dbg_", b"Builtins_", b"_ZN2v88internal7Version", *isolate.SYMBOL_PREFIXES, *async_chain.SYMBOL_PREFIXES),
            MAX_SYMBOLS,
        )
    except PARSE_ERRORS as error:
        raise LayoutError(f"its symbol table cannot be read ({error})") from error
    values: dict[str, int] = {}
    builtin_ranges: list[tuple[int, int]] = []
    interpreter_entry = (0, 0)
    for symbol in symbols:
        if symbol.name.startswith("Builtins_"):
            if symbol.size and symbol.value:
                builtin_ranges.append((symbol.value, symbol.value + symbol.size))
                if symbol.name == "Builtins_InterpreterEntryTrampoline":
                    interpreter_entry = (symbol.value, symbol.value + symbol.size)
            continue
        if symbol.size not in (1, 2, 4, 8) or not symbol.name.startswith(("v8dbg_", "_ZN2v88internal7Version")):
            continue
        try:
            raw = elf_format.symbol_bytes(handle, symbol, sections, header)
        except PARSE_ERRORS:
            raw = None
        if raw is not None:
            values[symbol.name.removeprefix("v8dbg_")] = int.from_bytes(raw, "little", signed=True)
    if not any(name.startswith("class_") for name in values):
        raise LayoutError("it has no V8 postmortem metadata (v8dbg_* symbols): a stripped or custom build")
    if not builtin_ranges or interpreter_entry == (0, 0):
        raise LayoutError("its V8 builtins have no symbols")
    version = (values.get(_VERSION_SYMBOLS["major"], 0), values.get(_VERSION_SYMBOLS["minor"], 0))
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise LayoutError(
            f"its V8 is {version[0]}.{version[1]}; jitprof reads V8 {MIN_VERSION[0]}.{MIN_VERSION[1]} to "
            f"{MAX_VERSION[0]}.{MAX_VERSION[1]} (Node 20 to 26)"
        )
    for name, expected in KERNEL_FRAME_SLOTS.items():
        if values.get(name) != expected:
            raise LayoutError(f"its V8 frames keep {name.removeprefix('off_fp_')} at {values.get(name)}, not {expected}")
    builtins = (min(start for start, _ in builtin_ranges), max(end for _, end in builtin_ranges))
    try:
        async_context: isolate.IsolateLocations | isolate.IsolateError = isolate.locations_from_symbols(
            handle, header, sections, symbols
        )
    except isolate.IsolateError as error:
        async_context = error
    try:
        chain: async_chain.AsyncChain | async_chain.AsyncChainError = async_chain.read_chain(
            handle, header, sections, symbols, version
        )
    except async_chain.AsyncChainError as error:
        chain = error
    return dataclasses.replace(
        _layout(values, version, builtins, interpreter_entry), async_context=async_context, async_callers=chain
    )


class _Metadata:
    """The v8dbg values, asked by name or name prefix (types are in the
    names: `class_Script__name__Object`, `..._Tagged_Object_`)."""

    def __init__(self, values: dict[str, int]) -> None:
        self.values = values

    def get(self, *names: str) -> int | None:
        for name in names:
            if name in self.values:
                return self.values[name]
            if name.endswith("__"):
                for key, value in self.values.items():
                    if key.startswith(name):
                        return value
        return None

    def need(self, *names: str) -> int:
        value = self.get(*names)
        if value is None:
            raise LayoutError(f"its V8 metadata lacks {names[0].rstrip('_')}")
        return value

    def type_id(self, class_name: str) -> int | None:
        return self.get(f"type_{class_name}__")


def _layout(
    values: dict[str, int], version: tuple[int, int], builtins: tuple[int, int], interpreter_entry: tuple[int, int]
) -> V8Layout:
    meta = _Metadata(values)
    shared = meta.need("class_JSFunction__shared__")
    js_function_code = meta.get("class_JSFunction__code__")
    if js_function_code is None:
        # Right before shared since V8 11.7; three fields after it before.
        js_function_code = shared - POINTER if version >= (11, 7) else shared + 3 * POINTER
    first_js_function = meta.get("FirstJSFunctionType") or meta.need("type_JSFunction__")
    last_js_function = meta.get("LastJSFunctionType") or first_js_function + 14
    instruction_start = meta.get("class_Code__instruction_start__")
    source_positions = meta.get("class_Code__source_position_table__")
    flags = meta.get("class_Code__flags__")
    instruction_size = meta.get("class_Code__instruction_size__")
    if instruction_start is not None and instruction_size is not None:
        # V8 12 on: deoptimization data, the position table and a wrapper sit
        # before the instruction stream pointer.
        if source_positions is None:
            wrapper = meta.get("class_Code__wrapper__") is not None
            source_positions = instruction_start - (3 if wrapper else 2) * POINTER
        flags = flags if flags is not None else instruction_size - 4
    elif source_positions is not None:
        # V8 11.x lost the Code metadata but the tables' offsets.
        instruction_start = source_positions + 2 * POINTER
        flags = instruction_start + POINTER
        instruction_size = flags + 4 + (4 if version < (11, 4) else 0)
    else:
        raise LayoutError("its V8 metadata says nothing of Code objects")
    assert flags is not None and instruction_size is not None
    deoptimization_data = meta.get("class_Code__deoptimization_data__") or source_positions - POINTER
    array_length = meta.need("class_FixedArrayBase__length__")
    byte_arrays = {meta.type_id("ByteArray"), meta.type_id("TrustedByteArray")}
    fixed_arrays = {meta.type_id("FixedArray"), meta.type_id("TrustedFixedArray"), meta.type_id("ProtectedFixedArray")}
    weak_arrays = {meta.type_id("WeakFixedArray"), meta.type_id("TrustedWeakFixedArray"), meta.type_id("ProtectedWeakFixedArray")}
    wrapped_index = meta.get("DeoptimizationDataWrappedSharedFunctionInfoIndex")
    shared_index = wrapped_index or meta.get("DeoptimizationDataSharedFunctionInfoIndex") or 6
    bytecode_source_positions = meta.get("class_BytecodeArray__source_position_table__")
    if bytecode_source_positions is None:
        # length, then (V8 12 on) the wrapper, then the position table; V8 11: constant pool, handler table first.
        bytecode_source_positions = array_length + (2 * POINTER if version >= (12, 0) else 3 * POINTER)
    return V8Layout(
        version=version,
        builtins=builtins,
        interpreter_entry=interpreter_entry,
        type_shared_function_info=meta.need("type_SharedFunctionInfo__"),
        type_script=meta.need("type_Script__"),
        type_scope_info=meta.need("type_ScopeInfo__"),
        type_code=meta.need("type_Code__"),
        type_bytecode_array=meta.need("type_BytecodeArray__"),
        type_interpreter_data=meta.type_id("InterpreterData") or -1,
        type_byte_arrays=frozenset(value for value in byte_arrays if value is not None),
        type_fixed_arrays=frozenset(value for value in fixed_arrays if value is not None),
        type_weak_fixed_arrays=frozenset(value for value in weak_arrays if value is not None),
        type_js_functions=(first_js_function, last_js_function),
        first_nonstring_type=meta.need("FirstNonstringType"),
        string_representation_mask=meta.need("StringRepresentationMask"),
        string_encoding_mask=meta.need("StringEncodingMask"),
        one_byte_string_tag=meta.need("OneByteStringTag"),
        cons_string_tag=meta.need("ConsStringTag"),
        sliced_string_tag=meta.need("SlicedStringTag"),
        thin_string_tag=meta.need("ThinStringTag"),
        external_string_tag=meta.need("ExternalStringTag"),
        string_length=meta.need("class_String__length__"),
        seq_string_chars=meta.need("class_SeqOneByteString__chars__"),
        cons_first=meta.need("class_ConsString__first__"),
        cons_second=meta.need("class_ConsString__second__"),
        sliced_parent=meta.need("class_SlicedString__parent__"),
        sliced_offset=meta.need("class_SlicedString__offset__"),
        thin_actual=meta.need("class_ThinString__actual__"),
        map_instance_type=meta.need("class_Map__instance_type__"),
        js_function_shared=shared,
        js_function_code=js_function_code,
        shared_name_or_scope_info=meta.need("class_SharedFunctionInfo__name_or_scope_info__"),
        shared_script=meta.need(
            "class_SharedFunctionInfo__script_or_debug_info__",
            "class_SharedFunctionInfo__script__",
            "class_SharedFunctionInfo__raw_script__",
        ),
        shared_function_data=meta.get("class_SharedFunctionInfo__function_data__") or POINTER,
        script_name=meta.need("class_Script__name__"),
        script_source=meta.get("class_Script__source__") or meta.need("class_Script__name__") - POINTER,
        script_line_ends=meta.need("class_Script__line_ends__"),
        scope_info_first_vars=meta.need("scopeinfo_idx_first_vars"),
        scope_info_context_locals=meta.need("scopeinfo_idx_ncontextlocals"),
        scope_info_fixed_positions=version >= (12, 8),
        position_statement_bit=version >= (14, 0),
        code_flags=flags,
        code_kind_mask=meta.get("CodeKindFieldMask") or 0xF,
        code_kind_baseline=meta.need("CodeKindBaseline"),
        code_instruction_start=instruction_start,
        code_instruction_size=instruction_size,
        code_source_positions=source_positions,
        code_deoptimization_data=deoptimization_data,
        type_instruction_stream=meta.need("type_InstructionStream__"),
        instruction_stream_header=meta.need("class_InstructionStream__instruction_start__"),
        instruction_stream_code=POINTER,  # right after the map, V8 11.3 to 14.6
        bytecode_source_positions=bytecode_source_positions,
        bytecode_data=meta.need("class_BytecodeArray__data__"),
        array_length=array_length,
        array_data=meta.need("class_FixedArray__data__"),
        deopt_shared=shared_index,
        deopt_shared_wrapped=wrapped_index is not None,
        type_shared_function_info_wrapper=meta.type_id("SharedFunctionInfoWrapper") or -1,
        deopt_inlined_count=meta.get("DeoptimizationDataInlinedFunctionCountIndex") or 1,
        deopt_literals=meta.get("DeoptimizationDataLiteralArrayIndex") or 2,
        deopt_inlining_positions=meta.get("DeoptimizationDataInliningPositionsIndex") or shared_index + 1,
        objects=_object_layout(meta),
        async_types=async_chain.object_types(meta.type_id, (first_js_function, last_js_function)),
        shared_builtin_at=meta.get("class_SharedFunctionInfo__untrusted_function_data__")
        or meta.get("class_SharedFunctionInfo__function_data__")
        or (2 * POINTER if version >= (13, 0) else POINTER),
        js_function_context=meta.get("class_JSFunction__context__") or 5 * POINTER,
        context_min_slots=meta.get("context_min_slots") or 2,
    )


def _object_layout(meta: _Metadata) -> ObjectLayout | None:
    try:
        return ObjectLayout(
            js_map_type=meta.need("type_JSMap__"),
            heap_number_type=meta.need("type_HeapNumber__"),
            symbol_type=meta.need("type_Symbol__"),
            symbol_description=meta.need("class_Symbol__name__"),
            properties=meta.get("class_JSReceiver__raw_properties_or_hash__") or POINTER,
            map_instance_size_words=meta.need("class_Map__instance_size_in_words__"),
            map_inobject_start=meta.need("class_Map__inobject_properties_start_or_constructor_function_index__"),
            map_bit_field3=meta.need("class_Map__bit_field3__"),
            map_descriptors=meta.need("class_Map__instance_descriptors__"),
            own_descriptors_mask=meta.need("bit_field3_number_of_own_descriptors_mask"),
            own_descriptors_shift=meta.need("bit_field3_number_of_own_descriptors_shift"),
            dictionary_map_bit=1 << meta.need("bit_field3_is_dictionary_map_shift"),
            descriptors_header=meta.need("class_DescriptorArray__header_size__"),
            descriptor_words=meta.need("prop_desc_size"),
            descriptor_key=meta.need("prop_desc_key"),
            descriptor_details=meta.need("prop_desc_details"),
            location_mask=meta.need("prop_location_mask"),
            location_field=meta.need("prop_location_Field") << meta.need("prop_location_shift"),
            index_mask=meta.need("prop_index_mask"),
            index_shift=meta.need("prop_index_shift"),
        )
    except LayoutError:
        return None


_layouts: dict[tuple[int, int, int], V8Layout | LayoutError] = {}
# Kept across runs: a layout's records, and the code that reads them.
_cache = LayoutCache(
    (V8Layout, ObjectLayout, LayoutError, isolate.IsolateLocations, isolate.IsolateError)
    + (async_chain.AsyncChain, async_chain.AsyncChainError, async_chain.ObjectTypes),
    (__file__, isolate.__file__, async_chain.__file__, elf_format.__file__),
)
_layouts_lock = threading.Lock()
MAX_LAYOUTS = 64


def layout_of_file(path: str) -> V8Layout:
    """The layout of the V8 in a file (a process's /proc/PID/exe or libnode),
    read once per file; LayoutError (or OSError) when there is none."""
    with files.open_regular(path, MAX_ELF_BYTES) as handle:
        info = os.fstat(handle.fileno())
        key = (info.st_dev, info.st_ino, info.st_mtime_ns)
        with _layouts_lock:
            known = _layouts.get(key)
        if known is None:
            cached = _cache.load(info)
            if isinstance(cached, V8Layout | LayoutError):
                known = cached
            else:
                failed = elf_format.failed_reads()
                try:
                    known = read_layout(handle)
                except LayoutError as error:
                    known = error
                if elf_format.failed_reads() == failed:  # a disk's error is not the file's: not kept
                    _cache.store(info, known)
            with _layouts_lock:
                if len(_layouts) >= MAX_LAYOUTS:
                    _layouts.clear()
                _layouts[key] = known
    if isinstance(known, LayoutError):
        raise known
    return known
