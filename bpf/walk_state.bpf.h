// The walk's state: the per-CPU scratch a walk builds its sample in, carried
// across the walker's tail calls, and the arrays of the walking programs.
#pragma once

// Walk state carried across tail calls, with the sample being built. Per
// CPU: a perf-event program never nests with itself on one CPU.
struct walk_scratch {
    u64 pc;
    u64 sp;
    u64 fp;
    u64 rbx;      // 0 (and rbx_slot 0): not known
    u64 rbx_slot; // where the caller's rbx was saved, read only if a frame's CFA is kept in rbx
    u32 depth;
    u32 space_tgid; // whose trie entries the walk uses (address_space_of)
    u32 readable;   // read_stack_pages: the bytes copied so far
    u16 copy_holes; // read_stack_pages: the pages not in memory
    u16 v8_count;
    u8 exact_pc;          // the leaf, or a frame a signal interrupted: no pc - 1
    u8 deep;              // past MAX_FRAMES: the rest is copied for user space to walk, in a record of its own size
    u8 by_frame_size;     // a JVM without frame pointers: hotspot says how to step over its compiled frames
    u8 hotspot_leaf;      // a JVM with them: hotspot says how to step over a leaf in a prologue or epilogue
    u8 walker_calls_left; // before the rest is handed to user space (the tail calls left for the copier)
    struct v8_process v8; // builtins_end 0: not a V8 process (nor a JVM)
    u64 leaf_bcp;         // a CPU sample's r13: HotSpot's bytecode pointer, if the leaf is interpreted
    u64 hotspot_gc_count; // the JVM's GC count + 1, read at its first interpreted frame (0: not yet)
    struct hotspot_code hotspot;
    u8 blob[HOTSPOT_BLOB_HEADER_BYTES];
    struct sample_event event;
};
_Static_assert(sizeof(struct walk_scratch) <= 32768, "a per-CPU map value is 32 KiB at most");

// JS frames are noted at the end of the event's copy space while the walk
// goes on, and moved in behind the addresses when it ends (place_v8_frames),
// before any stack copy is written there.
#define V8_NOTES_OFFSET (sizeof(((struct sample_event *)0)->copy_space) - MAX_V8_FRAMES * sizeof(struct v8_frame))
static __always_inline struct v8_frame *v8_notes(struct walk_scratch *scratch) {
    return (struct v8_frame *)(scratch->event.copy_space + V8_NOTES_OFFSET);
}

// Which programs walk: the sampler's, the scheduler's tracepoints', the uprobes'.
#define WALKERS_PERF_EVENT 0
#define WALKERS_TRACEPOINT 1
#define WALKERS_UPROBE 2

// One per kind of walking program (WALKERS_*): a sample's NMI may come in
// the middle of a tracepoint's or a uprobe's walk on the same CPU, and a
// uprobe's program may be preempted; a shared one would be overwritten
// (a threadpool submit sent as another sample, its work never charged).
BPF_PERCPU_ARRAY(walk_scratch_space, struct walk_scratch, 3);

static __always_inline struct walk_scratch *scratch_of(const int walkers) {
    u32 index = walkers;
    return walk_scratch_space.lookup(&index);
}

// The walker tail-calls itself, FRAMES_PER_CALL frames at a time: each call
// is verified on its own, so the per-frame binary search stays within the
// verifier's budget, and MAX_FRAMES / FRAMES_PER_CALL calls and the copier's
// stay within the kernel's 33 tail calls (one walker call fewer where the V8
// context reader takes one). The verifier walks the loop once per frame: 4
// frames a call verify in 0.11 s, 8 took 0.27 s of every start.
#define WALKER_CALLS ((MAX_FRAMES + FRAMES_PER_CALL - 1) / FRAMES_PER_CALL)
BPF_PROG_ARRAY(stack_walkers, 5); // WALKER_PROGRAM, COPIER_PROGRAM, ASYNC_PROGRAM, CONTEXT_PROGRAM, JVM_WALKER_PROGRAM
#ifdef WITH_OFF_CPU
// The same walker and copier loaded as tracepoint programs, for waits: a
// tail call stays within one program type, and an array serves one.
BPF_PROG_ARRAY(off_cpu_walkers, 5);
// And as uprobe (kprobe-type) programs, for the threadpool's submitters.
BPF_PROG_ARRAY(uprobe_walkers, 5);
#endif

// The next program of a walk, of the caller's type (a constant after
// inlining: a program refers to its own array only).
static __always_inline void tail_call_walker(void *ctx, const int walkers, const int index) {
#ifdef WITH_OFF_CPU
    if (walkers == WALKERS_TRACEPOINT) {
        off_cpu_walkers.call(ctx, index);
        return;
    }
    if (walkers == WALKERS_UPROBE) {
        uprobe_walkers.call(ctx, index);
        return;
    }
#endif
    stack_walkers.call(ctx, index);
}

// A walk that could not read the stack of a thread in the kernel on its way
// out: its user memory is gone, not the walk wrong.
static __always_inline int user_memory_gone(struct walk_scratch *scratch) {
    u32 tid = scratch->event.tid;
    return !scratch->event.user_mode && exiting_threads.lookup(&tid) != NULL;
}

