// The walk of a user stack: frame pointers through JIT code, DWARF rows
// through native code (chosen per address by the trie), V8's and HotSpot's
// frames noted on the way; past MAX_FRAMES, or where nothing is known, the
// stack is copied for user space to walk. The walker programs of each kind
// (perf event, tracepoint, uprobe) and the event a walk begins and sends.
#pragma once

// Hand the rest of the walk to user space, from the frame at scratch->depth
// (pc not recorded yet): the copier program sends the stack from sp up.
static __always_inline int defer_walk(struct walk_scratch *scratch, u8 exact_pc) {
    scratch->exact_pc = exact_pc;
    scratch->event.walk_end = WALK_DEFERRED;
    return 1;
}

// A leaf caught in JIT code before its frame is built or after it is taken
// down: at `push rbp` or a `ret` (the return address on top, rbp still the
// caller's) or at `mov rbp, rsp` (the caller's rbp above the return
// address). A frame-pointer step there would take the caller's frame for
// this one's and skip the caller, or end the walk where the caller keeps no
// frame pointer (MoarVM's interpreter calls its JIT code so). Decoded
// forward from pc, an instruction's start, where these bytes mean nothing
// else. Returns the words above the return address, or -1: the frame is whole.
static __always_inline int jit_leaf_words_pushed(u64 pc) {
    u32 code = 0;
    if (bpf_probe_read_user(&code, sizeof(code), (void *)pc) != 0) return -1;
    u8 first = code & 0xff;
    if (first == 0x55 || first == 0xc3 || first == 0xc2) return 0; // push rbp, ret, ret imm16
    if ((code & 0xffffff) == 0xe58948) return 1;                   // mov rbp, rsp
    return -1;
}

// Past the frames the kernel walks: user space walks the rest from a copy.
// It walks by frame pointers and rows only: a JVM stepped by frame sizes is
// cut here rather than walked wrong. Returns 1 (the walk here ended).
static __always_inline int walk_rest_in_user_space(struct walk_scratch *scratch) {
    if (scratch->by_frame_size) return 1;
    scratch->deep = 1;
    return defer_walk(scratch, scratch->exact_pc);
}

// One frame: record pc, then step to the caller. Returns 1 when the walk
// ended (or is deferred). jvm: the JVM's walker, which steps as HotSpot says
// (a constant: the other walker is verified without those steps).
static __always_inline int walk_one_frame(struct walk_scratch *scratch, struct frame_found *found, u32 tgid, const int walkers,
                                          const int jvm) {
    u32 depth = scratch->depth;
    if (depth >= MAX_FRAMES) return walk_rest_in_user_space(scratch);
    u64 pc = scratch->pc, sp = scratch->sp, fp = scratch->fp, rbx = scratch->rbx, rbx_slot = scratch->rbx_slot;
    u8 exact_pc = scratch->exact_pc;
    // Caller frames hold return addresses: look up pc - 1, inside the call.
    u64 lookup_pc = exact_pc ? pc : pc - 1;
    // V8's builtins (the interpreter among them) have no unwind rows: every
    // address of theirs falls in a gap of node's table, which sends it to the
    // frame-pointer step. They take that step at once, without the search
    // through the table, and while the table is not attached yet (a cold
    // start), so that their JS frames are noted now, while their objects
    // are where the slots say.
    u8 builtins = in_v8_builtins(scratch, lookup_pc);
    struct mapping_info mapping = {};
    struct unwind_row row = {};
    u8 row_state = ROW_NOT_SOUGHT;
    u64 generation = trie_generation_now();
    struct frame_known *known = known_frame_slot(walkers, tgid, lookup_pc);
    if (known && known->pc == lookup_pc && known->tgid == tgid && known->generation == generation) {
        mapping = known->mapping;
        row_state = known->row_state;
        row = known->row;
        found->known = 1;
    } else {
        // No entry yet (code mapped since the maps were read), a file whose
        // table is not attached, memory just made executable: user space
        // knows more later, and says "no mapping" if it still does not know
        // the address.
        struct mapping_info *in_trie = find_mapping(tgid, lookup_pc);
        if (!in_trie || in_trie->kind == MAPPING_PROVISIONAL || (in_trie->kind == MAPPING_ELF_PENDING && !builtins))
            return defer_walk(scratch, exact_pc);
        mapping = *in_trie;
        found->known = 0;
    }
    found->generation = generation;
    found->row_state = row_state;
#ifdef WITH_DWARF
    if (mapping.kind == MAPPING_ELF && !builtins && row_state == ROW_NOT_SOUGHT) {
        u8 lasting = 0;
        int searched = dwarf_find_row(&mapping, lookup_pc, &row, &lasting);
        if (searched == STEP_PENDING) return defer_walk(scratch, exact_pc);
        // Not lasting (a table not live yet): a frame-pointer step now, and sought again next time.
        if (searched == STEP_DONE)
            row_state = ROW_FOUND;
        else if (lasting)
            row_state = ROW_NONE;
    }
#endif
    remember_frame(walkers, tgid, lookup_pc, found, &mapping, &row, row_state);
    scratch->event.addresses[depth] = pc;
    scratch->depth = depth + 1;
    scratch->exact_pc = 0;
    struct walk_reader reader = {};
    note_v8_frame(scratch, &mapping, builtins, pc, fp, depth, &reader, jvm);
#ifdef WITH_DWARF
    if (row_state == ROW_FOUND && mapping.kind == MAPPING_ELF && !builtins) {
        struct walk_reader row_reader = {};
        int step = walk_apply_row(&row, &pc, &sp, &fp, &rbx, &rbx_slot, &row_reader);
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
            scratch->rbx = rbx;
            scratch->rbx_slot = rbx_slot;
            return 0;
        }
    }
