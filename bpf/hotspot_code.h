/* HotSpot's compiled code at a leaf's pc (x86-64), decoded for the step over
 * a leaf caught while its frame is being built or taken down: written once
 * for the BPF walker (bpf/hotspot_frames.bpf.h) and for user space
 * (native/hotspot_code.c: samples taken before the kernel stepped a JVM's
 * code, and the tests).
 *
 * The includer defines HOTSPOT_CODE_INLINE (BPF: __always_inline). */
#ifndef JITPROF_HOTSPOT_CODE_H
#define JITPROF_HOTSPOT_CODE_H

#include "jitprof_abi.h"

/* The code bytes around a pc, as scalars: indexing a stack buffer at an
 * offset the compiler computes would make it or a pointer (BPF). */
struct code_bytes {
    __u64 words[3];
};
#define HOTSPOT_CODE_BYTES 24
#define HOTSPOT_PROLOGUE_BEFORE 8 /* a prologue's bytes are read from pc - 8: the instruction before matters */

static HOTSPOT_CODE_INLINE __u8 code_byte(const struct code_bytes *code, const __u32 at) {
    return (__u8)(code->words[(at >> 3) % 3] >> ((at & 7) * 8));
}

/* Do the instructions at code[at] return? `ret`, or the return's poll of the
 * thread's stack watermark before it: `cmp rsp, [r15 + disp32 or disp8]`
 * and `ja`, or the `ja` alone. */
static HOTSPOT_CODE_INLINE int hotspot_jumps_then_returns(const struct code_bytes *code, const __u32 at) {
    if (code_byte(code, at) == 0x0f && code_byte(code, at + 1) == 0x87) return code_byte(code, at + 6) == 0xc3; /* ja rel32 */
    if (code_byte(code, at) == 0x77) return code_byte(code, at + 2) == 0xc3;                                    /* ja rel8 */
    return 0;
}

static HOTSPOT_CODE_INLINE int hotspot_returns(const struct code_bytes *code, const __u32 at) {
    if (code_byte(code, at) == 0xc3) return 1;
    if (code_byte(code, at) != 0x49 || code_byte(code, at + 1) != 0x3b) return hotspot_jumps_then_returns(code, at);
    if (code_byte(code, at + 2) == 0xa7) return hotspot_jumps_then_returns(code, at + 7);
    if (code_byte(code, at + 2) == 0x67) return hotspot_jumps_then_returns(code, at + 4);
    return 0;
}

/* A leaf caught in a compiled method's epilogue, decoded forward from the
 * pc's bytes (pc an instruction's start): 1 when only the return address is
 * left on the stack (at `ret`, or at the return's poll after `pop rbp`), 2
 * when rbp is too (at `pop rbp`), 0 otherwise (the frame is whole). */
static HOTSPOT_CODE_INLINE int hotspot_epilogue_of(const struct code_bytes *code) {
    if (code_byte(code, 0) == 0x5d) return hotspot_returns(code, 1) ? 2 : 0; /* pop rbp */
    return hotspot_returns(code, 0);
}

/* A leaf caught in a compiled method's prologue (before its frame is
 * complete), from the bytes at pc - 8 (code_byte(code, 8) is pc's). The
 * prologue is HotSpot's own (C1 and C2 alike): stack bangs `mov [rsp - N],
 * eax`, then C1's `push rbp` (`mov rbp, rsp` with frame pointers) and `sub
 * rsp, size`; or C2's `sub rsp, size`, `mov [rsp + d], rbp` (with frame
 * pointers `mov rbp, rsp` and `add rbp, d`); then a compare and branch of
 * the nmethod entry barrier (JDK 21 on, or ZGC's and Shenandoah's).
 * HotSpot encodes `mov rbp, rsp` as 48 8b ec. */
#define PROLOGUE_UNKNOWN 0     /* the unverified entry, or code not recognised: no step */
#define PROLOGUE_RETURN_ONLY 1 /* nothing but the return address pushed yet */
#define PROLOGUE_RBP_PUSHED 2  /* the return address and the caller's rbp */
#define PROLOGUE_RBP_UNSAVED 3 /* the frame allocated, the caller's rbp still in rbp */
#define PROLOGUE_FRAME_BUILT 4 /* the frame whole: the caller's rbp saved in it */