// The V8 frames go right after the depth addresses: their bytes.
static __always_inline u32 place_v8_frames(struct walk_scratch *scratch, u32 depth) {
    u32 v8_count = scratch->v8_count;
    if (v8_count > MAX_V8_FRAMES) v8_count = MAX_V8_FRAMES;
    scratch->event.v8_frame_count = v8_count;
    u32 size = v8_count * sizeof(struct v8_frame);
    if (size == 0 || depth > MAX_FRAMES || size > MAX_V8_FRAMES * sizeof(struct v8_frame)) return 0;
    if (bpf_probe_read_kernel((u8 *)scratch->event.addresses + depth * 8, size, v8_notes(scratch)) != 0) {
        scratch->event.v8_frame_count = 0;
        return 0;
    }
    return size;
}

// The reader's state between its tail calls, in the event's copy space
// before the V8 frames' notes, with the frames it found.
#define ASYNC_KNOWN_MAPS 8   /* maps' instance types kept within a sample's chain */
#define ASYNC_KNOWN_SHARED 4 /* closures' shared infos' roles kept within it */
struct v8_async_walk {
    u64 promise; // the next promise to follow (0: none)
    u16 hops;
    u16 count;
    u8 cut;
    u8 next_map;    // where the next type is kept (round robin)
    u8 next_shared; // where the next role is kept
    u8 reserved;
    u64 maps[ASYNC_KNOWN_MAPS]; // 0: free
    u16 types[ASYNC_KNOWN_MAPS];
    u64 shared[ASYNC_KNOWN_SHARED]; // 0: free
    u8 roles[ASYNC_KNOWN_SHARED];
    struct v8_isolate_read isolate; // as the labels' reader read it at the sample's start
};
// Bytes of V8's heap read at once around an object of the chain: V8
// allocates an await's context, its two closures and its reaction (later
// the microtask, in the reaction's place) one after the other, and an async
// function's promise just before its generator, so one read often holds
// what took three. An object is taken from it only when it lies wholly
// inside (the words past the read are room for a window, never used).
#define ASYNC_NEAR_WORDS 32
#define ASYNC_SPARE_WORDS 16
struct v8_async_near {
    u64 start;  // the user address of words[0] (0: nothing read)
    u64 length; // bytes read
    u64 words[ASYNC_NEAR_WORDS + ASYNC_SPARE_WORDS];
};
#define ASYNC_NOTES_OFFSET (V8_NOTES_OFFSET - MAX_ASYNC_FRAMES * sizeof(struct v8_async_frame))
#define ASYNC_WALK_OFFSET (ASYNC_NOTES_OFFSET - sizeof(struct v8_async_walk))
#define ASYNC_NEAR_OFFSET ((ASYNC_WALK_OFFSET - 2 * sizeof(struct v8_async_near)) & ~7UL)
_Static_assert(ASYNC_NEAR_OFFSET > (MAX_FRAMES + 1) * 8 + MAX_V8_FRAMES * sizeof(struct v8_frame) +
                                       MAX_ASYNC_FRAMES * sizeof(struct v8_async_frame),
               "the notes stay clear of where the frames are placed when sent");

static __always_inline struct v8_async_walk *async_walk_of(struct walk_scratch *scratch) {
    return (struct v8_async_walk *)(scratch->event.copy_space + ASYNC_WALK_OFFSET);
}

// Two reads around objects: an await's (its reaction or microtask, closures
// and context) and a generator's (with its promise).
static __always_inline struct v8_async_near *async_near_of(struct walk_scratch *scratch, int which) {
    return (struct v8_async_near *)(scratch->event.copy_space + ASYNC_NEAR_OFFSET + (which & 1) * sizeof(struct v8_async_near));
}

static __always_inline struct v8_async_frame *async_notes(struct walk_scratch *scratch) {
    return (struct v8_async_frame *)(scratch->event.copy_space + ASYNC_NOTES_OFFSET);
}

// The async callers' frames go right after the V8 frames: their bytes.
static __always_inline u32 place_async_frames(struct walk_scratch *scratch, u32 offset) {
    u32 count = scratch->event.async_count;
    if (count == 0) return 0;
    if (count > MAX_ASYNC_FRAMES || offset > MAX_FRAMES * 8 + MAX_V8_FRAMES * sizeof(struct v8_frame)) {
        scratch->event.async_count = 0;
        return 0;
    }
    u32 size = count * sizeof(struct v8_async_frame);
    if (size > MAX_ASYNC_FRAMES * sizeof(struct v8_async_frame)) return 0;
    if (bpf_probe_read_kernel((u8 *)scratch->event.addresses + offset, size, async_notes(scratch)) != 0) {
        scratch->event.async_count = 0;
        return 0;
    }
    return size;
}

// The header, the walked addresses, the V8 frames and async callers only: most samples are small.
static __always_inline void submit_sample(struct walk_scratch *scratch) {
    if (scratch->event.walk_end == WALK_READ_FAULT && user_memory_gone(scratch)) scratch->event.walk_end = WALK_THREAD_EXITING;
    u32 depth = scratch->depth;
    if (depth > MAX_FRAMES) depth = MAX_FRAMES;
    scratch->event.frame_count = depth;
    u32 v8_bytes = place_v8_frames(scratch, depth);
    u32 async_bytes = place_async_frames(scratch, depth * 8 + v8_bytes);
    if (events.ringbuf_output(&scratch->event, SAMPLE_HEADER_BYTES + depth * 8 + v8_bytes + async_bytes,
                              v8_context_wakeup(&scratch->event)) != 0)
        count(COUNTER_RINGBUF_FULL);
}
