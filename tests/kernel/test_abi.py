"""bpf/jitprof_abi.h is the one definition of what the kernel half and user
space share: compiled here with the system's C compiler, its constants and
record layouts must be exactly what the Python side reads and writes. A
change on the C side that Python does not follow fails this test."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess

import pytest

from profiler.jit.v8 import async_context as node_async_context
from profiler.jit.v8.heap import async_chain, properties
from profiler.kernel import address_spaces, bpf_program, events, kernel_maps
from profiler.labels import label_sources
from profiler.native import library, ring_batch, unwind_rows, unwind_tables
from tests.helpers import ROOT

CONSTANTS = [
    "MAX_ASYNC_FRAMES",
    "V8_ASYNC_BUILTINS",
    "V8_ASYNC_CUT",
    "V8_ASYNC_FUNCTION",
    "V8_ASYNC_GENERATOR",
    "V8_ASYNC_ALL",
    "V8_ASYNC_ALL_SETTLED",
    "V8_ASYNC_ANY",
    "V8_ROLE_AWAIT",
    "V8_ROLE_AWAIT_REJECT",
    "V8_ROLE_ALL",
    "V8_ROLE_ALL_SETTLED",
    "V8_ROLE_ANY",
    "V8_ROLE_DEFAULT_RESOLVE",
    "V8_REACHED_IDS",
    "V8_CONTEXT_MAPS",
    "V8_CONTEXT_ENTRIES",
    "V8_OUT_OF_OBJECT",
    "V8_STORE_FIELDS",
    "V8_STORE_TEXT",
    "V8_ROUTE_CHARS",
    "V8_SPAN_NAME_CHARS",
    "CONTEXT_OTEL",
    "CONTEXT_V8",
    "CONTEXT_WAKE",
    "EVENT_SAMPLE",
    "EVENT_FORK",
    "EVENT_EXEC",
    "EVENT_EXIT",
    "EVENT_MAPS_CHANGED",
    "EVENT_DISCOVERED",
    "EVENT_THREAD_WAITS",
    "EVENT_WORK_STARTED",
    "EVENT_THREAD_RUNNABLE",
    "EVENT_WAITS_WITHOUT_RSEQ",
    "WALK_COMPLETE",
    "WALK_TRUNCATED",
    "WALK_NO_MAPPING",
    "WALK_READ_FAULT",
    "WALK_BAD_FRAME",
    "WALK_NO_USER_REGS",
    "WALK_DEFERRED",
    "WALK_COPY_TOO_SHORT",
    "WALK_THREAD_EXITING",
    "COUNTER_SAMPLES",
    "COUNTER_RINGBUF_FULL",
    "COUNTER_KSTACK_FAILED",
    "COUNTER_EVENTS_LOST",
    "COUNTER_OFF_CPU_UNTRACKED",
    "COUNTER_COUNT",
    "MAPPING_ELF",
    "MAPPING_JIT",
    "MAPPING_ELF_PENDING",
    "MAPPING_PROVISIONAL",
    "TABLE_PENDING",
    "CFA_GAP",
    "CFA_RSP",
    "CFA_RBP",
    "CFA_PLT",
    "CFA_SIGNAL",
    "CFA_END_OF_STACK",
    "CFA_UNSUPPORTED",
    "CFA_RBX",
    "RBP_SAME",
    "RBP_OFFSET",
    "RBX_OFFSET",
    "RBX_LOST",
    "STACK_COPY_REACHED_END",
    "STACK_COPY_EXACT_PC",
    "STACK_COPY_PAGED",
    "STACK_COPY_PAGE_BYTES",
    "STACK_COPY_PAGES_TRACKED",
    "MAX_FRAMES",
    "STACK_COPY_BYTES",
    "DEEP_COPY_BYTES",
    "COMM_LEN",
    "SAMPLE_HEADER_BYTES",
    "THREAD_CONTEXT_BYTES",
    "THREAD_CONTEXT_HEADER_BYTES",
    "V8_FP_CONTEXT",
    "V8_FP_FUNCTION",
    "V8_FP_BYTECODE_ARRAY",
    "V8_FP_BYTECODE_OFFSET",
    "V8_SLOTS_BYTES",
    "V8_NO_BYTECODE_OFFSET",
    "MAX_V8_FRAMES",
    "V8_FRAME_INTERPRETER",
    "V8_FUNCTION_WINDOW",
    "HOTSPOT_FP_METHOD",
    "HOTSPOT_FP_BCP",
    "HOTSPOT_SLOTS_BYTES",
    "RUNTIME_V8",
    "RUNTIME_HOTSPOT",
    "HOTSPOT_CODE_HEAPS",
    "HOTSPOT_BLOB_HEADER_BYTES",
    "OFF_CPU_STACK_MOVED",
    "SAMPLE_SUBMITS_WORK",
    "OFF_CPU_PREEMPTED",
    "OFF_CPU_SETTING_SHORTEST_WAIT",
    "OFF_CPU_SETTINGS",
]
STRUCTS = {
    "sample_event": [
        "event_type",
        "pid",
        "tid",
        "cpu",
        "v8_frame_count",
        "time_ns",
        "kernel_stack_id",
        "frame_count",
        "walk_end",
        "user_mode",
        "comm",
        "off_cpu_ns",
        "short_wait_ns",
        "short_waits",
        "off_cpu_flags",
        "work",
        "parent_work",
        "runnable_ns",
        "context_size",
        "context_kind",
        "async_count",
        "async_flags",
        "reserved",
        "context",
        "addresses",
        "copy_space",
    ],
    "off_cpu_thread": [
        "left_ns",
        "waited_ns",
        "short_wait_ns",
        "wait_pc",
        "wait_sp",
        "short_waits",
        "kernel_stack_id",
        "tgid",
        "runnable",
        "runnable_ns",
        "without_rseq_since",
        "walk_runnable",
        "reserved",
    ],
    "work_address": ["tgid", "reserved", "address"],
    "work_item": ["key", "from"],
    "stack_copy": ["pc", "sp", "fp", "rbx", "copy_length", "flags", "holes"],
    "v8_frame": ["shared", "code", "bytecode_array", "bytecode_offset", "frame_index", "flags"],
    "v8_process": [
        "builtins_start",
        "builtins_end",
        "copy_start",
        "copy_end",
        "function_window",
        "shared_at",
        "code_at",
        "kind",
    ],
    "v8_context_config": [
        "isolate_tls",
        "cped_offset",
        "js_map_type",
        "first_nonstring_type",
        "map_type_at",
        "string_tag_mask",
        "seq_one_byte_tag",
        "sliced_one_byte_tag",
        "string_length_at",
        "string_chars_at",
        "sliced_parent_at",
        "sliced_offset_at",
        "store_key",
        "span_key",
        "context_maps",
        "context_map_at",
        "span_maps",
        "span_context_at",
        "span_context_maps",
        "trace_id_at",
        "span_id_at",
        "attributes_at",
        "span_name_at",
        "attributes_maps",
        "route_at",
        "label_store_key",
        "label_store_maps",
        "label_store_at",
        "heap_number_type",
        "learning",
        "thin_one_byte_tag",
        "thin_actual_at",
        "cons_one_byte_tag",
        "cons_first_at",
        "reserved",
    ],
    "v8_context_record": [
        "reached",
        "route_length",
        "span_name_length",
        "reserved",
        "frame",
        "object",
        "trace_id",
        "span_id",
        "store_map",
        "store_fields",
        "route",
        "span_name",
    ],
    "v8_store_field": ["kind", "length", "text"],
    "v8_async_frame": ["shared", "position", "kind", "reserved"],
    "v8_async_config": [field for field, _ in kernel_maps._V8AsyncConfig._fields_],
    "hotspot_code": [
        "heap_low",
        "heap_high",
        "segmap",
        "log2_segment",
        "block_header",
        "frame_size_at",
        "frame_complete_at",
        "code_begin_at",
        "code_begin_offset",
        "frame_complete_bytes",
        "frame_pointers",
        "name_at",
        "reserved",
    ],
    "process_event": ["event_type", "pid", "tid", "parent_pid", "time_ns", "comm", "address", "length"],
    "trie_key": ["prefixlen", "pid_be", "address_be"],
    "mapping_info": ["kind", "table_id", "load_bias"],
    "unwind_table": ["first_row", "row_count"],
    "unwind_row": ["pc", "cfa_type", "saved_rules", "rbx_offset", "cfa_offset", "rbp_offset"],
}


@pytest.fixture(scope="module")
def abi(tmp_path_factory):
    """The header's numbers, as a C compiler sees them."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (make setup installs gcc)")
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "jitprof_abi.h"', "int main(void) {", 'printf("{");']
    for name in CONSTANTS:
        lines.append(f'printf("\\"{name}\\": %llu, ", (unsigned long long)({name}));')
    for struct, fields in STRUCTS.items():
        lines.append(f'printf("\\"sizeof {struct}\\": %zu, ", sizeof(struct {struct}));')
        for field in fields:
            lines.append(
                f'printf("\\"{struct}.{field}\\": [%zu, %zu], ", offsetof(struct {struct}, {field}), '
                f"sizeof(((struct {struct} *)0)->{field}));"
            )
    lines += ['printf("\\"end\\": 0}");', "return 0; }"]
    directory = tmp_path_factory.mktemp("abi")
    source = directory / "abi.c"
    source.write_text("\n".join(lines))
    subprocess.run([compiler, "-Wall", "-Werror", f"-I{ROOT / 'bpf'}", "-o", str(directory / "abi"), str(source)], check=True)
    return json.loads(subprocess.run([str(directory / "abi")], capture_output=True, text=True, check=True).stdout)


