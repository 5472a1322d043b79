// HotSpot: an interpreted frame's Method* and bytecode pointer, and, in a JVM
// whose compiled code keeps no frame pointer, the step over a compiled
// frame by its size.
#pragma once

// Followed JVMs whose compiled code keeps no frame pointer: what stepping
// over such a frame by its size needs (struct hotspot_code).
BPF_HASH(hotspot_code, u32, struct hotspot_code, HOTSPOT_JVMS);

// A frame of HotSpot's template interpreter: its Method* and bytecode
// pointer, read with the frame's saved fp and return address (which the
// frame-pointer step then takes from the reader). User space checks them:
// a frame caught while it is being built reads as its caller's, or nothing.
static __always_inline void note_hotspot_frame(struct walk_scratch *scratch, u64 fp, u32 depth, struct walk_reader *reader) {
    u32 index = scratch->v8_count;
    if (index >= MAX_V8_FRAMES || fp < HOTSPOT_SLOTS_BYTES) return;
    u64 slots[HOTSPOT_SLOTS_BYTES / 8 + 2];
    if (bpf_probe_read_user(slots, sizeof(slots), (void *)(fp - HOTSPOT_SLOTS_BYTES)) != 0) return;
    reader->frame_fp = fp;
    reader->saved_fp = slots[HOTSPOT_SLOTS_BYTES / 8];
    reader->return_address = slots[HOTSPOT_SLOTS_BYTES / 8 + 1];
    reader->sender_sp = slots[(HOTSPOT_SLOTS_BYTES + HOTSPOT_FP_SENDER_SP) / 8];
    struct v8_frame *frame = &v8_notes(scratch)[index];
    frame->shared = slots[(HOTSPOT_SLOTS_BYTES + HOTSPOT_FP_METHOD) / 8];
    u32 collections = 0;
    if (scratch->hotspot_gc_count == 0 && scratch->v8.copy_start != 0 &&
        bpf_probe_read_user(&collections, sizeof(collections), (void *)scratch->v8.copy_start) == 0)
        scratch->hotspot_gc_count = (u64)collections + 1; // once a sample: the frames were all there then
    frame->code = scratch->hotspot_gc_count;
    frame->bytecode_array =
        depth == 0 && scratch->leaf_bcp ? scratch->leaf_bcp : slots[(HOTSPOT_SLOTS_BYTES + HOTSPOT_FP_BCP) / 8];
    frame->bytecode_offset = V8_NO_BYTECODE_OFFSET;
    frame->flags = V8_FRAME_INTERPRETER;
    frame->frame_index = depth;
    scratch->v8_count = index + 1;
}

// A leaf caught in a compiled method's epilogue (bpf/hotspot_code.h): the
// words left above the return address, 0 when the frame is whole.
static __always_inline int hotspot_epilogue(u64 pc) {
    struct code_bytes code;
    if (bpf_probe_read_user(&code, sizeof(code), (void *)pc) != 0) return 0;
    return hotspot_epilogue_of(&code);
}

// A leaf caught in a compiled method's prologue (bpf/hotspot_code.h).
static __always_inline int hotspot_prologue(u64 pc) {
    struct code_bytes code;
    if (bpf_probe_read_user(&code, sizeof(code), (void *)(pc - HOTSPOT_PROLOGUE_BEFORE)) != 0) return PROLOGUE_UNKNOWN;
    return hotspot_prologue_of(&code);
}

// Is the blob whose name pointer is at name_field one of vtable and itable
// stubs ("vtable chunks"), which dispatch by a jump and keep no frame? The
// name is HotSpot's own string in libjvm.so.
static __always_inline int hotspot_frameless_stub(u64 name_field) {
    u64 name = 0, text[2] = {};
    if (bpf_probe_read_user(&name, sizeof(name), (void *)name_field) != 0 || name == 0) return 0;
    if (bpf_probe_read_user(text, sizeof(text), (void *)name) != 0) return 0;
    // "vtable c" and "hunks\0", little-endian
    return text[0] == 0x6320656c62617476ULL && (text[1] & 0xffffffffffffULL) == 0x0000736b6e7568ULL;
}

