// V8: which followed processes run it (and HotSpot, kind RUNTIME_HOTSPOT),
// and the slots of each JS frame that say which function it runs and where,
// sent with the sample for user space to name from V8's heap.
#pragma once

// Followed processes that run V8, with where their builtins are: their JS
// frames are sent with the slots that identify them (struct v8_frame).
BPF_HASH(v8_processes, u32, struct v8_process, FOLLOWED_ENTRIES);

// The JSFunctions this CPU has read, with their shared info and code: the
// same functions run at the same places sample after sample (a parser's or a
// checker's recursion), and a JSFunction is a heap object, cold in the
// cache, where the stack is hot. An entry answers only a frame of the same
// process, function slot and pc, and (in V8's builtins, the interpreter's
// among them) the same BytecodeArray slot. A JSFunction moved by a scavenge
// leaves its address to another, but that one's frames run other code: a pc
// in JIT code belongs to one function's code, and an interpreted frame's
// BytecodeArray to one function. Direct-mapped: a collision replaces.
#define V8_FUNCTIONS_KNOWN 512
struct v8_function_known {
    u64 function;
    u64 pc;
    u64 bytecode_array; // 0 for JIT code: its fp - 32 is a spill slot there
    u64 shared;
    u64 code;
    u32 tgid;
    u32 reserved;
};
struct v8_functions_known {
    struct v8_function_known entries[V8_FUNCTIONS_KNOWN];
};
BPF_PERCPU_ARRAY(v8_functions_known, struct v8_functions_known, 1);

// Is pc in a followed V8 process's builtins (the interpreter among them)?
static __always_inline u8 in_v8_builtins(struct walk_scratch *scratch, u64 pc) {
    if (scratch->v8.builtins_end == 0) return 0;
    return (pc >= scratch->v8.builtins_start && pc < scratch->v8.builtins_end) ||
           (pc >= scratch->v8.copy_start && pc < scratch->v8.copy_end);
}

// A frame of V8's JIT code or builtins: if its context slot holds a tagged
// pointer (a JS frame), keep what says which function it runs and where. The
// slots are read with the frame's saved fp and return address, which the
// frame-pointer step then takes from the reader.
static __always_inline void note_v8_frame(struct walk_scratch *scratch, struct mapping_info *mapping, u8 in_builtins, u64 pc,
                                          u64 fp, u32 depth, struct walk_reader *reader, const int jvm) {
    if (scratch->v8.builtins_end == 0) return;
    if (scratch->v8.kind == RUNTIME_HOTSPOT) {
        if (jvm && in_builtins) note_hotspot_frame(scratch, fp, depth, reader);
        return;
    }
    if (mapping->kind != MAPPING_JIT && !in_builtins) return;
    u32 index = scratch->v8_count;
    if (index >= MAX_V8_FRAMES || fp < V8_SLOTS_BYTES) return;
    u64 slots[V8_SLOTS_BYTES / 8 + 2];
    if (bpf_probe_read_user(slots, sizeof(slots), (void *)(fp - V8_SLOTS_BYTES)) != 0) return;
    reader->frame_fp = fp;
    reader->saved_fp = slots[V8_SLOTS_BYTES / 8];
    reader->return_address = slots[V8_SLOTS_BYTES / 8 + 1];
    u64 context = slots[(V8_SLOTS_BYTES + V8_FP_CONTEXT) / 8];
    u64 function = slots[(V8_SLOTS_BYTES + V8_FP_FUNCTION) / 8];
    if ((context & 1) == 0 || (function & 1) == 0) return; // a type marker: a stub's or an entry frame
    u64 bytecode_array = slots[(V8_SLOTS_BYTES + V8_FP_BYTECODE_ARRAY) / 8];
    u64 bytecode_key = in_builtins ? bytecode_array : 0;
    u32 tgid = scratch->event.pid;
    u64 shared = 0, code = 0;
    u32 zero = 0;
    struct v8_functions_known *known = v8_functions_known.lookup(&zero);
    if (!known) return;
    u64 mixed = (function >> 3) ^ (function >> 13) ^ (pc >> 1) ^ (pc >> 11) ^ (bytecode_key >> 3) ^ tgid;
    struct v8_function_known *entry = &known->entries[mixed & (V8_FUNCTIONS_KNOWN - 1)];
    if (entry->function == function && entry->pc == pc && entry->bytecode_array == bytecode_key && entry->tgid == tgid) {
        shared = entry->shared;
        code = entry->code;
    } else {
        u64 window[V8_FUNCTION_WINDOW / 8];
        if (bpf_probe_read_user(window, sizeof(window), (void *)(function - 1 + scratch->v8.function_window)) != 0) return;
        shared = window[(scratch->v8.shared_at / 8) & (V8_FUNCTION_WINDOW / 8 - 1)];
        code = window[(scratch->v8.code_at / 8) & (V8_FUNCTION_WINDOW / 8 - 1)];
        entry->function = function;
        entry->pc = pc;
        entry->bytecode_array = bytecode_key;
        entry->shared = shared;
        entry->code = code;
        entry->tgid = tgid;
    }
    struct v8_frame *frame = &v8_notes(scratch)[index];
    frame->shared = shared;
    frame->code = code;
    // An interpreted frame's offset slot holds a Smi; other frames' may too (a spill slot): user space checks.
    u64 offset = slots[(V8_SLOTS_BYTES + V8_FP_BYTECODE_OFFSET) / 8];
    frame->bytecode_offset = (offset & 0xffffffffULL) == 0 ? (s32)(offset >> 32) : V8_NO_BYTECODE_OFFSET;
    frame->bytecode_array = bytecode_array;
    frame->flags = in_builtins ? V8_FRAME_INTERPRETER : 0;
    frame->frame_index = depth;
    scratch->v8_count = index + 1;
}