def layout(structure: type[ctypes.Structure]) -> dict[str, list[int]]:
    return {name: [getattr(structure, name).offset, getattr(structure, name).size] for name, _ in structure._fields_}


def test_codes_are_the_headers(abi):
    kernel_codes = {name: value for name, value in abi.items() if name.startswith("EVENT_")}
    assert {f"EVENT_{kind.name}": int(kind) for kind in events.EventType if kind not in events.USER_SPACE_EVENTS} == kernel_codes
    assert not {int(kind) for kind in events.USER_SPACE_EVENTS} & set(kernel_codes.values())  # never taken for the kernel's
    assert {f"WALK_{end.name}": int(end) for end in events.WalkEnd} == {
        name: value for name, value in abi.items() if name.startswith("WALK_")
    }
    assert {f"COUNTER_{counter.name}": int(counter) for counter in events.Counter} | {"COUNTER_COUNT": events.COUNTER_COUNT} == {
        name: value for name, value in abi.items() if name.startswith("COUNTER_")
    }
    assert {f"CFA_{kind.name}": int(kind) for kind in unwind_rows.CfaType} == {
        name: value for name, value in abi.items() if name.startswith("CFA_")
    }
    assert {f"RBP_{rule.name}": int(rule) for rule in unwind_rows.RbpRule} == {
        name: value for name, value in abi.items() if name.startswith("RBP_")
    }
    assert {f"RBX_{rule.name}": int(rule) for rule in unwind_rows.RbxRule if rule} == {
        name: value for name, value in abi.items() if name.startswith("RBX_")
    }
    assert (library.MAPPING_ELF, library.MAPPING_JIT, address_spaces.MAPPING_ELF_PENDING) == (
        abi["MAPPING_ELF"],
        abi["MAPPING_JIT"],
        abi["MAPPING_ELF_PENDING"],
    )
    assert (library.MAPPING_ELF, library.MAPPING_JIT, library.MAPPING_PENDING) == (
        abi["MAPPING_ELF"],
        abi["MAPPING_JIT"],
        abi["MAPPING_ELF_PENDING"],
    )
    assert unwind_tables.TABLE_PENDING == abi["TABLE_PENDING"]
    flags = (events.OFF_CPU_STACK_MOVED, events.SAMPLE_SUBMITS_WORK, events.OFF_CPU_PREEMPTED)
    assert flags == (abi["OFF_CPU_STACK_MOVED"], abi["SAMPLE_SUBMITS_WORK"], abi["OFF_CPU_PREEMPTED"])
    assert (events.STACK_COPY_REACHED_END, events.STACK_COPY_EXACT_PC, events.STACK_COPY_PAGED) == (
        abi["STACK_COPY_REACHED_END"],
        abi["STACK_COPY_EXACT_PC"],
        abi["STACK_COPY_PAGED"],
    )
    assert events.STACK_COPY_PAGE_BYTES == abi["STACK_COPY_PAGE_BYTES"]
    # A bit of struct stack_copy.holes a page tracked, as the walker reads them.
    assert abi["STACK_COPY_PAGES_TRACKED"] <= 8 * abi["stack_copy.holes"][1]


