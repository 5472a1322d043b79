// jitprof's in-kernel half: sample followed processes, walk their user
// stacks, and tell user space when processes fork, exec, exit or map code.
//
// Compiled by BCC at run time. Constants in ALL_CAPS that are not defined
// here (MAX_FRAMES, TRIE_ENTRIES, ...) come from profiler/bpf_program.py as
// -D flags so both halves agree on one set of numbers.
#include <uapi/linux/ptrace.h>
#include <uapi/linux/bpf_perf_event.h>
#include <linux/sched.h>

#define EVENT_SAMPLE 1
#define EVENT_FORK 2
#define EVENT_EXEC 3
#define EVENT_EXIT 4
#define EVENT_MAPS_CHANGED 5

// How a stack walk ended (profiler/sampler.py: WalkEnd).
#define WALK_COMPLETE 0
#define WALK_TRUNCATED 1
#define WALK_NO_MAPPING 2
#define WALK_READ_FAULT 3
#define WALK_BAD_FRAME 4
#define WALK_NO_USER_REGS 5

// Counters kept in a per-CPU array (profiler/sampler.py: Counter).
#define COUNTER_SAMPLES 0
#define COUNTER_RINGBUF_FULL 1
#define COUNTER_KSTACK_FAILED 2
#define COUNTER_EVENTS_LOST 3
#define COUNTER_COUNT 4

#define MAPPING_ELF 1
#define MAPPING_JIT 2

#define PROT_EXEC_FLAG 0x4

// LPM trie key: pid and address big-endian so that a prefix covers an
// aligned address block of one process.
struct trie_key {
    u32 prefixlen;
    u32 pid_be;
    u64 address_be;
};

struct mapping_info {
    u32 kind;
    u32 table_id;  // unwind table of an ELF mapping; unused by the FP walk
    u64 load_bias;
};

struct sample_event {
    u32 event_type;
    u32 pid;
    u32 tid;
    u32 cpu;
    u64 time_ns;
    s32 kernel_stack_id;
    u16 frame_count;
    u8 walk_end;
    u8 user_mode;
    char comm[TASK_COMM_LEN];
    u64 addresses[MAX_FRAMES];
};

struct process_event {
    u32 event_type;
    u32 pid;
    u32 tid;
    u32 parent_pid;
    u64 time_ns;
    char comm[TASK_COMM_LEN];
};

BPF_HASH(followed, u32, u8, FOLLOWED_ENTRIES);
BPF_LPM_TRIE(mappings, struct trie_key, struct mapping_info, TRIE_ENTRIES);
BPF_STACK_TRACE(kernel_stacks, KERNEL_STACK_ENTRIES);
BPF_RINGBUF_OUTPUT(events, RINGBUF_PAGES);
BPF_PERCPU_ARRAY(counters, u64, COUNTER_COUNT);
// Threads inside an mmap/mprotect that asked for PROT_EXEC.
BPF_HASH(exec_mapping_calls, u32, u8, 4096);

static __always_inline void count(int index) {
    u64 *value = counters.lookup(&index);
    if (value)
        *value += 1;
}

static __always_inline int is_followed(u32 tgid) {
    return tgid != 0 && followed.lookup(&tgid) != NULL;
}

static __always_inline struct mapping_info *find_mapping(u32 tgid, u64 address) {
    struct trie_key key = {};
    key.prefixlen = 96;
    key.pid_be = __builtin_bswap32(tgid);
    key.address_be = __builtin_bswap64(address);
    return mappings.lookup(&key);
}