#endif
    if (jvm && (scratch->by_frame_size || (scratch->hotspot_leaf && exact_pc)) && mapping.kind == MAPPING_JIT && !builtins) {
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
            scratch->rbx = 0; // stepped by its size: the frame's saved registers are not known
            scratch->rbx_slot = 0;
            return 0;
        }
    }
    // V8's and HotSpot's leaves are told apart by their own frames' slots.
    if (exact_pc && mapping.kind == MAPPING_JIT && scratch->v8.builtins_end == 0) {
        int words = jit_leaf_words_pushed(pc);
        if (words >= 0) {
            u64 return_address = 0;
            if (bpf_probe_read_user(&return_address, sizeof(return_address), (void *)(sp + (u64)words * 8)) != 0) {
                scratch->event.walk_end = WALK_READ_FAULT;
                return 1;
            }
            if (return_address == 0) {
                scratch->event.walk_end = WALK_COMPLETE;
                return 1;
            }
            scratch->pc = return_address;
            scratch->sp = sp + (u64)(words + 1) * 8;
            scratch->fp = fp; // the caller's still: rbp, rbx untouched by a prologue, restored before a ret
            scratch->rbx = rbx;
            scratch->rbx_slot = rbx_slot;
            return 0;
        }
    }
    // Frame-pointer step: JIT code, files without a table, gaps.
    u64 frame_fp = fp;
    int end = walk_frame_pointer_step(&pc, &sp, &fp, &rbx, &rbx_slot, &reader);
    if (end >= 0) {
        scratch->event.walk_end = end;
        return 1;
    }
    // A HotSpot interpreted frame's caller may be compiled code, stepped by
    // its size from its own sp: the one the interpreter saved (a c2i adapter
    // moves it from fp + 16).
    if (jvm && scratch->by_frame_size && builtins && reader.frame_fp == frame_fp && reader.sender_sp >= sp &&
        reader.sender_sp < sp + 65536)
        sp = reader.sender_sp;
    scratch->pc = pc;
    scratch->sp = sp;
    scratch->fp = fp;
    scratch->rbx = rbx;
    scratch->rbx_slot = rbx_slot;
    return 0;
}

// The rbx a deferred walk resumes with: user space walks its copy with values.
static __always_inline u64 resolved_rbx(struct walk_scratch *scratch) {
    u64 rbx = scratch->rbx;
    if (scratch->rbx_slot != 0 && bpf_probe_read_user(&rbx, sizeof(rbx), (void *)scratch->rbx_slot) != 0) rbx = 0;
    return rbx;
}