def test_limits_are_the_headers(abi):
    assert events.MAX_FRAMES == abi["MAX_FRAMES"]
    assert events.COMM_LEN == abi["COMM_LEN"]
    assert events.THREAD_CONTEXT_BYTES == abi["THREAD_CONTEXT_BYTES"]
    assert bpf_program.STACK_COPY_BYTES == abi["STACK_COPY_BYTES"]
    assert abi["sample_event.addresses"] == [abi["SAMPLE_HEADER_BYTES"], 8 * (abi["MAX_FRAMES"] + 1)]
    assert abi["sample_event.copy_space"][1] == (
        abi["MAX_V8_FRAMES"] * abi["sizeof v8_frame"] + abi["sizeof stack_copy"] + abi["STACK_COPY_BYTES"]
    )
    assert events.V8_NO_BYTECODE_OFFSET == abi["V8_NO_BYTECODE_OFFSET"] - (1 << 64)
    assert (events.V8_FRAME_INTERPRETER, events.V8_FUNCTION_WINDOW) == (abi["V8_FRAME_INTERPRETER"], abi["V8_FUNCTION_WINDOW"])
    assert (events.V8_SLOTS_BYTES, events.MAX_V8_FRAMES) == (abi["V8_SLOTS_BYTES"], abi["MAX_V8_FRAMES"])
    assert (events.HOTSPOT_FP_METHOD, events.HOTSPOT_FP_BCP, events.HOTSPOT_SLOTS_BYTES) == (
        abi["HOTSPOT_FP_METHOD"] - (1 << 64),
        abi["HOTSPOT_FP_BCP"] - (1 << 64),
        abi["HOTSPOT_SLOTS_BYTES"],
    )
    assert (kernel_maps.RUNTIME_V8, kernel_maps.RUNTIME_HOTSPOT) == (abi["RUNTIME_V8"], abi["RUNTIME_HOTSPOT"])
    assert (kernel_maps.HOTSPOT_CODE_HEAPS, kernel_maps.HOTSPOT_BLOB_HEADER_BYTES) == (
        abi["HOTSPOT_CODE_HEAPS"],
        abi["HOTSPOT_BLOB_HEADER_BYTES"],
    )
    # Every walked frame can carry its JS record, and the sample is built in a
    # per-CPU value beside 80 bytes of walk state: the kernel allows 32 KiB.
    assert abi["MAX_V8_FRAMES"] == abi["MAX_FRAMES"]
    assert abi["sizeof sample_event"] + 80 <= 32768


