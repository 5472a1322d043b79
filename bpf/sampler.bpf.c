// jitprof's in-kernel half: sample followed processes, walk their user
// stacks, and tell user space when processes fork, exec, exit or map code.
//
// Compiled by BCC at run time. The records, codes and limits user space
// reads are in jitprof_abi.h; the sizes of maps and other settings
// (TRIE_ENTRIES, RINGBUF_PAGES, ...) come from profiler/kernel/bpf_program.py
// as -D flags.
#include <uapi/linux/ptrace.h>
#include <uapi/linux/bpf_perf_event.h>
#include <linux/sched.h>

#include "jitprof_abi.h"

#define HOTSPOT_JVMS 1024

// The walk's memory reads: the thread's own user memory.
// A frame-pointer step reads the 16 bytes at fp. A JS frame's slots below fp
// are read with them in one read (note_v8_frame): the step then takes them
// from here, one read per JS frame instead of two.
struct walk_reader {
    u64 frame_fp; // 0: nothing read ahead
    u64 saved_fp;
    u64 return_address;
    u64 sender_sp; // a HotSpot interpreted frame's caller's sp (0: not read)
};

static __always_inline int walk_read_word(struct walk_reader *reader, u64 address, __u64 *value) {
    return bpf_probe_read_user(value, sizeof(*value), (void *)address) != 0;
}

static __always_inline int walk_read_frame(struct walk_reader *reader, u64 fp, __u64 *saved_fp, __u64 *return_address) {
    if (reader->frame_fp != 0 && reader->frame_fp == fp) {
        *saved_fp = reader->saved_fp;
        *return_address = reader->return_address;
        return 0;
    }
    u64 frame[2];
    if (bpf_probe_read_user(frame, sizeof(frame), (void *)fp) != 0) return 1;
    *saved_fp = frame[0];
    *return_address = frame[1];
    return 0;
}

#define WALK_STEP_INLINE __always_inline
#include "walk_step.h"

_Static_assert(COMM_LEN == TASK_COMM_LEN, "a comm is the kernel's");
_Static_assert(sizeof(struct sample_event) - sizeof(((struct sample_event *)0)->addresses) -
                       sizeof(((struct sample_event *)0)->copy_space) ==
                   SAMPLE_HEADER_BYTES,
               "the header user space reads");

// bpf_tail_call indexes of stack_walkers.
#define WALKER_PROGRAM 0
#define COPIER_PROGRAM 1

#define PROT_EXEC_FLAG 0x4
#define STALE_EVENT_GAP_NS 1000000ULL // maps-changed events of one process while its maps are not read

struct exec_mapping_call {
    u64 address; // mprotect: the range; mmap: known at exit
    u64 length;
    u8 is_mprotect;
};

// Followed processes, each with how many times it has exec'd: only this
// program changes a count, so user space can tell whether the maps it read
// are still the process's (maps_read holds the count they were read at).
BPF_HASH(followed, u32, u32, FOLLOWED_ENTRIES);
BPF_HASH(maps_read, u32, u32, FOLLOWED_ENTRIES);
// A forked child whose maps user space has not read yet walks with its
// parent's trie entries: until it execs, its code is its parent's.
BPF_HASH(fork_parents, u32, u32, FOLLOWED_ENTRIES);
// Processes with a maps-changed event user space has not read their maps
// for: the time of the latest event.
BPF_HASH(maps_stale, u32, u64, FOLLOWED_ENTRIES);
// Threads past sched_process_exit: their user memory goes next (exit_mm).
BPF_TABLE("lru_hash", u32, u8, exiting_threads, FOLLOWED_ENTRIES);
// --all: settings[0] is 1, and every process with user code is followed
// from its first sample, but for those user space ignores (its own).
BPF_ARRAY(settings, u32, 1);
BPF_HASH(ignored, u32, u8, 256);
BPF_LPM_TRIE(mappings, struct trie_key, struct mapping_info, TRIE_ENTRIES);
// Followed processes that run V8, with where their builtins are: their JS
// frames are sent with the slots that identify them (struct v8_frame).
BPF_HASH(v8_processes, u32, struct v8_process, FOLLOWED_ENTRIES);
// Followed JVMs whose compiled code keeps no frame pointer: what stepping
// over such a frame by its size needs (struct hotspot_code).
BPF_HASH(hotspot_code, u32, struct hotspot_code, HOTSPOT_JVMS);
#ifdef WITH_KERNEL_STACKS
BPF_STACK_TRACE(kernel_stacks, KERNEL_STACK_ENTRIES);
#endif
BPF_RINGBUF_OUTPUT(events, RINGBUF_PAGES);
BPF_PERCPU_ARRAY(counters, u64, COUNTER_COUNT);
#ifdef WITH_DWARF
// Compiled .eh_frame rows (native/unwind.c), one slice per ELF file,
// written by user space through mmap.
BPF_F_TABLE("array", u32, struct unwind_row, unwind_rows, UNWIND_ROWS, BPF_F_MMAPABLE);
BPF_ARRAY(unwind_tables, struct unwind_table, UNWIND_TABLES);
#endif

// Threads inside an mmap/mprotect that asked for PROT_EXEC.
BPF_HASH(exec_mapping_calls, u32, struct exec_mapping_call, 4096);

#ifdef WITH_OFF_CPU
// --off-cpu: threads of followed processes, timed as they wait.
BPF_HASH(off_cpu_threads, u32, struct off_cpu_thread, OFF_CPU_THREADS);
// OFF_CPU_SETTING_*: the shortest wait recorded one by one.
BPF_ARRAY(off_cpu_settings, u64, OFF_CPU_SETTINGS);
// Per CPU, the thread (its task_struct) running there with a wait to report
// on its way back to user space (0: none): every thread coming back from a
// switch passes rseq_update (and every system call's return sys_exit, when
// attached), and most have only this word to compare.
BPF_PERCPU_ARRAY(wait_to_report, u64, 1);
// 1 once a followed thread without rseq began a wait (user space was told).
BPF_ARRAY(waits_without_rseq, u32, 1);
#define WITHOUT_RSEQ_NS 100000000ULL
// Node's threadpool: items submitted and not done, by process and address;
// the item each pool thread runs (its key), and the item whose completion
// each loop thread runs. LRU: a process that dies leaves its entries.
BPF_TABLE("lru_hash", struct work_address, struct work_item, threadpool_works, OFF_CPU_THREADS);
BPF_TABLE("lru_hash", u32, u64, threadpool_running, OFF_CPU_THREADS);
// The item whose completion a loop thread runs, with its key: its address may
// hold another item by the time the completion is over (zlib resubmits its
// own uv_work_t from its callback; a freed request's memory is reused).
struct work_completion {
    struct work_address address;
    u64 key;
};
BPF_TABLE("lru_hash", u32, struct work_completion, threadpool_completing, OFF_CPU_THREADS);

// A u32 field of a task_struct, at the running kernel's offset: TASK_PID_OFFSET
// and TASK_FLAGS_OFFSET come from its BTF (profiler/kernel/kernel_btf.py), as
// BCC's headers may be another kernel version's.
static __always_inline u32 task_field(u64 task, const u64 offset) {
    u32 value = 0;
    if (task != 0) bpf_probe_read_kernel(&value, sizeof(value), (void *)(task + offset));
    return value;
}

