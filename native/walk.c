/* Finishing a stack walk in user space, from a copy of the stack the BPF
 * sampler sent when it could not go on (maps not read yet, a table not built
 * yet). The steps are the BPF walker's own (bpf/walk_step.h): frame pointers
 * through JIT code and files without rows, rows through ELF code, signal
 * frames, the same ends. Only finding rows and reading memory differ: reads
 * come from the copy, and a read outside it ends the walk. */
#include "jitprof_native.h"

#include <stddef.h>

struct walk_reader {
    const struct jp_walk_stack *stack;
    int fault; /* WALK_READ_FAULT or WALK_COPY_TOO_SHORT, set by a failed read */
};

/* Was page `page` of the copy not in memory (a hole: zeros, not its bytes)? */
static int in_hole(const struct jp_walk_stack *stack, uint64_t page) {
    return page < 8 * sizeof(stack->holes) && (stack->holes >> page) & 1;
}

/* 8 bytes at a user address, from the copy. Overflow-safe: the address is
 * compared as an offset into the copy. */
static int walk_read_word(struct walk_reader *reader, uint64_t address, __u64 *value) {
    const struct jp_walk_stack *stack = reader->stack;
    if (address < stack->address || address - stack->address > stack->length || stack->length - (address - stack->address) < 8) {
        /* Beyond the copy's end: if the copy stopped at unreadable memory,
         * the kernel could not have read it either. */
        int beyond_end = address >= stack->address;
        reader->fault = beyond_end && !stack->reached_end ? WALK_COPY_TOO_SHORT : WALK_READ_FAULT;
        return -1;
    }
    uint64_t offset = address - stack->address;
    if (in_hole(stack, offset / STACK_COPY_PAGE_BYTES) || in_hole(stack, (offset + 7) / STACK_COPY_PAGE_BYTES)) {
        reader->fault = WALK_READ_FAULT;
        return -1;
    }
    const uint8_t *bytes = stack->bytes + offset;
    uint64_t word = 0;
    for (int index = 7; index >= 0; index--) word = (word << 8) | bytes[index];
    *value = word;
    return 0;
}

static int walk_read_frame(struct walk_reader *reader, uint64_t fp, __u64 *saved_fp, __u64 *return_address) {
    return walk_read_word(reader, fp, saved_fp) || walk_read_word(reader, fp + 8, return_address);
}

#define WALK_STEP_INLINE inline
#include "walk_step.h"

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

/* The step through an ELF mapping: the last row at or below the pc, applied. */
static int dwarf_step(const struct jp_walk_mapping *mapping, uint64_t lookup_pc, __u64 *pc, __u64 *sp, __u64 *fp, __u64 *rbx,
                      __u64 *rbx_slot, struct walk_reader *reader) {
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
    return walk_apply_row(&mapping->rows[low - 1], pc, sp, fp, rbx, rbx_slot, reader);
}

int jp_walk_copy(const struct jp_walk_mapping *mappings, uint64_t mapping_count, const struct jp_walk_stack *stack,
                 const struct jp_walk_registers *start, uint64_t *frames, uint64_t *frame_pointers, uint32_t max_frames,
                 uint32_t *frame_count) {
    struct walk_reader reader = {stack, 0};
    __u64 pc = start->pc, sp = start->sp, fp = start->fp, rbx = start->rbx, rbx_slot = 0;
    int exact_pc = start->exact_pc != 0;
    uint32_t depth = 0;
    *frame_count = 0;
    for (;;) {
        if (depth >= max_frames) {
            *frame_count = depth;
            return WALK_TRUNCATED;
        }
        if (frame_pointers != NULL) frame_pointers[depth] = fp;
        frames[depth++] = pc;
        *frame_count = depth;
        /* Caller frames hold return addresses: look up pc - 1, inside the call. */
        uint64_t lookup_pc = exact_pc ? pc : pc - 1;
        exact_pc = 0;
        const struct jp_walk_mapping *mapping = find_mapping(mappings, mapping_count, lookup_pc);
        if (mapping == NULL) return WALK_NO_MAPPING;
        if (mapping->kind == MAPPING_ELF_PENDING) {
            *frame_count = depth - 1; /* the caller tries again from here later */
            return JP_WALK_PENDING;
        }
        if (mapping->kind == MAPPING_ELF) {
            int step = dwarf_step(mapping, lookup_pc, &pc, &sp, &fp, &rbx, &rbx_slot, &reader);
            if (step == STEP_END) return WALK_COMPLETE;
            if (step == STEP_FAULT) return reader.fault;
            if (step == STEP_DONE || step == STEP_SIGNAL) {
                if (pc == 0) return WALK_COMPLETE;
                exact_pc = step == STEP_SIGNAL;
                continue;
            }
        }
        int end = walk_frame_pointer_step(&pc, &sp, &fp, &rbx, &rbx_slot, &reader);
        if (end >= 0) return end == WALK_READ_FAULT ? reader.fault : end;
    }
}