def test_records_are_laid_out_as_the_header_says(abi):
    for structure, name in [
        (events._RawSampleHeader, "sample_event"),
        (events._RawStackCopy, "stack_copy"),
        (events._RawV8Frame, "v8_frame"),
        (kernel_maps._V8Process, "v8_process"),
        (kernel_maps._V8ContextConfig, "v8_context_config"),
        (kernel_maps._V8AsyncConfig, "v8_async_config"),
        (events._RawAsyncFrame, "v8_async_frame"),
        (kernel_maps._HotSpotCode, "hotspot_code"),
        (events._RawProcessEvent, "process_event"),
        (kernel_maps._TrieKey, "trie_key"),
        (kernel_maps._MappingInfo, "mapping_info"),
        (kernel_maps._UnwindTable, "unwind_table"),
        (kernel_maps._OffCpuThread, "off_cpu_thread"),
    ]:
        assert layout(structure) == {field: abi[f"{name}.{field}"] for field, _ in structure._fields_}, name
        if name != "sample_event":  # sent up as its header only
            assert ctypes.sizeof(structure) == abi[f"sizeof {name}"], name
    assert ctypes.sizeof(events._RawSampleHeader) == abi["SAMPLE_HEADER_BYTES"]
    assert unwind_rows.ROW_FORMAT.size == kernel_maps.UNWIND_ROW_SIZE == abi["sizeof unwind_row"]
    offsets = [abi[f"unwind_row.{field}"][0] for field in STRUCTS["unwind_row"]]
    assert offsets == [0, 4, 5, 6, 8, 12] and unwind_rows.ROW_FORMAT.format == "<IBBhii"