#ifdef TASK_RSEQ_OFFSET
// Has the current thread registered rseq (glibc 2.35 and later do for every thread)?
static __always_inline int has_rseq(void) {
    u64 area = 0;
    bpf_probe_read_kernel(&area, sizeof(area), (void *)(bpf_get_current_task() + TASK_RSEQ_OFFSET));
    return area != 0;
}
#endif

static __always_inline u64 work_running(u32 tid) {
    u64 *key = threadpool_running.lookup(&tid);
    return key ? *key : 0;
}
#endif

static __always_inline void count(int index) {
    u64 *value = counters.lookup(&index);
    if (value) *value += 1;
}

static __always_inline int is_followed(u32 tgid) {
    return tgid != 0 && followed.lookup(&tgid) != NULL;
}

// Does the trie hold tgid's current mappings (read since its last exec)?
static __always_inline int maps_known(u32 tgid) {
    u32 *execs = followed.lookup(&tgid);
    u32 *read = maps_read.lookup(&tgid);
    return execs && read && *execs == *read;
}

// Whose trie entries describe tgid's code now: its own, its parent's while
// a forked child's own are not read, or none (0).
static __always_inline u32 address_space_of(u32 tgid) {
    if (maps_known(tgid)) return tgid;
    u32 *parent = fork_parents.lookup(&tgid);
    if (parent && maps_known(*parent)) return *parent;
    return 0;
}

static __always_inline struct mapping_info *find_mapping(u32 tgid, u64 address) {
    struct trie_key key = {};
    key.prefixlen = 96;
    key.pid_be = __builtin_bswap32(tgid);
    key.address_be = __builtin_bswap64(address);
    return mappings.lookup(&key);
}

#ifdef WITH_DWARF
// One DWARF step: find the row for lookup_pc in the mapping's table and
// apply it to (pc, sp, fp).
static __always_inline int dwarf_step(struct mapping_info *mapping, u64 lookup_pc, u64 *pc, u64 *sp, u64 *fp) {
    u32 table_id = mapping->table_id;
    if (table_id == 0) return STEP_FALLBACK;
    struct unwind_table *table = unwind_tables.lookup(&table_id);
    if (!table) return STEP_FALLBACK;
    if (table->first_row == TABLE_PENDING) return STEP_PENDING;
    if (table->row_count == 0) return STEP_FALLBACK;
    u64 file_pc = lookup_pc - mapping->load_bias;
    if (file_pc > 0xffffffffULL) return STEP_FALLBACK;
    u32 target = (u32)file_pc;
    u32 first = table->first_row;
    u32 low = first, high = first + table->row_count;
    // Binary search for the last row at or below target: 2^SEARCH_STEPS rows
    // at most, a bound the verifier can see.
    for (int step = 0; step < SEARCH_STEPS; step++) {
        if (low >= high) break;
        u32 middle = low + (high - low) / 2;
        struct unwind_row *probe = unwind_rows.lookup(&middle);
        if (!probe) return STEP_FALLBACK;
        if (probe->pc <= target)
            low = middle + 1;
        else
            high = middle;
    }
    if (low == first) return STEP_FALLBACK;
    u32 found = low - 1;
    struct unwind_row *row = unwind_rows.lookup(&found);
    if (!row) return STEP_FALLBACK;

    struct walk_reader reader = {};
    return walk_apply_row(row, pc, sp, fp, &reader);
}
#endif

// Walk state carried across tail calls, with the sample being built. Per
// CPU: a perf-event program never nests with itself on one CPU.
struct walk_scratch {
    u64 pc;
    u64 sp;
    u64 fp;
    u32 depth;
    u32 space_tgid; // whose trie entries the walk uses (address_space_of)
    u8 exact_pc;    // the leaf, or a frame a signal interrupted: no pc - 1
    u8 deep;        // past MAX_FRAMES: the rest is copied for user space to walk
    u16 v8_count;
    struct v8_process v8; // builtins_end 0: not a V8 process (nor a JVM)
    u64 leaf_bcp;         // a CPU sample's r13: HotSpot's bytecode pointer, if the leaf is interpreted
    u64 hotspot_gc_count; // the JVM's GC count + 1, read at its first interpreted frame (0: not yet)
    u8 by_frame_size;     // a JVM without frame pointers: hotspot says how to step over its compiled frames
    struct hotspot_code hotspot;
    u8 blob[HOTSPOT_BLOB_HEADER_BYTES];
    struct sample_event event;
};

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
// The walker tail-calls itself, FRAMES_PER_CALL frames at a time: each call
// is verified on its own, so the per-frame binary search stays within the
// verifier's budget, and MAX_FRAMES / FRAMES_PER_CALL calls and the copier's
// stay within the kernel's 33 tail calls. The verifier walks the loop once
// per frame: 4 frames a call verify in 0.11 s, 8 took 0.27 s of every start.
BPF_PROG_ARRAY(stack_walkers, 2); // WALKER_PROGRAM, COPIER_PROGRAM
#ifdef WITH_OFF_CPU
// The same walker and copier loaded as tracepoint programs, for waits: a
// tail call stays within one program type, and an array serves one.
BPF_PROG_ARRAY(off_cpu_walkers, 2);
// And as uprobe (kprobe-type) programs, for the threadpool's submitters.
BPF_PROG_ARRAY(uprobe_walkers, 2);
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

// The header, the walked addresses and the V8 frames only: most samples are small.
static __always_inline void submit_sample(struct walk_scratch *scratch) {
    if (scratch->event.walk_end == WALK_READ_FAULT && user_memory_gone(scratch)) scratch->event.walk_end = WALK_THREAD_EXITING;
    u32 depth = scratch->depth;
    if (depth > MAX_FRAMES) depth = MAX_FRAMES;
    scratch->event.frame_count = depth;
    u32 v8_bytes = place_v8_frames(scratch, depth);
    if (events.ringbuf_output(&scratch->event, SAMPLE_HEADER_BYTES + depth * 8 + v8_bytes, BPF_RB_NO_WAKEUP) != 0)
        count(COUNTER_RINGBUF_FULL);
}

// Is pc in a followed V8 process's builtins (the interpreter among them)?
static __always_inline u8 in_v8_builtins(struct walk_scratch *scratch, u64 pc) {
    if (scratch->v8.builtins_end == 0) return 0;
    return (pc >= scratch->v8.builtins_start && pc < scratch->v8.builtins_end) ||
           (pc >= scratch->v8.copy_start && pc < scratch->v8.copy_end);
}

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

