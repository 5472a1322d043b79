/* Finishing a stack walk in user space, from a copy of the stack the BPF
 * sampler sent when it could not go on (maps not read yet, a table not built
 * yet). The rules are bpf/sampler.bpf.c's walk_one_frame and dwarf_step, one
 * for one: frame pointers through JIT code and files without rows, rows
 * through ELF code, signal frames, the same ends. Only memory reads differ:
 * they come from the copy, and a read outside it ends the walk. */
#include "jitprof_native.h"

#include <stddef.h>

/* Row CFA types (profiler/native/unwind_rows.py: CfaType). */
enum { CFA_GAP = 0, CFA_RSP, CFA_RBP, CFA_PLT, CFA_SIGNAL, CFA_END_OF_STACK };
enum { RBP_SAME = 0, RBP_OFFSET = 1 };

/* struct ucontext's saved registers, from the stack pointer on entry to
 * __restore_rt (as in the BPF walker). */
#define SIGFRAME_RBP 120
#define SIGFRAME_RSP 160
#define SIGFRAME_RIP 168

enum step { STEP_FALLBACK, STEP_DONE, STEP_FAULT, STEP_END, STEP_SIGNAL };

struct copy_reader {
    const struct jp_walk_stack *stack;
    int fault; /* JP_WALK_READ_FAULT or JP_WALK_COPY_ENDED, set by a failed read */
};

/* 8 bytes at a user address, from the copy. Overflow-safe: the address is
 * compared as an offset into the copy. */
static int read_word(struct copy_reader *reader, uint64_t address, uint64_t *value) {
    const struct jp_walk_stack *stack = reader->stack;
    if (address < stack->address || address - stack->address > stack->length || stack->length - (address - stack->address) < 8) {
        /* Beyond the copy's end: if the copy stopped at unreadable memory,
         * the kernel could not have read it either. */
        int beyond_end = address >= stack->address;
        reader->fault = beyond_end && !stack->reached_end ? JP_WALK_COPY_ENDED : JP_WALK_READ_FAULT;
        return -1;
    }
    const uint8_t *bytes = stack->bytes + (address - stack->address);
    uint64_t word = 0;
    for (int index = 7; index >= 0; index--) word = (word << 8) | bytes[index];
    *value = word;
    return 0;
}

static const struct jp_walk_mapping *find_mapping(const struct jp_walk_mapping *mappings, uint64_t count, uint64_t address) {
    uint64_t low = 0, high = count;
    while (low < high) { /* the last mapping starting at or below address */
        uint64_t middle = low + (high - low) / 2;
        if (mappings[middle].start <= address)
            low = middle + 1;
        else
            high = middle;
    }
    if (low == 0) return NULL;
    const struct jp_walk_mapping *mapping = &mappings[low - 1];
    return address < mapping->end ? mapping : NULL;
}

static enum step dwarf_step(const struct jp_walk_mapping *mapping, uint64_t lookup_pc, uint64_t *pc, uint64_t *sp,
                            uint64_t *fp, struct copy_reader *reader) {
    if (mapping->rows == NULL || mapping->row_count == 0) return STEP_FALLBACK;
    uint64_t file_pc = lookup_pc - mapping->load_bias;
    if (file_pc > 0xffffffffULL) return STEP_FALLBACK;
    uint32_t target = (uint32_t)file_pc;
    uint64_t low = 0, high = mapping->row_count;
    while (low < high) { /* the last row at or below target */
        uint64_t middle = low + (high - low) / 2;
        if (mapping->rows[middle].pc <= target)
            low = middle + 1;
        else
            high = middle;
    }
    if (low == 0) return STEP_FALLBACK;
    const struct jp_row *row = &mapping->rows[low - 1];

    uint64_t cfa;
    switch (row->cfa_type) {
    case CFA_RSP:
        cfa = *sp + (uint64_t)(int64_t)row->cfa_offset;
        break;
    case CFA_RBP:
        cfa = *fp + (uint64_t)(int64_t)row->cfa_offset;
        break;
    case CFA_PLT:
        cfa = *sp + 8 + (((*pc) & 15) >= (uint64_t)(int64_t)row->cfa_offset ? 8 : 0);
        break;
    case CFA_SIGNAL: {
        uint64_t saved_pc, saved_sp, saved_fp;
        if (read_word(reader, *sp + SIGFRAME_RIP, &saved_pc) || read_word(reader, *sp + SIGFRAME_RSP, &saved_sp) ||
            read_word(reader, *sp + SIGFRAME_RBP, &saved_fp))
            return STEP_FAULT;
        *pc = saved_pc;
        *sp = saved_sp;
        *fp = saved_fp;
        return STEP_SIGNAL;
    }
    case CFA_END_OF_STACK:
        return STEP_END;
    default:
        return STEP_FALLBACK; /* a gap between functions, or an unsupported rule */
    }
    uint64_t return_address;
    if (read_word(reader, cfa - 8, &return_address)) return STEP_FAULT;
    if (row->rbp_rule == RBP_OFFSET && read_word(reader, cfa + (uint64_t)(int64_t)row->rbp_offset, fp)) return STEP_FAULT;
    *sp = cfa;
    *pc = return_address;
    return STEP_DONE;
}

int jp_walk_copy(const struct jp_walk_mapping *mappings, uint64_t mapping_count, const struct jp_walk_stack *stack,
                 const struct jp_walk_registers *start, uint64_t *frames, uint32_t max_frames, uint32_t *frame_count) {
    struct copy_reader reader = {stack, 0};
    uint64_t pc = start->pc, sp = start->sp, fp = start->fp;
    int exact_pc = start->exact_pc != 0;
    uint32_t depth = 0;
    *frame_count = 0;
    for (;;) {
        if (depth >= max_frames) {
            *frame_count = depth;
            return JP_WALK_TRUNCATED;
        }
        frames[depth++] = pc;
        *frame_count = depth;
        /* Caller frames hold return addresses: look up pc - 1, inside the call. */
        uint64_t lookup_pc = exact_pc ? pc : pc - 1;
        exact_pc = 0;
        const struct jp_walk_mapping *mapping = find_mapping(mappings, mapping_count, lookup_pc);
        if (mapping == NULL) return JP_WALK_NO_MAPPING;
        if (mapping->kind == JP_MAPPING_PENDING) {
            *frame_count = depth - 1; /* the caller tries again from here later */
            return JP_WALK_PENDING;
        }
        if (mapping->kind == JP_MAPPING_ELF) {
            enum step step = dwarf_step(mapping, lookup_pc, &pc, &sp, &fp, &reader);
            if (step == STEP_END) return JP_WALK_COMPLETE;
            if (step == STEP_FAULT) return reader.fault;
            if (step == STEP_DONE || step == STEP_SIGNAL) {
                if (pc == 0) return JP_WALK_COMPLETE;
                exact_pc = step == STEP_SIGNAL;
                continue;
            }
        }
        /* Frame-pointer step: JIT code, files without rows, gaps. */
        if (fp == 0) return JP_WALK_COMPLETE;
        if (fp < sp) return JP_WALK_BAD_FRAME;
        uint64_t saved_fp, return_address;
        if (read_word(&reader, fp, &saved_fp) || read_word(&reader, fp + 8, &return_address)) return reader.fault;
        if (return_address == 0) return JP_WALK_COMPLETE;
        pc = return_address;
        sp = fp + 16;
        fp = saved_fp;
    }
}