// Step over a compiled frame of a JVM without frame pointers by its size:
// its code blob found through the code heap's segment map, its caller's
// return address and saved rbp the frame's last two words. STEP_FALLBACK
// for a pc in no blob or in one without a frame size (stubs that keep rbp),
// STEP_FAULT for a leaf in a prologue (where the frame is partly built: the
// walk ends there rather than guess).
static __always_inline int hotspot_frame_size_step(struct walk_scratch *scratch, u64 lookup_pc, u8 exact_pc, u64 *pc, u64 *sp,
                                                   u64 *fp) {
    struct hotspot_code *code = &scratch->hotspot;
    if (code->frame_pointers && !exact_pc) return STEP_FALLBACK; // a caller's frame is whole: its rbp chain holds
    u64 low = 0, segmap = 0;
#pragma unroll
    for (int heap = 0; heap < HOTSPOT_CODE_HEAPS; heap++) {
        if (lookup_pc >= code->heap_low[heap] && lookup_pc < code->heap_high[heap]) {
            low = code->heap_low[heap];
            segmap = code->segmap[heap];
        }
    }
    if (low == 0) return STEP_FALLBACK;
    u32 shift = code->log2_segment & 31;
    u64 segment = (lookup_pc - low) >> shift;
    u8 tag = 0xff;
    for (int hop = 0; hop < HOTSPOT_SEGMAP_HOPS; hop++) {
        if (bpf_probe_read_user(&tag, sizeof(tag), (void *)(segmap + segment)) != 0) return STEP_FALLBACK;
        if (tag == 0 || tag == 0xff || segment < tag) break;
        segment -= tag;
    }
    if (tag != 0) return STEP_FALLBACK; // free, or more hops than a blob has
    u64 blob = low + (segment << shift) + code->block_header;
    if (bpf_probe_read_user(scratch->blob, sizeof(scratch->blob), (void *)blob) != 0) return STEP_FALLBACK;
    s32 frame_words = 0, complete = 0;
    u64 code_begin = 0;
    bpf_probe_read_kernel(&frame_words, sizeof(frame_words),
                          scratch->blob + (code->frame_size_at & (HOTSPOT_BLOB_HEADER_BYTES - 4)));
    if (code->frame_complete_bytes == 2) {
        s16 short_complete = 0;
        bpf_probe_read_kernel(&short_complete, sizeof(short_complete),
                              scratch->blob + (code->frame_complete_at & (HOTSPOT_BLOB_HEADER_BYTES - 2)));
        complete = short_complete;
    } else {
        bpf_probe_read_kernel(&complete, sizeof(complete),
                              scratch->blob + (code->frame_complete_at & (HOTSPOT_BLOB_HEADER_BYTES - 4)));
    }
    if (code->code_begin_offset) {
        s32 offset = 0;
        bpf_probe_read_kernel(&offset, sizeof(offset), scratch->blob + (code->code_begin_at & (HOTSPOT_BLOB_HEADER_BYTES - 4)));
        code_begin = blob + offset;
    } else {
        bpf_probe_read_kernel(&code_begin, sizeof(code_begin),
                              scratch->blob + (code->code_begin_at & (HOTSPOT_BLOB_HEADER_BYTES - 8)));
    }
    if (frame_words == 0 && exact_pc && code->name_at && hotspot_frameless_stub(blob + (code->name_at & 1023))) {
        // It jumps to its target without a frame: the caller's return
        // address on top, rbp the caller's.
        u64 return_address = 0;
        if (bpf_probe_read_user(&return_address, sizeof(return_address), (void *)*sp) != 0) return STEP_FAULT;
        *pc = return_address;
        *sp += 8;
        return STEP_DONE;
    }
    if (frame_words < 2 || frame_words > HOTSPOT_MAX_FRAME_WORDS || code_begin < blob || code_begin > lookup_pc)
        return STEP_FALLBACK;
    u64 cfa = *sp + (u64)frame_words * 8;
    u8 rbp_saved = 1;
    if (exact_pc && complete >= 0 && lookup_pc < code_begin + (u64)complete) {
        int prologue = hotspot_prologue(lookup_pc);
        if (prologue == PROLOGUE_UNKNOWN) return STEP_FAULT;
        if (prologue == PROLOGUE_RETURN_ONLY || prologue == PROLOGUE_RBP_PUSHED) cfa = *sp + (u64)prologue * 8;
        rbp_saved = prologue == PROLOGUE_RBP_PUSHED || prologue == PROLOGUE_FRAME_BUILT;
    } else if (exact_pc) {
        int epilogue = hotspot_epilogue(lookup_pc);
        if (epilogue) {
            cfa = *sp + (u64)epilogue * 8;
            rbp_saved = epilogue == 2;
        } else if (code->frame_pointers) {
            return STEP_FALLBACK; // the frame is whole: the frame-pointer step
        }
    }
    u64 words[2];
    if (bpf_probe_read_user(words, sizeof(words), (void *)(cfa - 16)) != 0) return STEP_FAULT;
    if (rbp_saved) *fp = words[0];
    *pc = words[1];
    *sp = cfa;
    return STEP_DONE;
}