static __always_inline u8 readable_at(u64 address) {
    u64 word;
    return bpf_probe_read_user(&word, sizeof(word), (void *)(address - sizeof(word))) == 0;
}

// The stack from sp's page up, where one read from sp could not take it
// whole. Page by page first: a page never touched (the bottom of a large
// local buffer or an alloca, at the leaf or between a callee's frames and
// its caller's) is not in memory while the pages above it are, and a copy
// that stopped there lost every frame above it. Such a page is sent as
// zeros (a failed read leaves them), its bit set in scratch->copy_holes, and
// the copy goes on above it. Past the pages tracked (a deep stack's copy),
// the rest in halves from first_chunk down, to within 512 bytes of memory
// that cannot be read. The lengths are kept in the scratch map, not in
// registers: the verifier does not track them, so the paths merge (tracked,
// each path a length of its own, the halves cost 0.16 s of verifying at
// every start). Returns the bytes read from sp's page: the copy ends with
// the last part read (pages past it are the stack's end, not holes).
static __always_inline u32 read_stack_pages(struct walk_scratch *scratch, u8 *copy, u64 sp, const u32 bytes,
                                            const u32 first_chunk) {
    const u32 pages =
        bytes / STACK_COPY_PAGE_BYTES < STACK_COPY_PAGES_TRACKED ? bytes / STACK_COPY_PAGE_BYTES : STACK_COPY_PAGES_TRACKED;
    u64 page_start = sp & ~(u64)(STACK_COPY_PAGE_BYTES - 1);
    volatile u32 *copied_so_far = &scratch->readable;
    volatile u16 *holes = &scratch->copy_holes;
    *copied_so_far = 0;
    *holes = 0;
#pragma unroll
    for (u32 page = 0; page < pages; page++) {
        if (bpf_probe_read_user(copy + page * STACK_COPY_PAGE_BYTES, STACK_COPY_PAGE_BYTES,
                                (void *)(page_start + page * STACK_COPY_PAGE_BYTES)) == 0)
            *copied_so_far = (page + 1) * STACK_COPY_PAGE_BYTES;
        else
            *holes |= 1 << page;
    }
    *holes &= (1U << (*copied_so_far / STACK_COPY_PAGE_BYTES)) - 1;
    if (*copied_so_far == pages * STACK_COPY_PAGE_BYTES) {
#pragma unroll
        for (u32 chunk = first_chunk; chunk >= 512; chunk /= 2) {
            u32 copied = *copied_so_far;
            if (chunk > bytes || copied > bytes - chunk) continue;
            asm volatile("" : "+r"(copied)); // the bound checked on the register the read uses, not a copy
            if (bpf_probe_read_user(copy + copied, chunk, (void *)(page_start + copied)) == 0) *copied_so_far = copied + chunk;
        }
    }
    u32 copied = *copied_so_far;
    if (copied > bytes) return 0;
    asm volatile("" : "+r"(copied));
    return copied;
}

// A deferred walk's stack into copy (bytes at most), and its resume record:
// the whole from sp in one read, else from sp's page, page by page.
static __always_inline void copy_stack_for(struct walk_scratch *scratch, struct stack_copy *resume, u8 *copy, const u32 bytes,
                                           const u32 first_chunk) {
    u64 sp = scratch->sp;
    u32 copied = bytes;
    u16 flags = 0, holes = 0;
    if (bpf_probe_read_user(copy, bytes, (void *)sp) != 0) {
        copied = read_stack_pages(scratch, copy, sp, bytes, first_chunk);
        holes = scratch->copy_holes;
        flags = STACK_COPY_PAGED | (copied < bytes ? STACK_COPY_REACHED_END : 0);
    }
    resume->pc = scratch->pc;
    resume->sp = sp;
    resume->fp = scratch->fp;
    resume->rbx = resolved_rbx(scratch);
    resume->copy_length = copied;
    resume->flags = flags | (scratch->exact_pc ? STACK_COPY_EXACT_PC : 0);
    resume->holes = holes;
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
    struct stack_copy resume = {};
    copy_stack_for(scratch, &resume, record + prefix + sizeof(struct stack_copy), copy_bytes, copy_bytes / 2);
    if (bpf_probe_read_kernel(record, prefix, &scratch->event) != 0 ||
        bpf_probe_read_kernel(record + prefix, sizeof(resume), &resume) != 0) {
        events.ringbuf_discard(record, BPF_RB_NO_WAKEUP);
        return 1;
    }
    // Woken at once: records this big fill the ring between two polls.
    events.ringbuf_submit(record, BPF_RB_FORCE_WAKEUP);
    return 1;
}