// A frame of V8's JIT code or builtins: if its context slot holds a tagged
// pointer (a JS frame), keep what says which function it runs and where. The
// slots are read with the frame's saved fp and return address, which the
// frame-pointer step then takes from the reader.
static __always_inline void note_v8_frame(struct walk_scratch *scratch, struct mapping_info *mapping, u8 in_builtins, u64 pc,
                                          u64 fp, u32 depth, struct walk_reader *reader) {
    if (scratch->v8.builtins_end == 0) return;
    if (scratch->v8.kind == RUNTIME_HOTSPOT) {
        if (in_builtins) note_hotspot_frame(scratch, fp, depth, reader);
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

// The code bytes at a leaf's pc, as scalars: indexing a stack buffer at an
// offset the compiler computes would make it or a pointer.
struct code_bytes {
    u64 words[3];
};
static __always_inline u8 code_byte(const struct code_bytes *code, const u32 at) {
    return (u8)(code->words[(at >> 3) % 3] >> ((at & 7) * 8));
}

// Do the instructions at code[at] return? `ret`, or the return's poll of the
// thread's stack watermark before it: `cmp rsp, [r15 + disp32 or disp8]`
// and `ja`, or the `ja` alone.
static __always_inline int hotspot_jumps_then_returns(const struct code_bytes *code, const u32 at) {
    if (code_byte(code, at) == 0x0f && code_byte(code, at + 1) == 0x87) return code_byte(code, at + 6) == 0xc3; // ja rel32
    if (code_byte(code, at) == 0x77) return code_byte(code, at + 2) == 0xc3;                                    // ja rel8
    return 0;
}

static __always_inline int hotspot_returns(const struct code_bytes *code, const u32 at) {
    if (code_byte(code, at) == 0xc3) return 1;
    if (code_byte(code, at) != 0x49 || code_byte(code, at + 1) != 0x3b) return hotspot_jumps_then_returns(code, at);
    if (code_byte(code, at + 2) == 0xa7) return hotspot_jumps_then_returns(code, at + 7);
    if (code_byte(code, at + 2) == 0x67) return hotspot_jumps_then_returns(code, at + 4);
    return 0;
}

// A leaf caught in a compiled method's epilogue, decoded forward from pc
// (an instruction's start): 1 when only the return address is left on the
// stack (at `ret`, or at the return's poll after `pop rbp`), 2 when rbp is
// too (at `pop rbp`), 0 otherwise (the frame is whole).
static __always_inline int hotspot_epilogue(u64 pc) {
    struct code_bytes code;
    if (bpf_probe_read_user(&code, sizeof(code), (void *)pc) != 0) return 0;
    if (code_byte(&code, 0) == 0x5d) return hotspot_returns(&code, 1) ? 2 : 0; // pop rbp
    return hotspot_returns(&code, 0);
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
    if (frame_words < 2 || frame_words > HOTSPOT_MAX_FRAME_WORDS || code_begin < blob || code_begin > lookup_pc)
        return STEP_FALLBACK;
    u64 cfa = *sp + (u64)frame_words * 8;
    u8 rbp_saved = 1;
    if (exact_pc) {
        if (complete >= 0 && lookup_pc < code_begin + (u64)complete) return STEP_FAULT;
        int epilogue = hotspot_epilogue(lookup_pc);
        if (epilogue) {
            cfa = *sp + (u64)epilogue * 8;
            rbp_saved = epilogue == 2;
        }
    }
    u64 words[2];
    if (bpf_probe_read_user(words, sizeof(words), (void *)(cfa - 16)) != 0) return STEP_FAULT;
    if (rbp_saved) *fp = words[0];
    *pc = words[1];
    *sp = cfa;
    return STEP_DONE;
}

// Hand the rest of the walk to user space, from the frame at scratch->depth
// (pc not recorded yet): the copier program sends the stack from sp up.
static __always_inline int defer_walk(struct walk_scratch *scratch, u8 exact_pc) {
    scratch->exact_pc = exact_pc;
    scratch->event.walk_end = WALK_DEFERRED;
    return 1;
}

// One frame: record pc, then step to the caller. Returns 1 when the walk
// ended (or is deferred).
static __always_inline int walk_one_frame(struct walk_scratch *scratch, u32 tgid) {
    u32 depth = scratch->depth;
    if (depth >= MAX_FRAMES) {
        // User space walks by frame pointers and rows only: a JVM stepped
        // by frame sizes is cut here rather than walked wrong.
        if (scratch->by_frame_size) return 1;
        scratch->deep = 1;
        return defer_walk(scratch, scratch->exact_pc);
    }
    u64 pc = scratch->pc, sp = scratch->sp, fp = scratch->fp;
    u8 exact_pc = scratch->exact_pc;
    // Caller frames hold return addresses: look up pc - 1, inside the call.
    u64 lookup_pc = exact_pc ? pc : pc - 1;
    struct mapping_info *mapping = find_mapping(tgid, lookup_pc);
    // No entry yet (code mapped since the maps were read), a file whose
    // table is not attached, memory just made executable: user space knows
    // more later, and says "no mapping" if it still does not know the address.
    // V8's builtins (the interpreter among them) have no unwind rows: every
    // address of theirs falls in a gap of node's table, which sends it to the
    // frame-pointer step. They take that step at once, without the search
    // through the table, and while the table is not attached yet (a cold
    // start), so that their JS frames are noted now, while their objects
    // are where the slots say.
    u8 builtins = in_v8_builtins(scratch, lookup_pc);
    if (!mapping || mapping->kind == MAPPING_PROVISIONAL || (mapping->kind == MAPPING_ELF_PENDING && !builtins))
        return defer_walk(scratch, exact_pc);
    scratch->event.addresses[depth] = pc;
    scratch->depth = depth + 1;
    scratch->exact_pc = 0;
    struct walk_reader reader = {};
    note_v8_frame(scratch, mapping, builtins, pc, fp, depth, &reader);
#ifdef WITH_DWARF
    if (mapping->kind == MAPPING_ELF && !builtins) {
        int step = dwarf_step(mapping, lookup_pc, &pc, &sp, &fp);
        if (step == STEP_PENDING) {
            scratch->depth = depth; // user space records this frame again
            return defer_walk(scratch, exact_pc);
        }
        if (step == STEP_END) {
            scratch->event.walk_end = WALK_COMPLETE;
            return 1;
        }
        if (step == STEP_FAULT) {
            scratch->event.walk_end = WALK_READ_FAULT;
            return 1;
        }
        if (step == STEP_DONE || step == STEP_SIGNAL) {
            if (pc == 0) {
                scratch->event.walk_end = WALK_COMPLETE;
                return 1;
            }
            scratch->exact_pc = step == STEP_SIGNAL;
            scratch->pc = pc;
            scratch->sp = sp;
            scratch->fp = fp;
            return 0;
        }
    }
#endif
    if (scratch->by_frame_size && mapping->kind == MAPPING_JIT && !builtins) {
        int step = hotspot_frame_size_step(scratch, lookup_pc, exact_pc, &pc, &sp, &fp);
        if (step == STEP_FAULT) {
            scratch->event.walk_end = WALK_BAD_FRAME;
            return 1;
        }
        if (step == STEP_DONE) {
            if (pc == 0) {
                scratch->event.walk_end = WALK_COMPLETE;
                return 1;
            }
            scratch->pc = pc;
            scratch->sp = sp;
            scratch->fp = fp;
            return 0;
        }
    }
    // Frame-pointer step: JIT code, files without a table, gaps.
    u64 frame_fp = fp;
    int end = walk_frame_pointer_step(&pc, &sp, &fp, &reader);
    if (end >= 0) {
        scratch->event.walk_end = end;
        return 1;
    }
    // A HotSpot interpreted frame's caller may be compiled code, stepped by
    // its size from its own sp: the one the interpreter saved (a c2i adapter
    // moves it from fp + 16).
    if (scratch->by_frame_size && builtins && reader.frame_fp == frame_fp && reader.sender_sp >= sp &&
        reader.sender_sp < sp + 65536)
        sp = reader.sender_sp;
    scratch->pc = pc;
    scratch->sp = sp;
    scratch->fp = fp;
    return 0;
}

// The readable prefix of the bytes of stack from sp up, to within 512 bytes
// of where the stack's mapping ends: the whole in one read, else in halves
// from first_chunk down. Returns how many bytes it read.
static __always_inline u32 read_stack_prefix(u8 *copy, u64 sp, const u32 bytes, const u32 first_chunk) {
    if (bpf_probe_read_user(copy, bytes, (void *)sp) == 0) return bytes;
    u32 copied = 0;
#pragma unroll
    for (u32 chunk = first_chunk; chunk >= 512; chunk /= 2) {
        if (copied + chunk <= bytes && bpf_probe_read_user(copy + copied, chunk, (void *)(sp + copied)) == 0) copied += chunk;
    }
    return copied;
}

// The record of a stack deeper than the kernel walks: the header, the
// addresses and V8 frames, where to resume, and the rest of the stack (up to
// DEEP_COPY_BYTES), read straight into the ring buffer (the per-CPU state
// holds 32 KiB). A reservation's size is a constant: the smallest of 32, 64,
// 128 and 256 KiB that holds what is readable above sp.
#define DEEP_PREFIX_BYTES (SAMPLE_HEADER_BYTES + MAX_FRAMES * 8 + MAX_V8_FRAMES * sizeof(struct v8_frame))

// Returns 0 when the ring buffer has no room for it: the caller sends the
// ordinary copy instead.
static __always_inline int send_deep_copy_of(struct walk_scratch *scratch, u32 prefix, const u32 copy_bytes) {
    if (prefix > DEEP_PREFIX_BYTES) return 0;
    u8 *record = events.ringbuf_reserve(DEEP_PREFIX_BYTES + sizeof(struct stack_copy) + copy_bytes);
    if (!record) return 0;
    u64 sp = scratch->sp;
    u32 copied = read_stack_prefix(record + prefix + sizeof(struct stack_copy), sp, copy_bytes, copy_bytes / 2);
    struct stack_copy resume = {
        .pc = scratch->pc,
        .sp = sp,
        .fp = scratch->fp,
        .copy_length = copied,
        .flags = (copied < copy_bytes ? STACK_COPY_REACHED_END : 0) | (scratch->exact_pc ? STACK_COPY_EXACT_PC : 0),
    };
    if (bpf_probe_read_kernel(record, prefix, &scratch->event) != 0 ||
        bpf_probe_read_kernel(record + prefix, sizeof(resume), &resume) != 0) {
        events.ringbuf_discard(record, BPF_RB_NO_WAKEUP);
        return 1;
    }
    // Woken at once: records this big fill the ring between two polls.
    events.ringbuf_submit(record, BPF_RB_FORCE_WAKEUP);
    return 1;
}

static __always_inline u8 readable_at(u64 address) {
    u64 word;
    return bpf_probe_read_user(&word, sizeof(word), (void *)(address - sizeof(word))) == 0;
}

static __always_inline int send_deep_copy(struct walk_scratch *scratch, u32 depth, u32 v8_bytes) {
    u32 prefix = SAMPLE_HEADER_BYTES + depth * 8 + v8_bytes;
    u64 sp = scratch->sp;
    if (!readable_at(sp + DEEP_COPY_BYTES / 8)) return send_deep_copy_of(scratch, prefix, DEEP_COPY_BYTES / 8);
    if (!readable_at(sp + DEEP_COPY_BYTES / 4)) return send_deep_copy_of(scratch, prefix, DEEP_COPY_BYTES / 4);
    if (!readable_at(sp + DEEP_COPY_BYTES / 2)) return send_deep_copy_of(scratch, prefix, DEEP_COPY_BYTES / 2);
    return send_deep_copy_of(scratch, prefix, DEEP_COPY_BYTES);
}

// A deferred sample: the walked addresses, where to resume, and as much of
// the stack from the resume sp up as is readable, STACK_COPY_BYTES at most:
// the whole copy in one read, else the largest readable prefix in halves.
static __always_inline int copy_user_stack_now(const int walkers) {
    struct walk_scratch *scratch = scratch_of(walkers);
    if (!scratch) return 0;
    u32 depth = scratch->depth;
    if (depth > MAX_FRAMES) depth = MAX_FRAMES;
    scratch->event.frame_count = depth;
    u32 v8_bytes = place_v8_frames(scratch, depth);
    if (v8_bytes > MAX_V8_FRAMES * sizeof(struct v8_frame)) return 0;
    if (scratch->deep && send_deep_copy(scratch, depth, v8_bytes)) return 0;
    u8 *payload = (u8 *)scratch->event.addresses + depth * 8 + v8_bytes;
    struct stack_copy *resume = (struct stack_copy *)payload;
    u8 *copy = payload + sizeof(struct stack_copy);
    u64 sp = scratch->sp;
    u32 copied = read_stack_prefix(copy, sp, STACK_COPY_BYTES, 16384);
    if (copied == 0 && user_memory_gone(scratch)) {
        scratch->event.walk_end = WALK_THREAD_EXITING;
        submit_sample(scratch);
        return 0;
    }
    resume->pc = scratch->pc;
    resume->sp = sp;
    resume->fp = scratch->fp;
    resume->copy_length = copied;
    resume->flags = (copied < STACK_COPY_BYTES ? STACK_COPY_REACHED_END : 0) | (scratch->exact_pc ? STACK_COPY_EXACT_PC : 0);
    u32 size = SAMPLE_HEADER_BYTES + depth * 8 + v8_bytes + sizeof(struct stack_copy) + copied;
    if (size > sizeof(scratch->event)) return 0;
    if (events.ringbuf_output(&scratch->event, size, BPF_RB_NO_WAKEUP) != 0) count(COUNTER_RINGBUF_FULL);
    return 0;
}

int copy_user_stack(struct bpf_perf_event_data *ctx) {
    return copy_user_stack_now(WALKERS_PERF_EVENT);
}

// Send a sample whose walk ended, or copy the stack for a deferred one.
static __always_inline void end_walk(void *ctx, struct walk_scratch *scratch, const int walkers) {
    if (scratch->event.walk_end == WALK_DEFERRED) {
        tail_call_walker(ctx, walkers, COPIER_PROGRAM);
        // The copier is not installed: keep the frames walked.
        scratch->event.walk_end = WALK_NO_MAPPING;
    }
    submit_sample(scratch);
}

static __always_inline int walk_user_stack_from(void *ctx, const int walkers) {
    struct walk_scratch *scratch = scratch_of(walkers);
    if (!scratch) return 0;
    u32 tgid = scratch->space_tgid;
    for (int frame = 0; frame < FRAMES_PER_CALL; frame++) {
        if (walk_one_frame(scratch, tgid)) {
            end_walk(ctx, scratch, walkers);
            return 0;
        }
    }
    tail_call_walker(ctx, walkers, WALKER_PROGRAM);
    // Out of tail calls (or the array is empty): keep what we have.
    scratch->event.walk_end = WALK_TRUNCATED;
    submit_sample(scratch);
    return 0;
}

int walk_user_stack(struct bpf_perf_event_data *ctx) {
    return walk_user_stack_from(ctx, WALKERS_PERF_EVENT);
}

#ifdef WITH_OFF_CPU
int walk_user_stack_off_cpu(void *ctx) {
    return walk_user_stack_from(ctx, WALKERS_TRACEPOINT);
}

int copy_user_stack_off_cpu(void *ctx) {
    return copy_user_stack_now(WALKERS_TRACEPOINT);
}

int walk_user_stack_uprobe(struct pt_regs *ctx) {
    return walk_user_stack_from(ctx, WALKERS_UPROBE);
}

int copy_user_stack_uprobe(struct pt_regs *ctx) {
    return copy_user_stack_now(WALKERS_UPROBE);
}
#endif

static __always_inline void emit_process_event_flags(u32 type, u32 pid, u32 tid, u32 parent_pid, u64 address, u64 length,
                                                     u64 flags) {
    struct process_event *ev = events.ringbuf_reserve(sizeof(struct process_event));
    if (!ev) {
        count(COUNTER_EVENTS_LOST);
        return;
    }
    ev->event_type = type;
    ev->pid = pid;
    ev->tid = tid;
    ev->parent_pid = parent_pid;
    ev->time_ns = bpf_ktime_get_ns();
    ev->address = address;
    ev->length = length;
    bpf_get_current_comm(&ev->comm, sizeof(ev->comm));
    events.ringbuf_submit(ev, flags);
}

static __always_inline void emit_process_event_range(u32 type, u32 pid, u32 tid, u32 parent_pid, u64 address, u64 length) {
    // Woken at once: samples go up without a wakeup, and a record that is
    // not the oldest unread one would not wake the reader either.
    emit_process_event_flags(type, pid, tid, parent_pid, address, length, BPF_RB_FORCE_WAKEUP);
}

static __always_inline void emit_process_event(u32 type, u32 pid, u32 tid, u32 parent_pid) {
    emit_process_event_range(type, pid, tid, parent_pid, 0, 0);
}

// Begin the event of a sample or a wait of the current thread: its header,
// with no frames yet.
static __always_inline struct walk_scratch *begin_event(u64 pid_tgid, const int walkers) {
    struct walk_scratch *scratch = scratch_of(walkers);
    if (!scratch) return NULL;
    struct sample_event *ev = &scratch->event;
    ev->event_type = EVENT_SAMPLE;
    ev->pid = pid_tgid >> 32;
    ev->tid = (u32)pid_tgid;
    ev->cpu = bpf_get_smp_processor_id();
    ev->time_ns = bpf_ktime_get_ns();
    ev->frame_count = 0;
    ev->walk_end = WALK_TRUNCATED;
    ev->kernel_stack_id = -1;
    ev->off_cpu_ns = 0;
    ev->short_wait_ns = 0;
    ev->short_waits = 0;
    ev->off_cpu_flags = 0;
    ev->work = 0;
    ev->parent_work = 0;
    ev->runnable_ns = 0;
    scratch->leaf_bcp = 0;
    scratch->hotspot_gc_count = 0;
    bpf_get_current_comm(&ev->comm, sizeof(ev->comm));
    return scratch;
}

// The user registers the current thread entered the kernel with (saved at
// the top of its kernel stack), or 0s.
static __always_inline void saved_user_registers(u64 *pc, u64 *sp, u64 *fp) {
    struct task_struct *task = bpf_get_current_task_btf();
    struct pt_regs *user_regs = (struct pt_regs *)bpf_task_pt_regs(task);
    if (user_regs) {
        bpf_probe_read_kernel(pc, sizeof(*pc), &user_regs->ip);
        bpf_probe_read_kernel(sp, sizeof(*sp), &user_regs->sp);
        bpf_probe_read_kernel(fp, sizeof(*fp), &user_regs->bp);
    }
}

// Walk the user stack from (pc, sp, fp) into the begun event and send it.
static __always_inline void walk_and_send(void *ctx, struct walk_scratch *scratch, u32 tgid, u64 pc, u64 sp, u64 fp,
                                          const int walkers) {
    scratch->depth = 0;
    scratch->deep = 0;
    scratch->v8_count = 0;
    scratch->event.v8_frame_count = 0;
    struct v8_process *v8 = v8_processes.lookup(&tgid);
    if (v8) {
        scratch->v8 = *v8;
    } else {
        scratch->v8.builtins_end = 0;
    }
    struct hotspot_code *code = v8 && v8->kind == RUNTIME_HOTSPOT ? hotspot_code.lookup(&tgid) : NULL;
    scratch->by_frame_size = code != NULL;
    if (code) scratch->hotspot = *code;
    scratch->pc = pc;
    scratch->sp = sp;
    scratch->fp = fp;
    scratch->exact_pc = 1;
    scratch->space_tgid = address_space_of(tgid);
    if (scratch->space_tgid == 0) {
        // Nothing known of this process's code yet (just exec'd, or
        // attached): user space walks the whole stack later.
        defer_walk(scratch, 1);
        end_walk(ctx, scratch, walkers);
        return;
    }
    tail_call_walker(ctx, walkers, WALKER_PROGRAM);
    // The walker is not installed: report the leaf alone.
    scratch->event.addresses[0] = pc;
    scratch->depth = 1;
    submit_sample(scratch);
}

int on_cpu_sample(struct bpf_perf_event_data *ctx) {
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tgid = pid_tgid >> 32;
    int newly_seen = 0;
    if (!is_followed(tgid)) {
        u32 zero_index = 0;
        u32 *follow_all = settings.lookup(&zero_index);
        if (!follow_all || !*follow_all || tgid == 0 || ignored.lookup(&tgid)) return 0;
        newly_seen = 1;
    }
    count(COUNTER_SAMPLES);
    struct walk_scratch *scratch = begin_event(pid_tgid, WALKERS_PERF_EVENT);
    if (!scratch) return 0;
    struct sample_event *ev = &scratch->event;
#ifdef WITH_KERNEL_STACKS
    ev->kernel_stack_id = kernel_stacks.get_stackid(ctx, 0);
    if (ev->kernel_stack_id < 0 && ev->kernel_stack_id != -EFAULT) count(COUNTER_KSTACK_FAILED);
#endif

    u64 pc = 0, sp = 0, fp = 0;
    ev->user_mode = (ctx->regs.cs & 3) == 3;
    if (ev->user_mode) {
        pc = ctx->regs.ip;
        sp = ctx->regs.sp;
        fp = ctx->regs.bp;
        scratch->leaf_bcp = ctx->regs.r13;
    } else {
        // In the kernel on behalf of the task.
        saved_user_registers(&pc, &sp, &fp);
    }
    if (pc == 0) {
        // Not followed: a kernel thread (with --all), which has no user stack.
        scratch->v8_count = 0;
        ev->v8_frame_count = 0;
        scratch->depth = 0;
        ev->walk_end = newly_seen ? WALK_COMPLETE : WALK_NO_USER_REGS;
        submit_sample(scratch);
        return 0;
    }
    if (newly_seen) {
        // Followed from now on; user space reads its maps on the event, and
        // this sample (like any before its maps are read) carries its stack.
        u32 no_execs = 0;
        if (followed.insert(&tgid, &no_execs) == 0)
            emit_process_event(EVENT_DISCOVERED, tgid, (u32)pid_tgid, 0);
        else if (!followed.lookup(&tgid))
            return 0; // the table is full
    }
#ifdef WITH_OFF_CPU
    ev->work = work_running(ev->tid);
    // The time it was runnable, preempted, since: charged to where it runs now.
    u32 tid = ev->tid;
    struct off_cpu_thread *thread = off_cpu_threads.lookup(&tid);
    if (thread && thread->runnable_ns != 0) {
        ev->runnable_ns = thread->runnable_ns;
        thread->runnable_ns = 0;
    }
#endif
    walk_and_send(ctx, scratch, tgid, pc, sp, fp, WALKERS_PERF_EVENT);
    return 0;
}

#ifdef WITH_OFF_CPU
// --off-cpu. A followed thread that leaves the CPU to wait (not preempted
// while runnable) is timed from the scheduler's switch: the time it left, and
// when it next comes on, how long it was off. Its stack cannot be read then
// (the switch runs as the thread coming off); it is walked when the thread,
// running again, goes back to user space with the user stack of its wait,
// and only if the wait was long enough to be recorded one by one. That is
// rseq_update, which every thread with rseq registered passes on its way
// back after a switch (not at every system call), or, for threads without
// rseq, sys_exit, which user space attaches only when told such a thread
// waits: it runs at every system call's return on the machine. Kernel work
// per switch: a lookup for each side, an update only for a thread's first
// wait.

// Raw tracepoints, without the perf buffer a tracepoint's record is copied
// into first. sched_switch(preempt, prev, next, prev_state) runs as prev.
RAW_TRACEPOINT_PROBE(sched_switch) {
    u64 now = 0; // read only for followed threads: most switches are others'
    int preempt = (int)(ctx->args[0] & 1);
    long prev_state = (long)(u32)ctx->args[3];
    u32 next = task_field(ctx->args[2], TASK_PID_OFFSET);
    u64 reporting = 0;
    if (next != 0) {
        struct off_cpu_thread *coming = off_cpu_threads.lookup(&next);
        if (coming && coming->left_ns != 0) {
            now = bpf_ktime_get_ns();
            if (coming->runnable)
                coming->runnable_ns += now - coming->left_ns;
            else
                coming->waited_ns += now - coming->left_ns;
            coming->left_ns = 0;
        }
        if (coming && coming->waited_ns != 0) reporting = ctx->args[2];
    }
    u32 zero = 0;
    u64 *report = wait_to_report.lookup(&zero);
    if (report) *report = reporting;
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tid = (u32)pid_tgid;
    if (tid == 0 || !is_followed(pid_tgid >> 32)) return 0;
    // A thread on its way out (past sched_process_exit, its entry gone) waits no more.
    if (task_field(bpf_get_current_task(), TASK_FLAGS_OFFSET) & PF_EXITING) return 0;
    struct off_cpu_thread *leaving = off_cpu_threads.lookup(&tid);
    if (!leaving) {
        struct off_cpu_thread fresh = {};
        fresh.tgid = pid_tgid >> 32;
        off_cpu_threads.insert(&tid, &fresh);
        leaving = off_cpu_threads.lookup(&tid);
        if (!leaving) {
            count(COUNTER_OFF_CPU_UNTRACKED);
            return 0;
        }
    }
    leaving->left_ns = now != 0 ? now : bpf_ktime_get_ns();
    // Preempted (or yielding: TASK_RUNNING), it is runnable still: no wait, but its time
    // waiting for a CPU is summed, so its CPU and off-CPU time add up to its life.
    leaving->runnable = preempt || prev_state == 0;
    if (leaving->runnable) return 0;
#ifdef TASK_RSEQ_OFFSET
    // A thread just exec'd waits before its C library registers rseq (the
    // loader reading its files): only a thread still without it a while
    // after its first such wait is one that never registers.
    if (has_rseq()) {
        leaving->without_rseq_since = 0;
    } else if (leaving->without_rseq_since == 0) {
        leaving->without_rseq_since = leaving->left_ns;
    } else if (leaving->left_ns - leaving->without_rseq_since >= WITHOUT_RSEQ_NS) {
        u32 *told = waits_without_rseq.lookup(&zero);
        if (told && *told == 0) {
            *told = 1;
            emit_process_event(EVENT_WAITS_WITHOUT_RSEQ, pid_tgid >> 32, tid, 0);
        }
    }
#endif
    if (leaving->waited_ns != 0) return 0;
    // A wait begins (not the next part of one): where, to check it is the stack walked at its end.
    u64 pc = 0, fp = 0;
    saved_user_registers(&pc, &leaving->wait_sp, &fp);
    leaving->wait_pc = pc;
#ifdef WITH_KERNEL_STACKS
    leaving->kernel_stack_id = kernel_stacks.get_stackid(ctx, 0);
#else
    leaving->kernel_stack_id = -1;
#endif
    return 0;
}

// sched_waking(p): a followed thread that waits is woken. From now on it
// waits for a CPU, not for what it waited on: its time in the run queue is
// counted runnable (a woken event loop on a busy machine is not idle).
// Before p is queued, so it cannot be switched in while this runs.
RAW_TRACEPOINT_PROBE(sched_waking) {
    u32 tid = task_field(ctx->args[0], TASK_PID_OFFSET);
    if (tid == 0) return 0;
    struct off_cpu_thread *woken = off_cpu_threads.lookup(&tid);
    if (!woken || woken->left_ns == 0 || woken->runnable) return 0;
    u64 now = bpf_ktime_get_ns();
    woken->waited_ns += now - woken->left_ns;
    woken->left_ns = now;
    woken->runnable = 1;
    return 0;
}

// A wait sent with its time alone: the thread's user stack is no longer the wait's.
static __always_inline void submit_without_stack(struct walk_scratch *scratch) {
    scratch->event.off_cpu_flags = OFF_CPU_STACK_MOVED;
    scratch->event.kernel_stack_id = -1;
    scratch->event.v8_frame_count = 0;
    scratch->event.walk_end = WALK_COMPLETE;
    scratch->v8_count = 0;
    scratch->depth = 0;
    submit_sample(scratch);
}

// Shorter than --off-cpu-min: counted, not recorded one by one.
static __always_inline int wait_is_short(u64 waited) {
    u32 shortest_index = OFF_CPU_SETTING_SHORTEST_WAIT;
    u64 *shortest = off_cpu_settings.lookup(&shortest_index);
    return shortest && waited < *shortest;
}

// A thread on its way back to user space: report the time it waited.
static __always_inline int report_wait(void *ctx, u64 task) {
    u32 zero = 0;
    u64 *report = wait_to_report.lookup(&zero);
    if (!report || *report != task || task == 0) return 0;
    *report = 0;
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tid = (u32)pid_tgid;
    struct off_cpu_thread *thread = off_cpu_threads.lookup(&tid);
    if (!thread || thread->waited_ns == 0) return 0;
    u64 waited = thread->waited_ns;
    thread->waited_ns = 0;
    if (wait_is_short(waited)) {
        thread->short_wait_ns += waited;
        thread->short_waits += 1;
        return 0;
    }
    u64 pc = 0, sp = 0, fp = 0;
    saved_user_registers(&pc, &sp, &fp);
    struct walk_scratch *scratch = begin_event(pid_tgid, WALKERS_TRACEPOINT);
    if (!scratch) return 0;
    struct sample_event *ev = &scratch->event;
    ev->off_cpu_ns = waited;
    ev->short_wait_ns = thread->short_wait_ns;
    ev->short_waits = thread->short_waits;
    ev->runnable_ns = thread->runnable_ns;
    thread->short_wait_ns = 0;
    thread->short_waits = 0;
    thread->runnable_ns = 0;
    ev->kernel_stack_id = thread->kernel_stack_id;
    ev->user_mode = 0;
    if (pc != thread->wait_pc || sp != thread->wait_sp) {
        // It waited outside a system call (a page fault's read) and ran on: the stack is another's.
        submit_without_stack(scratch);
        return 0;
    }
    if (pc == 0) return 0;
    ev->work = work_running(tid);
    walk_and_send(ctx, scratch, pid_tgid >> 32, pc, sp, fp, WALKERS_TRACEPOINT);
    return 0;
}

// rseq_update(t): the current thread t, registered with rseq, goes back to
// user space after a switch. (t is the argument: no helper call for the
// threads with nothing to report.)
RAW_TRACEPOINT_PROBE(rseq_update) {
    return report_wait(ctx, ctx->args[0]);
}

// A thread back from a system call (attached by user space only when needed).
RAW_TRACEPOINT_PROBE(sys_exit) {
    return report_wait(ctx, bpf_get_current_task());
}

// Node's threadpool (libuv's src/threadpool.c), through uprobes user space
// attaches to a followed node's libuv: uv__work_submit(loop, w, kind, work,
// done) queues work item w; a pool thread runs work(w) (uv__fs_work,
// uv__queue_work, ...); the loop thread then runs done(w, status)
// (uv__fs_done, ...), whose callbacks often submit the next item. The
// submitter's stack is sent with the item's key; the work's samples and
// waits carry the key, so user space charges them to that JavaScript.
// uv_queue_work(loop, req, work_cb, after_work_cb) submits &req->work_req:
// libuv's uv_work_t (data, type, reserved[6], loop, work_cb, after_work_cb,
// then work_req) on 64-bit, ABI-stable through libuv 1.x. Probed too because
// it may have uv__work_submit inlined (node's build does).
#define UV_WORK_REQ_OFFSET 88
#define SUBMIT_FROM_QUEUE_WORK 1
#define SAME_SUBMIT_NS 1000000ULL

static __always_inline int submit_work(struct pt_regs *ctx, u64 work_address, u64 from) {
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tgid = pid_tgid >> 32;
    u32 tid = (u32)pid_tgid;
    if (!is_followed(tgid)) return 0;
    u64 now = bpf_ktime_get_ns();
    struct work_address address = {.tgid = tgid, .address = work_address};
    struct work_item *known = threadpool_works.lookup(&address);
    // uv_queue_work's own call of uv__work_submit (where it is not inlined): sent already.
    if (known && known->from == SUBMIT_FROM_QUEUE_WORK && from != SUBMIT_FROM_QUEUE_WORK && now - known->key < SAME_SUBMIT_NS)
        return 0;
    struct work_item item = {.key = now, .from = from};
    threadpool_works.update(&address, &item);
    struct walk_scratch *scratch = begin_event(pid_tgid, WALKERS_UPROBE);
    if (!scratch) return 0;
    struct sample_event *ev = &scratch->event;
    ev->time_ns = now;
    ev->off_cpu_flags = SAMPLE_SUBMITS_WORK;
    ev->work = now;
    struct work_completion *completing = threadpool_completing.lookup(&tid);
    if (completing && completing->address.tgid == tgid) ev->parent_work = completing->key;
    ev->user_mode = 1;
    walk_and_send(ctx, scratch, tgid, PT_REGS_IP(ctx), PT_REGS_SP(ctx), ctx->bp, WALKERS_UPROBE);
    return 0;
}

int threadpool_submit(struct pt_regs *ctx) {
    return submit_work(ctx, PT_REGS_PARM2(ctx), 0);
}

int threadpool_queue_work(struct pt_regs *ctx) {
    return submit_work(ctx, PT_REGS_PARM2(ctx) + UV_WORK_REQ_OFFSET, SUBMIT_FROM_QUEUE_WORK);
}

// work(w) begins on a pool thread: what it does until its next item is w's.
int threadpool_work_begins(struct pt_regs *ctx) {
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tgid = pid_tgid >> 32;
    u32 tid = (u32)pid_tgid;
    struct work_address address = {.tgid = tgid, .address = PT_REGS_PARM1(ctx)};
    struct work_item *item = threadpool_works.lookup(&address);
    if (!item) {
        threadpool_running.delete(&tid);
        return 0;
    }
    u64 key = item->key;
    threadpool_running.update(&tid, &key);
    emit_process_event_flags(EVENT_WORK_STARTED, tgid, tid, 0, key, 0, BPF_RB_NO_WAKEUP);
    return 0;
}

// The loop thread is done with the item whose completion it ran (if any).
static __always_inline void completion_over(u32 tid) {
    struct work_completion *completing = threadpool_completing.lookup(&tid);
    if (!completing) return;
    struct work_address address = completing->address;
    struct work_item *item = threadpool_works.lookup(&address);
    // Not an item submitted since at the same address (and not yet run).
    if (item && item->key == completing->key) threadpool_works.delete(&address);
    threadpool_completing.delete(&tid);
}

// done(w, status) begins on the loop thread: what it submits continues w's
// work. No uretprobe marks its end (one would replace the return address on
// the stack, and every stack walked inside it would end there): the next
// completion on the thread ends it, and user space takes a submit's parent
// only when libuv's uv__work_done is in the submitting stack.
int threadpool_done_begins(struct pt_regs *ctx) {
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tid = (u32)pid_tgid;
    completion_over(tid);
    struct work_completion completing = {.address = {.tgid = pid_tgid >> 32, .address = PT_REGS_PARM1(ctx)}};
    struct work_item *item = threadpool_works.lookup(&completing.address);
    if (!item) return 0; // submitted before the run, or its submit was not seen
    completing.key = item->key;
    threadpool_completing.update(&tid, &completing);
    return 0;
}

#endif

TRACEPOINT_PROBE(sched, sched_process_fork) {
    u32 parent_tgid = bpf_get_current_pid_tgid() >> 32;
    if (!is_followed(parent_tgid)) return 0;
    // Follow at once, so the child's first samples are not missed. Threads
    // come through here too; user space drops entries that are not tgids.
    u32 child = args->child_pid;
    u32 no_execs = 0;
    followed.update(&child, &no_execs);
    u32 space = address_space_of(parent_tgid);
    if (space != 0) fork_parents.update(&child, &space);
    exiting_threads.delete(&child); // a reused thread id
    emit_process_event(EVENT_FORK, child, child, parent_tgid);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exec) {
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u32 *execs = tgid != 0 ? followed.lookup(&tgid) : NULL;
    if (!execs) {
        // --all: a new program is followed as it starts, so its maps are
        // read while it runs, however short its life.
        u32 zero_index = 0;
        u32 *follow_all = settings.lookup(&zero_index);
        u32 no_execs = 0;
        if (tgid != 0 && follow_all && *follow_all && !ignored.lookup(&tgid) && followed.insert(&tgid, &no_execs) == 0)
            emit_process_event(EVENT_DISCOVERED, tgid, (u32)bpf_get_current_pid_tgid(), 0);
        return 0;
    }
    // Every trie entry of the process (and its parent's) is another
    // image's now: its samples are deferred until user space reads its maps.
    __sync_fetch_and_add(execs, 1);
    u32 exec_count = *execs; // (a process's execs do not race one another)
    fork_parents.delete(&tgid);
    // The count tells user space which exec the maps it reads belong to.
    emit_process_event_range(EVENT_EXEC, tgid, (u32)bpf_get_current_pid_tgid(), 0, 0, exec_count);
    return 0;
}

#ifdef WITH_OFF_CPU
// --off-cpu: a timed thread exits, with what it has not reported. (Before
// the followed check: a process's last threads exit after user space has
// let it go.) A thread woken from its wait by its process's exit goes
// straight to exit, past rseq_update: its wait is walked here, its user
// memory still there (the tracepoint comes before the thread lets go of
// it; on a kernel where it does not, the walk ends at its first read).
// Attached before sched_process_exit's other program (raw tracepoints
// first), so the wait comes before the exit.
RAW_TRACEPOINT_PROBE(sched_process_exit) {
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tgid = pid_tgid >> 32;
    u32 tid = (u32)pid_tgid;
    struct off_cpu_thread *thread = off_cpu_threads.lookup(&tid);
    if (!thread) return 0;
    struct off_cpu_thread last = *thread;
    off_cpu_threads.delete(&tid);
    int walk_wait = last.waited_ns != 0 && !wait_is_short(last.waited_ns) && last.wait_pc != 0;
    if (last.waited_ns != 0 && !walk_wait) {
        last.short_wait_ns += last.waited_ns;
        last.short_waits += 1;
    }
    if (last.short_wait_ns != 0)
        emit_process_event_flags(EVENT_THREAD_WAITS, tgid, tid, 0, last.short_wait_ns, last.short_waits, BPF_RB_NO_WAKEUP);
    if (last.runnable_ns != 0)
        emit_process_event_flags(EVENT_THREAD_RUNNABLE, tgid, tid, 0, last.runnable_ns, 0, BPF_RB_NO_WAKEUP);
    if (!walk_wait) return 0;
    u64 pc = 0, sp = 0, fp = 0;
    saved_user_registers(&pc, &sp, &fp);
    struct walk_scratch *scratch = begin_event(pid_tgid, WALKERS_TRACEPOINT);
    if (!scratch) return 0;
    struct sample_event *ev = &scratch->event;
    ev->off_cpu_ns = last.waited_ns;
    ev->kernel_stack_id = last.kernel_stack_id;
    ev->user_mode = 0;
    if (pc != last.wait_pc || sp != last.wait_sp) {
        submit_without_stack(scratch);
        return 0;
    }
    ev->work = work_running(tid);
    walk_and_send(ctx, scratch, tgid, pc, sp, fp, WALKERS_TRACEPOINT);
    return 0;
}
#endif

TRACEPOINT_PROBE(sched, sched_process_exit) {
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tgid = pid_tgid >> 32;
    u32 tid = (u32)pid_tgid;
    if (!is_followed(tgid)) return 0;
    fork_parents.delete(&tid); // threads are given an entry at creation too
    u8 one = 1;
    exiting_threads.update(&tid, &one);
    emit_process_event(EVENT_EXIT, tgid, (u32)pid_tgid, 0);
    return 0;
}

static __always_inline void note_exec_mapping_call(unsigned long prot, u64 address, u64 length, u8 is_mprotect) {
    if (!(prot & PROT_EXEC_FLAG)) return;
    u64 pid_tgid = bpf_get_current_pid_tgid();
    if (!is_followed(pid_tgid >> 32)) return;
    u32 tid = (u32)pid_tgid;
    struct exec_mapping_call call = {.address = address, .length = length, .is_mprotect = is_mprotect};
    exec_mapping_calls.update(&tid, &call);
}

// Number of significant bits of a value (0 for 0), without a clz instruction.
static __always_inline int significant_bits(u64 value) {
    int bits = 0;
    if (value >> 32) {
        bits += 32;
        value >>= 32;
    }
    if (value >> 16) {
        bits += 16;
        value >>= 16;
    }
    if (value >> 8) {
        bits += 8;
        value >>= 8;
    }
    if (value >> 4) {
        bits += 4;
        value >>= 4;
    }
    if (value >> 2) {
        bits += 2;
        value >>= 2;
    }
    if (value >> 1) {
        bits += 1;
        value >>= 1;
    }
    return bits + (int)value;
}

// New executable memory is known at once: until user space has read
// /proc/PID/maps (milliseconds later), one provisional prefix covering the
// range (profiler/kernel/trie.py: covering_prefix) defers walks that reach it.
static __always_inline void cover_new_exec_range(u32 tgid, u64 address, u64 length) {
    if (length == 0 || length > MAX_PROVISIONAL_LENGTH) return;
    if (find_mapping(tgid, address)) return;
    int bits = significant_bits(address ^ (address + length - 1));
    if (bits >= 64) return;
    struct trie_key key = {};
    key.prefixlen = 96 - bits;
    key.pid_be = __builtin_bswap32(tgid);
    key.address_be = __builtin_bswap64(address & ~((1ULL << bits) - 1));
    struct mapping_info info = {.kind = MAPPING_PROVISIONAL, .table_id = 0, .load_bias = 0};
    mappings.update(&key, &info);
}

static __always_inline void finish_exec_mapping_call(long result) {
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tid = (u32)pid_tgid;
    struct exec_mapping_call *call = exec_mapping_calls.lookup(&tid);
    if (!call) return;
    u64 address = call->is_mprotect ? call->address : (u64)result;
    u64 length = call->length;
    exec_mapping_calls.delete(&tid);
    if (result < 0 && result > -4096) return; // the call failed: nothing changed
    u32 tgid = pid_tgid >> 32;
    u64 now = bpf_ktime_get_ns();
    u64 *last_event = maps_stale.lookup(&tgid);
    if (last_event) {
        // User space has an event for this process it has not acted on yet:
        // the maps it reads then show this change too. Meanwhile the range is
        // still told, at most every STALE_EVENT_GAP_NS and without a wakeup,
        // so the code of a process that exits before that read stays known.
        // A process mapping in a loop sends a bounded trickle, not a flood
        // that crowds samples out of the ring buffer.
        if (now - *last_event < STALE_EVENT_GAP_NS) return;
        *last_event = now;
        cover_new_exec_range(tgid, address, length);
        emit_process_event_flags(EVENT_MAPS_CHANGED, tgid, tid, 0, address, length, BPF_RB_NO_WAKEUP);
        return;
    }
    cover_new_exec_range(tgid, address, length);
    emit_process_event_range(EVENT_MAPS_CHANGED, tgid, tid, 0, address, length);
    maps_stale.update(&tgid, &now);
}

TRACEPOINT_PROBE(syscalls, sys_enter_mmap) {
    note_exec_mapping_call(args->prot, 0, args->len, 0);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_mmap) {
    finish_exec_mapping_call(args->ret);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_mprotect) {
    note_exec_mapping_call(args->prot, args->start, args->len, 1);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_mprotect) {
    finish_exec_mapping_call(args->ret);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_pkey_mprotect) {
    note_exec_mapping_call(args->prot, args->start, args->len, 1);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_pkey_mprotect) {
    finish_exec_mapping_call(args->ret);
    return 0;
}