int on_cpu_sample(struct bpf_perf_event_data *ctx) {
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tgid = pid_tgid >> 32;
    if (!is_followed(tgid))
        return 0;
    count(COUNTER_SAMPLES);

    struct sample_event *ev = events.ringbuf_reserve(sizeof(struct sample_event));
    if (!ev) {
        count(COUNTER_RINGBUF_FULL);
        return 0;
    }
    ev->event_type = EVENT_SAMPLE;
    ev->pid = tgid;
    ev->tid = (u32)pid_tgid;
    ev->cpu = bpf_get_smp_processor_id();
    ev->time_ns = bpf_ktime_get_ns();
    ev->frame_count = 0;
    bpf_get_current_comm(&ev->comm, sizeof(ev->comm));

    ev->kernel_stack_id = -1;
#ifdef WITH_KERNEL_STACKS
    ev->kernel_stack_id = kernel_stacks.get_stackid(ctx, 0);
    if (ev->kernel_stack_id < 0 && ev->kernel_stack_id != -EFAULT)
        count(COUNTER_KSTACK_FAILED);
#endif

    u64 pc = 0, fp = 0;
    ev->user_mode = (ctx->regs.cs & 3) == 3;
    if (ev->user_mode) {
        pc = ctx->regs.ip;
        fp = ctx->regs.bp;
    } else {
        // In the kernel on behalf of the task: its user registers were
        // saved at kernel entry, at the top of its kernel stack.
        struct task_struct *task = bpf_get_current_task_btf();
        struct pt_regs *user_regs = (struct pt_regs *)bpf_task_pt_regs(task);
        if (user_regs) {
            bpf_probe_read_kernel(&pc, sizeof(pc), &user_regs->ip);
            bpf_probe_read_kernel(&fp, sizeof(fp), &user_regs->bp);
        }
    }
    if (pc == 0) {
        ev->walk_end = WALK_NO_USER_REGS;
        events.ringbuf_submit(ev, BPF_RB_NO_WAKEUP);
        return 0;
    }

    u8 walk_end = WALK_TRUNCATED;
    u16 frame_count = 0;
    // A bounded loop (kernel >= 5.3): the body is small enough for the
    // verifier to check MAX_FRAMES iterations of it.
    for (int depth = 0; depth < MAX_FRAMES; depth++) {
        ev->addresses[depth] = pc;
        frame_count = depth + 1;
        // Caller frames hold return addresses: look up pc - 1 so that a call
        // at the very end of a mapping is found in it.
        u64 lookup_pc = depth == 0 ? pc : pc - 1;
        struct mapping_info *mapping = find_mapping(tgid, lookup_pc);
        if (!mapping) {
            walk_end = WALK_NO_MAPPING;
            break;
        }
        if (fp == 0) {
            walk_end = WALK_COMPLETE;
            break;
        }
        u64 frame[2];
        if (bpf_probe_read_user(frame, sizeof(frame), (void *)fp) != 0) {
            walk_end = WALK_READ_FAULT;
            break;
        }
        u64 next_fp = frame[0];
        pc = frame[1];
        if (pc == 0) {
            walk_end = WALK_COMPLETE;
            break;
        }
        // Frames live at increasing addresses: anything else is not a chain.
        if (next_fp != 0 && next_fp <= fp) {
            if (depth + 1 < MAX_FRAMES) {
                ev->addresses[depth + 1] = pc;
                frame_count = depth + 2;
            }
            walk_end = WALK_BAD_FRAME;
            break;
        }
        fp = next_fp;
    }
    ev->frame_count = frame_count;
    ev->walk_end = walk_end;
    // Samples do not wake the reader: it drains them on its own timer, so
    // the daemon costs the same at 99 Hz or 999 Hz. Process events wake it.
    events.ringbuf_submit(ev, BPF_RB_NO_WAKEUP);
    return 0;
}

static __always_inline void emit_process_event(u32 type, u32 pid, u32 tid, u32 parent_pid) {
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
    bpf_get_current_comm(&ev->comm, sizeof(ev->comm));
    events.ringbuf_submit(ev, 0);
}

TRACEPOINT_PROBE(sched, sched_process_fork) {
    u32 parent_tgid = bpf_get_current_pid_tgid() >> 32;
    if (!is_followed(parent_tgid))
        return 0;
    // Follow at once, so the child's first samples are not missed. Threads
    // come through here too; user space drops entries that are not tgids.
    u32 child = args->child_pid;
    u8 one = 1;
    followed.update(&child, &one);
    emit_process_event(EVENT_FORK, child, child, parent_tgid);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exec) {
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (!is_followed(tgid))
        return 0;
    emit_process_event(EVENT_EXEC, tgid, (u32)bpf_get_current_pid_tgid(), 0);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exit) {
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tgid = pid_tgid >> 32;
    if (!is_followed(tgid))
        return 0;
    emit_process_event(EVENT_EXIT, tgid, (u32)pid_tgid, 0);
    return 0;
}

static __always_inline void note_exec_mapping_call(unsigned long prot) {
    if (!(prot & PROT_EXEC_FLAG))
        return;
    u64 pid_tgid = bpf_get_current_pid_tgid();
    if (!is_followed(pid_tgid >> 32))
        return;
    u32 tid = (u32)pid_tgid;
    u8 one = 1;
    exec_mapping_calls.update(&tid, &one);
}

static __always_inline void finish_exec_mapping_call(void) {
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tid = (u32)pid_tgid;
    if (!exec_mapping_calls.lookup(&tid))
        return;
    exec_mapping_calls.delete(&tid);
    emit_process_event(EVENT_MAPS_CHANGED, pid_tgid >> 32, tid, 0);
}

TRACEPOINT_PROBE(syscalls, sys_enter_mmap) {
    note_exec_mapping_call(args->prot);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_mmap) {
    finish_exec_mapping_call();
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_mprotect) {
    note_exec_mapping_call(args->prot);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_mprotect) {
    finish_exec_mapping_call();
    return 0;
}