// Whether a copy of bytes from sp up holds all of the stack there is: it
// reaches the stack's end, or memory that cannot be read.
static __always_inline u8 holds_the_rest(u64 sp, u32 bytes, u64 stack_end) {
    return sp + bytes >= stack_end || !readable_at(sp + bytes);
}

static __always_inline int send_deep_copy(struct walk_scratch *scratch, u32 depth, u32 v8_bytes, u64 stack_end) {
    u32 prefix = SAMPLE_HEADER_BYTES + depth * 8 + v8_bytes;
    u64 sp = scratch->sp;
    if (holds_the_rest(sp, DEEP_COPY_BYTES / 8, stack_end)) return send_deep_copy_of(scratch, prefix, DEEP_COPY_BYTES / 8);
    if (holds_the_rest(sp, DEEP_COPY_BYTES / 4, stack_end)) return send_deep_copy_of(scratch, prefix, DEEP_COPY_BYTES / 4);
    if (holds_the_rest(sp, DEEP_COPY_BYTES / 2, stack_end)) return send_deep_copy_of(scratch, prefix, DEEP_COPY_BYTES / 2);
    return send_deep_copy_of(scratch, prefix, DEEP_COPY_BYTES);
}

// Where the current thread's stack ends at the latest, seen from sp: a
// thread glibc or musl made keeps its descriptor (fs's base) just above its
// stack, and past that lies other memory, as often readable (another
// thread's stack, a library): a copy sized by what it could read took it
// in, 128-256 KiB a sample where a thread spun in code without frame
// pointers, and filled the ring. A main thread's descriptor lies below its
// stack: no bound but what can be read.
static __always_inline u64 stack_end_above(u64 sp) {
    u64 thread_pointer = current_thread_pointer();
    return thread_pointer > sp ? thread_pointer : ~0ULL;
}

// A deferred sample: the walked addresses, where to resume, and as much of
// the stack from the resume sp up as is readable, STACK_COPY_BYTES at most:
// the whole copy in one read, else the largest readable prefix in halves.
// A sample's stack that goes on past that copy is sent as a deep one, in
// its own size class, even when the walk stopped short of MAX_FRAMES (at
// code mapped since the trie was filled, a table not attached yet): else a
// deep recursion caught then loses its root. Not a wait's: switches come in
// bursts (a JVM's threads at its start), whose large copies filled the ring.
static __always_inline int copy_user_stack_now(const int walkers) {
    struct walk_scratch *scratch = scratch_of(walkers);
    if (!scratch) return 0;
    u32 depth = scratch->depth;
    if (depth > MAX_FRAMES) depth = MAX_FRAMES;
    scratch->event.frame_count = depth;
    u32 v8_bytes = place_v8_frames(scratch, depth);
    if (v8_bytes > MAX_V8_FRAMES * sizeof(struct v8_frame)) return 0;
    u64 stack_end = stack_end_above(scratch->sp);
    u8 goes_on = scratch->deep ||
                 (walkers == WALKERS_PERF_EVENT && !holds_the_rest(scratch->sp, STACK_COPY_BYTES + sizeof(u64), stack_end));
    if (goes_on && send_deep_copy(scratch, depth, v8_bytes, stack_end)) return 0;
    u8 *payload = (u8 *)scratch->event.addresses + depth * 8 + v8_bytes;
    struct stack_copy *resume = (struct stack_copy *)payload;
    u8 *copy = payload + sizeof(struct stack_copy);
    copy_stack_for(scratch, resume, copy, STACK_COPY_BYTES, 2048);
    u32 copied = resume->copy_length;
    if (copied == 0 && user_memory_gone(scratch)) {
        scratch->event.walk_end = WALK_THREAD_EXITING;
        submit_sample(scratch);
        return 0;
    }
    u32 size = SAMPLE_HEADER_BYTES + depth * 8 + v8_bytes + sizeof(struct stack_copy) + copied;
    if (size > sizeof(scratch->event)) return 0;
    asm volatile("" : "+r"(size)); // the bound checked on the register passed
    if (events.ringbuf_output(&scratch->event, size, v8_context_wakeup(&scratch->event)) != 0) count(COUNTER_RINGBUF_FULL);
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
    } else if (wants_async_callers(scratch)) {
        struct v8_async_walk *walk = async_walk_of(scratch);
        walk->promise = 0;
        walk->hops = 0;
        walk->count = 0;
        walk->cut = 0;
        walk->next_map = 0;
        walk->next_shared = 0;
#pragma unroll
        for (int index = 0; index < ASYNC_KNOWN_MAPS; index++) walk->maps[index] = 0;
#pragma unroll
        for (int index = 0; index < ASYNC_KNOWN_SHARED; index++) walk->shared[index] = 0;
        tail_call_walker(ctx, walkers, ASYNC_PROGRAM);
        // The reader is not installed: the sample without its async callers.
    }
    submit_sample(scratch);
}

