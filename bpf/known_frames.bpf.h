// The frames a CPU has stepped: a return address met again is stepped
// without the trie's lookup and the row's search, which cost most of a
// native frame's step (each a chain of reads cold in the cache: the trie's
// nodes, a binary search through megabytes of rows). An entry answers only
// the same address space and address, and only while the trie is as it was
// when the entry was made: the trie's generation, moved on by whoever
// changes the trie (user space for the maps it reads, this program for new
// executable memory), is part of it. Only lasting answers are kept: a table
// being built, or not live yet, is asked again. Direct-mapped: a collision
// replaces.
#pragma once

#define FRAMES_KNOWN_BLOCK 512 /* entries in a per-CPU value (32 KiB at most) */
#define FRAMES_KNOWN_BLOCKS 4  /* per kind of walker */
#define ROW_NOT_SOUGHT 0
#define ROW_FOUND 1
#define ROW_NONE 2 /* a frame-pointer step: a gap, or a file without a table */
struct frame_known {
    u64 pc; // looked up (a return address less one)
    u64 generation;
    u32 tgid;
    u8 row_state;
    u8 reserved[3];
    struct mapping_info mapping;
    struct unwind_row row;
};
struct frames_known {
    struct frame_known entries[FRAMES_KNOWN_BLOCK];
};
_Static_assert(sizeof(struct frames_known) <= 32768, "a per-CPU map value is 32 KiB at most");
// Per CPU and per kind of walker: a sample's NMI may come in the middle of a
// tracepoint's walk on the same CPU and must not tear its entry. Uprobes'
// walks, which may preempt one another, keep none.
BPF_PERCPU_ARRAY(frames_known, struct frames_known, 2 * FRAMES_KNOWN_BLOCKS);

// The entry an address of tgid has its place in (NULL: this walker keeps none).
static __always_inline struct frame_known *known_frame_slot(const int walkers, u32 tgid, u64 pc) {
    if (walkers != WALKERS_PERF_EVENT && walkers != WALKERS_TRACEPOINT) return NULL;
    u64 mixed = (pc >> 1) ^ (pc >> 12) ^ (pc >> 23) ^ ((u64)tgid * 0x9e3779b1ULL);
    u32 block = walkers * FRAMES_KNOWN_BLOCKS + ((mixed >> 9) & (FRAMES_KNOWN_BLOCKS - 1));
    struct frames_known *known = frames_known.lookup(&block);
    if (!known) return NULL;
    return &known->entries[mixed & (FRAMES_KNOWN_BLOCK - 1)];
}

// The trie's generation now: the kernel's count in the low half, user space's in the high.
static __always_inline u64 trie_generation_now(void) {
    u32 zero = 0;
    struct trie_generation *generation = trie_generations.lookup(&zero);
    if (!generation) return 0;
    return ((u64)generation->user << 32) | generation->kernel;
}

// Whether a frame was a known one, and the trie's generation when it was
// looked up, kept in memory across the row's search, not in registers: there
// the verifier walked the search and the rest of the step once for each way
// the frame was found (three times the walker's verification, when the known
// frames came). One per kind of walker, as the scratch is.
struct frame_found {
    u64 generation;
    u8 row_state; // as found, before the search
    u8 known;
};
BPF_PERCPU_ARRAY(frames_found, struct frame_found, 3);

static __always_inline struct frame_found *frame_found_of(const int walkers) {
    u32 index = walkers;
    return frames_found.lookup(&index);
}

// Keep what the step found for the next time the CPU meets the address
// (only lasting answers about code: the caller says which are).
static __always_inline void remember_frame(const int walkers, u32 tgid, u64 lookup_pc, const struct frame_found *found,
                                           const struct mapping_info *mapping, const struct unwind_row *row, u8 row_state) {
    if (found->known && row_state == found->row_state) return; // kept as it is
    if (mapping->kind != MAPPING_ELF && mapping->kind != MAPPING_JIT) return;
    struct frame_known *known = known_frame_slot(walkers, tgid, lookup_pc);
    if (!known) return;
    known->pc = lookup_pc;
    known->generation = found->generation;
    known->tgid = tgid;
    known->row_state = row_state;
    known->mapping = *mapping;
    known->row = *row;
}
