/* One step of a user stack walk, written once for both walkers: the BPF
 * sampler (bpf/sampler.bpf.c) and the user-space walker that finishes a walk
 * from a stack copy (native/walk.c). Each finds the row (map lookups in the
 * kernel, an array in user space) and reads memory its own way; the rules
 * that turn a row or a frame pointer into the caller's registers are here.
 *
 * The includer defines, before including this file:
 *   WALK_STEP_INLINE  how the functions are inlined (BPF: __always_inline)
 *   struct walk_reader, and
 *   walk_read_word(reader, address, &value)         8 bytes; 0 on success
 *   walk_read_frame(reader, fp, &saved_fp, &ret)     the 16 bytes at a frame pointer; 0 on success
 */
#ifndef JITPROF_WALK_STEP_H
#define JITPROF_WALK_STEP_H

#include "jitprof_abi.h"

/* What a step did. */
#define STEP_FALLBACK 0 /* no usable row: take a frame-pointer step */
#define STEP_DONE 1
#define STEP_FAULT 2
#define STEP_END 3
#define STEP_SIGNAL 4  /* stepped out of a signal frame: pc is exact, not a return address */
#define STEP_PENDING 5 /* the table is being built: defer the walk */

/* The caller's rbx is followed lazily: a row that saves it only says where
 * (rbx_slot), and the word is read when a frame's CFA is kept in rbx, which
 * few are. rbx and rbx_slot both 0: not known. */
static WALK_STEP_INLINE int walk_rbx_value(__u64 *rbx, __u64 *rbx_slot, struct walk_reader *reader) {
    if (*rbx_slot != 0) {
        if (walk_read_word(reader, *rbx_slot, rbx)) *rbx = 0;
        *rbx_slot = 0;
    }
    return *rbx != 0;
}

/* Apply a row found for pc to (pc, sp, fp, rbx): the caller's registers. */
static WALK_STEP_INLINE int walk_apply_row(const struct unwind_row *row, __u64 *pc, __u64 *sp, __u64 *fp, __u64 *rbx,
                                           __u64 *rbx_slot, struct walk_reader *reader) {
    __u64 cfa = 0;
    __u8 cfa_type = row->cfa_type;
    if (cfa_type == CFA_RSP) {
        cfa = *sp + (__u64)(__s64)row->cfa_offset;
    } else if (cfa_type == CFA_RBP) {
        cfa = *fp + (__u64)(__s64)row->cfa_offset;
    } else if (cfa_type == CFA_RBX && walk_rbx_value(rbx, rbx_slot, reader)) {
        cfa = *rbx + (__u64)(__s64)row->cfa_offset;
    } else if (cfa_type == CFA_PLT) {
        cfa = *sp + 8 + (((*pc) & 15) >= (__u64)(__s64)row->cfa_offset ? 8 : 0);
    } else if (cfa_type == CFA_SIGNAL) {
        __u64 saved_pc = 0, saved_sp = 0, saved_fp = 0;
        if (walk_read_word(reader, *sp + SIGFRAME_RIP, &saved_pc) || walk_read_word(reader, *sp + SIGFRAME_RSP, &saved_sp) ||
            walk_read_word(reader, *sp + SIGFRAME_RBP, &saved_fp))
            return STEP_FAULT;
        *rbx = 0;
        *rbx_slot = *sp + SIGFRAME_RBX;
        *pc = saved_pc;
        *sp = saved_sp;
        *fp = saved_fp;
        return STEP_SIGNAL;
    } else if (cfa_type == CFA_END_OF_STACK) {
        return STEP_END;
    } else {
        return STEP_FALLBACK; /* a gap between functions, an unsupported rule, or rbx not known */
    }
    __u64 return_address = 0;
    if (walk_read_word(reader, cfa - 8, &return_address)) return STEP_FAULT;
    __u8 saved_rules = row->saved_rules;
    if ((saved_rules & RBP_OFFSET) && walk_read_word(reader, cfa + (__u64)(__s64)row->rbp_offset, fp)) return STEP_FAULT;
    if (saved_rules & RBX_LOST) {
        *rbx = 0;
        *rbx_slot = 0;
    } else if (saved_rules & RBX_OFFSET) {
        *rbx_slot = cfa + (__u64)(__s64)row->rbx_offset;
    }
    *sp = cfa;
    *pc = return_address;
    return STEP_DONE;
}

/* A frame-pointer step (JIT code, files without rows, gaps): -1 when the walk
 * goes on with the caller's (pc, sp, fp), else how it ended (WALK_*; a read
 * that failed is WALK_READ_FAULT, which the includer may tell apart). */
static WALK_STEP_INLINE int walk_frame_pointer_step(__u64 *pc, __u64 *sp, __u64 *fp, __u64 *rbx, __u64 *rbx_slot,
                                                    struct walk_reader *reader) {
    if (*fp == 0) return WALK_COMPLETE;
    /* A frame lies above the stack pointer. rbp below it is not a frame
     * pointer (code that uses rbp as a general register): not a chain. */
    if (*fp < *sp) return WALK_BAD_FRAME;
    __u64 saved_fp = 0, return_address = 0;
    if (walk_read_frame(reader, *fp, &saved_fp, &return_address)) return WALK_READ_FAULT;
    if (return_address == 0) return WALK_COMPLETE;
    /* The saved rbp is only checked when the next step needs it as a frame
     * pointer (above): a caller unwound by its rows may hold anything in rbp,
     * e.g. an interpreter loop that called into JIT code. */
    *pc = return_address;
    *sp = *fp + 16;
    *fp = saved_fp;
    *rbx = 0; /* code without rows may have used it: not known */
    *rbx_slot = 0;
    return -1;
}

#endif