static __always_inline int walk_user_stack_from(void *ctx, const int walkers, const int jvm) {
    struct walk_scratch *scratch = scratch_of(walkers);
    if (!scratch) return 0;
    struct frame_found *found = frame_found_of(walkers);
    if (!found) return 0;
    u32 tgid = scratch->space_tgid;
    for (int frame = 0; frame < FRAMES_PER_CALL; frame++) {
        if (walk_one_frame(scratch, found, tgid, walkers, jvm)) {
            end_walk(ctx, scratch, walkers);
            return 0;
        }
    }
    if (scratch->walker_calls_left <= 1) {
        // The calls left are the copier's: as past MAX_FRAMES.
        walk_rest_in_user_space(scratch);
        end_walk(ctx, scratch, walkers);
        return 0;
    }
    scratch->walker_calls_left -= 1;
    tail_call_walker(ctx, walkers, jvm ? JVM_WALKER_PROGRAM : WALKER_PROGRAM);
    // Out of tail calls (or the array is empty): keep what we have.
    scratch->event.walk_end = WALK_TRUNCATED;
    submit_sample(scratch);
    return 0;
}

int walk_user_stack(struct bpf_perf_event_data *ctx) {
    return walk_user_stack_from(ctx, WALKERS_PERF_EVENT, 0);
}

// HotSpot's steps double the walker's verification (0.08 → 0.16 s): they
// have a walker of their own, loaded when the first JVM is known.
int walk_jvm_stack(struct bpf_perf_event_data *ctx) {
    return walk_user_stack_from(ctx, WALKERS_PERF_EVENT, 1);
}

#ifdef WITH_OFF_CPU
int walk_user_stack_off_cpu(void *ctx) {
    return walk_user_stack_from(ctx, WALKERS_TRACEPOINT, 0);
}

int walk_jvm_stack_off_cpu(void *ctx) {
    return walk_user_stack_from(ctx, WALKERS_TRACEPOINT, 1);
}

int copy_user_stack_off_cpu(void *ctx) {
    return copy_user_stack_now(WALKERS_TRACEPOINT);
}

int walk_user_stack_uprobe(struct pt_regs *ctx) {
    return walk_user_stack_from(ctx, WALKERS_UPROBE, 0); // node's threadpool: no JVM there
}

int copy_user_stack_uprobe(struct pt_regs *ctx) {
    return copy_user_stack_now(WALKERS_UPROBE);
}
#endif

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
    ev->async_count = 0;
    ev->async_flags = 0;
    scratch->leaf_bcp = 0;
    scratch->hotspot_gc_count = 0;
    struct v8_isolate_read *isolate = &async_walk_of(scratch)->isolate;
    isolate->address = 0;
    read_thread_context(ev); // a V8 context is read by the context reader (walk_and_send)
    bpf_get_current_comm(&ev->comm, sizeof(ev->comm));
    return scratch;
}