/* `mov rbp, rsp` at code[at], in either encoding. */
static HOTSPOT_CODE_INLINE int hotspot_moves_rsp_to_rbp(const struct code_bytes *code, const __u32 at) {
    if (code_byte(code, at) != 0x48) return 0;
    __u8 opcode = code_byte(code, at + 1), operands = code_byte(code, at + 2);
    return (opcode == 0x89 && operands == 0xe5) || (opcode == 0x8b && operands == 0xec);
}

/* Bytes of the nop at code[at] (0: none): HotSpot pads the nmethod entry
 * barrier's compare to a 4-byte boundary, so that the immediate it patches
 * to arm the barrier is aligned, with nops of 1 to 3 bytes. */
static HOTSPOT_CODE_INLINE __u32 hotspot_padding_at(const struct code_bytes *code, const __u32 at) {
    __u8 first = code_byte(code, at), second = code_byte(code, at + 1), third = code_byte(code, at + 2);
    if (first == 0x90) return 1;
    if (first == 0x66 && second == 0x90) return 2;
    if ((first == 0x66 && second == 0x66 && third == 0x90) || (first == 0x0f && second == 0x1f && third == 0x00)) return 3;
    return 0;
}

/* cmp dword [r15 + disp8], imm32 or imm8 at code[at]: the entry barrier's compare. */
static HOTSPOT_CODE_INLINE int hotspot_barrier_compare_at(const struct code_bytes *code, const __u32 at) {
    return code_byte(code, at) == 0x41 && (code_byte(code, at + 1) == 0x81 || code_byte(code, at + 1) == 0x83) &&
           code_byte(code, at + 2) == 0x7f;
}

static HOTSPOT_CODE_INLINE int hotspot_prologue_of(const struct code_bytes *code) {
    const __u32 pc = HOTSPOT_PROLOGUE_BEFORE;
    __u8 first = code_byte(code, pc), second = code_byte(code, pc + 1), third = code_byte(code, pc + 2);
    /* What the instruction before pc was, from its last bytes. */
    __u8 after_push = code_byte(code, pc - 1) == 0x55;
    __u8 after_move = hotspot_moves_rsp_to_rbp(code, pc - 3);
    __u8 after_save = code_byte(code, pc - 3) == 0x6c && code_byte(code, pc - 2) == 0x24; /* mov [rsp + disp8], rbp */
    /* cmp dword [r15 + disp8], imm32 or imm8: the nmethod entry barrier's compare */
    __u8 after_barrier =
        (code_byte(code, pc - 8) == 0x41 && code_byte(code, pc - 7) == 0x81 && code_byte(code, pc - 6) == 0x7f) ||
        (code_byte(code, pc - 5) == 0x41 && code_byte(code, pc - 4) == 0x83 && code_byte(code, pc - 3) == 0x7f);
    if (first == 0x89 && second == 0x84 && third == 0x24) return PROLOGUE_RETURN_ONLY; /* mov [rsp + disp32], eax */
    if (first == 0x55) return PROLOGUE_RETURN_ONLY;                                    /* push rbp */
    if (hotspot_moves_rsp_to_rbp(code, pc)) {
        if (after_push) return PROLOGUE_RBP_PUSHED;
        return after_save ? PROLOGUE_FRAME_BUILT : PROLOGUE_UNKNOWN;
    }
    if (first == 0x48 && (second == 0x83 || second == 0x81) && third == 0xec) /* sub rsp, imm */
        return after_push || after_move ? PROLOGUE_RBP_PUSHED : PROLOGUE_RETURN_ONLY;
    if (first == 0x48 && (second == 0x83 || second == 0x81) && third == 0xc5 && after_move)
        return PROLOGUE_FRAME_BUILT; /* add rbp, imm: rbp made the frame's own */
    if (first == 0x48 && second == 0x89 && (third == 0x6c || third == 0xac) && code_byte(code, pc + 3) == 0x24)
        return PROLOGUE_RBP_UNSAVED;                                       /* mov [rsp + disp], rbp */
    if (hotspot_barrier_compare_at(code, pc)) return PROLOGUE_FRAME_BUILT; /* the entry barrier's compare */
    __u32 padding = hotspot_padding_at(code, pc);
    if (padding && hotspot_barrier_compare_at(code, pc + padding)) return PROLOGUE_FRAME_BUILT;             /* and its padding */
    if (((first == 0x0f && second == 0x85) || first == 0x75) && after_barrier) return PROLOGUE_FRAME_BUILT; /* and its jne */
    return PROLOGUE_UNKNOWN;
}

#endif