def test_async_callers_are_read_as_the_header_says(abi):
    assert (events.MAX_ASYNC_FRAMES, kernel_maps.V8_ASYNC_BUILTINS, events.V8_ASYNC_CUT) == (
        abi["MAX_ASYNC_FRAMES"],
        abi["V8_ASYNC_BUILTINS"],
        abi["V8_ASYNC_CUT"],
    )
    kinds = {"FUNCTION": "V8_ASYNC_FUNCTION", "GENERATOR": "V8_ASYNC_GENERATOR", "ALL": "V8_ASYNC_ALL"}
    kinds |= {"ALL_SETTLED": "V8_ASYNC_ALL_SETTLED", "ANY": "V8_ASYNC_ANY"}
    assert {kind.name: int(kind) for kind in events.AsyncKind} == {name: abi[constant] for name, constant in kinds.items()}
    roles = ("AWAIT", "AWAIT_REJECT", "ALL", "ALL_SETTLED", "ANY", "DEFAULT_RESOLVE")
    assert [getattr(async_chain, f"ROLE_{role}") for role in roles] == [abi[f"V8_ROLE_{role}"] for role in roles]
    assert len(async_chain.BUILTIN_ROLES) <= abi["V8_ASYNC_BUILTINS"] == async_chain.MAX_BUILTINS
    # Every frame and async caller fits a sample sent whole.
    largest = abi["SAMPLE_HEADER_BYTES"] + 8 * abi["MAX_FRAMES"] + abi["MAX_V8_FRAMES"] * abi["sizeof v8_frame"]
    assert largest + abi["MAX_ASYNC_FRAMES"] * abi["sizeof v8_async_frame"] <= abi["sizeof sample_event"]


def test_the_native_library_sees_the_same_row():
    try:
        ffi, _ = library.load()
    except library.NativeUnavailable:
        pytest.skip("native/ is built by make setup")
    assert ffi.sizeof("struct unwind_row") == unwind_rows.ROW_FORMAT.size
    assert ffi.offsetof("struct unwind_row", "cfa_offset") == 8


def test_node_context_records_are_read_as_the_header_lays_them(abi):
    fields = STRUCTS["v8_context_record"]
    assert [abi[f"v8_context_record.{field}"][0] for field in fields] == [0, 1, 2, 3, 8, 16, 24, 40, 48, 56, 116, 144]
    assert [abi[f"v8_store_field.{field}"][0] for field in STRUCTS["v8_store_field"]] == [0, 1, 2]
    assert abi["sizeof v8_store_field"] == 2 + node_async_context.STORE_TEXT == 2 + abi["V8_STORE_TEXT"]
    assert abi["V8_STORE_FIELDS"] == node_async_context.STORE_FIELDS
    assert node_async_context.RECORD.size == abi["sizeof v8_context_record"] <= abi["THREAD_CONTEXT_BYTES"]
    assert abi["V8_ROUTE_CHARS"] == node_async_context.ROUTE_CHARS
    assert abi["V8_SPAN_NAME_CHARS"] == node_async_context.SPAN_NAME_CHARS
    assert (abi["V8_REACHED_IDS"], abi["V8_CONTEXT_MAPS"], abi["V8_CONTEXT_ENTRIES"]) == (
        node_async_context.REACHED_IDS,
        node_async_context.MAPS_KNOWN,
        node_async_context.FRAME_ENTRIES,
    )
    assert abi["V8_OUT_OF_OBJECT"] == properties.OUT_OF_OBJECT
    assert (abi["CONTEXT_OTEL"], abi["CONTEXT_V8"], abi["CONTEXT_WAKE"]) == (
        label_sources.CONTEXT_OTEL,
        label_sources.CONTEXT_V8,
        events.CONTEXT_WAKE,
    )


def test_the_largest_record_fits_a_ring_batch(abi):
    """A deep stack copy: the header, every frame and V8 frame, the copy's
    registers and 256 KiB of stack (bpf/sampler.bpf.c, send_deep_copy_of)."""
    largest = (
        abi["SAMPLE_HEADER_BYTES"]
        + abi["MAX_FRAMES"] * 8
        + abi["MAX_V8_FRAMES"] * abi["sizeof v8_frame"]
        + abi["sizeof stack_copy"]
        + abi["DEEP_COPY_BYTES"]
    )
    assert largest <= ring_batch.MAX_RECORD_BYTES
    assert ring_batch.CAPACITY_BYTES >= kernel_maps.RINGBUF_PAGES * 4096 + ring_batch.MAX_RECORD_BYTES