// The user registers the current thread entered the kernel with (saved at
// the top of its kernel stack), or 0s; rbx NULL: not wanted (no walk follows).
static __always_inline void saved_user_registers(u64 *pc, u64 *sp, u64 *fp, u64 *rbx) {
    struct task_struct *task = bpf_get_current_task_btf();
    struct pt_regs *user_regs = (struct pt_regs *)bpf_task_pt_regs(task);
    if (user_regs) {
        bpf_probe_read_kernel(pc, sizeof(*pc), &user_regs->ip);
        bpf_probe_read_kernel(sp, sizeof(*sp), &user_regs->sp);
        bpf_probe_read_kernel(fp, sizeof(*fp), &user_regs->bp);
        if (rbx) bpf_probe_read_kernel(rbx, sizeof(*rbx), &user_regs->bx);
    }
}

// The walk of a begun event from the registers walk_and_send set: by the
// walker, or by user space where nothing is known of the process's code yet
// (just exec'd, or attached).
static __always_inline void walk_begun(void *ctx, struct walk_scratch *scratch, const int walkers) {
    if (scratch->space_tgid == 0) {
        defer_walk(scratch, 1);
        end_walk(ctx, scratch, walkers);
        return;
    }
    // User space tells the kernel of a JVM only once its walker is installed.
    u8 jvm = scratch->v8.builtins_end != 0 && scratch->v8.kind == RUNTIME_HOTSPOT;
    tail_call_walker(ctx, walkers, jvm ? JVM_WALKER_PROGRAM : WALKER_PROGRAM);
    // The walker is not installed: report the leaf alone.
    scratch->event.addresses[0] = scratch->pc;
    scratch->depth = 1;
    submit_sample(scratch);
}

// Walk the user stack from (pc, sp, fp, rbx) into the begun event and send it.
static __always_inline void walk_and_send(void *ctx, struct walk_scratch *scratch, u32 tgid, u64 pc, u64 sp, u64 fp, u64 rbx,
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
    scratch->by_frame_size = code != NULL && !code->frame_pointers;
    scratch->hotspot_leaf = code != NULL && code->frame_pointers;
    if (code) scratch->hotspot = *code;
    scratch->pc = pc;
    scratch->sp = sp;
    scratch->fp = fp;
    scratch->rbx = rbx;
    scratch->rbx_slot = 0;
    scratch->exact_pc = 1;
    scratch->space_tgid = address_space_of(tgid);
    scratch->walker_calls_left = WALKER_CALLS;
    if (wants_v8_context(&scratch->event)) {
        scratch->walker_calls_left = WALKER_CALLS - 1;
        tail_call_walker(ctx, walkers, CONTEXT_PROGRAM);
        // The reader is not installed: the walk without the context.
    }
    walk_begun(ctx, scratch, walkers);
}

// The sample's V8 context (the request it serves), read by a program of its
// own: inline, its branches cost each program that begins an event about
// 0.1 s of verification at every start (0.2 s the sampler's). Then the walk,
// or, for a wait whose stack is not there to walk, the event as it is.
static __always_inline int read_context_from(void *ctx, const int walkers) {
    struct walk_scratch *scratch = scratch_of(walkers);
    if (!scratch) return 0;
    // The copy space is free until the walk notes frames.
    read_v8_context(&scratch->event, (u64 *)scratch->event.copy_space, &async_walk_of(scratch)->isolate);
    if (scratch->event.off_cpu_flags & OFF_CPU_STACK_MOVED) {
        submit_sample(scratch);
        return 0;
    }
    walk_begun(ctx, scratch, walkers);
    return 0;
}

int read_sample_context(struct bpf_perf_event_data *ctx) {
    return read_context_from(ctx, WALKERS_PERF_EVENT);
}

#ifdef WITH_OFF_CPU
int read_sample_context_off_cpu(void *ctx) {
    return read_context_from(ctx, WALKERS_TRACEPOINT);
}

int read_sample_context_uprobe(struct pt_regs *ctx) {
    return read_context_from(ctx, WALKERS_UPROBE);
}
#endif
