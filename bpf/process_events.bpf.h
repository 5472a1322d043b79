// Processes followed as they fork, exec and exit, and the code they map:
// user space is told, and reads their maps.
#pragma once

#define PROT_EXEC_FLAG 0x4
#define STALE_EVENT_GAP_NS 1000000ULL // maps-changed events of one process while its maps are not read
// New ranges told each while a process's maps are not read (then at most
// one every STALE_EVENT_GAP_NS).
#define MAX_STALE_COVERED 64

struct exec_mapping_call {
    u64 address; // mprotect: the range; mmap: known at exit
    u64 length;
    u8 is_mprotect;
};

// Threads inside an mmap/mprotect that asked for PROT_EXEC.
BPF_HASH(exec_mapping_calls, u32, struct exec_mapping_call, 4096);

#define SYSCALL_CLONE 56
#define SYSCALL_CLONE3 435
#define CLONE_THREAD_FLAG 0x10000

// Is the current task's clone making a thread of its process? From the
// system call it is in (the registers it entered with, and clone3's
// arguments in its memory): a thread's samples are its process's, and a
// program that makes threads by the thousand a second would fill the ring
// with their events (each also cost user space a read of /proc). Anything
// else (fork, vfork, a kernel-made worker, a read that fails) is a process.
static __always_inline int clone_makes_thread(void) {
    struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
    if (!regs) return 0;
    u64 number = 0, first = 0, flags = 0;
    bpf_probe_read_kernel(&number, sizeof(number), &regs->orig_ax);
    bpf_probe_read_kernel(&first, sizeof(first), &regs->di);
    if (number == SYSCALL_CLONE) {
        flags = first;
    } else if (number == SYSCALL_CLONE3) {
        if (bpf_probe_read_user(&flags, sizeof(flags), (void *)first)) return 0; // struct clone_args: flags first
    }
    return (flags & CLONE_THREAD_FLAG) != 0;
}

static __always_inline int process_forked(u32 child) {
    u32 parent_tgid = bpf_get_current_pid_tgid() >> 32;
    if (!is_followed(parent_tgid)) return 0;
    exiting_threads.delete(&child); // a reused thread id
    if (clone_makes_thread()) return 0;
    // Follow at once, so the child's first samples are not missed. A thread
    // not told from a process above comes through here too; user space drops
    // entries that are not tgids.
    u32 no_execs = 0;
    followed.update(&child, &no_execs);
    u32 space = address_space_of(parent_tgid);
    if (space != 0) fork_parents.update(&child, &space);
    emit_process_event(EVENT_FORK, child, child, parent_tgid);
    return 0;
}

static __always_inline int process_execs(void) {
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

static __always_inline int thread_exits(void) {
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tgid = pid_tgid >> 32;
    u32 tid = (u32)pid_tgid;
    if (!is_followed(tgid)) return 0;
    fork_parents.delete(&tid); // a thread not told from a process at its creation is given an entry too
    u8 one = 1;
    exiting_threads.update(&tid, &one);
    // Only a process's main thread is told (user space follows processes;
    // one it took a thread for is let go by its sweep).
    if (tid != tgid) return 0;
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
    u32 zero = 0;
    struct trie_generation *generation = trie_generations.lookup(&zero);
    if (generation) __sync_fetch_and_add(&generation->kernel, 1);
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
    struct maps_staleness *stale = maps_stale.lookup(&tgid);
    if (stale) {
        // User space has an event for this process it has not acted on yet:
        // the maps it reads then show this change too. Meanwhile the range is
        // still covered and told without a wakeup, so the code of a process
        // that exits before that read (a short node's last compile) stays
        // known: each of the first MAX_STALE_COVERED ranges, then one at most
        // every STALE_EVENT_GAP_NS. A process mapping in a loop sends a
        // bounded trickle, not a flood that fills the trie or crowds samples
        // out of the ring buffer.
        if (stale->covered >= MAX_STALE_COVERED) {
            if (now - stale->last_event_ns < STALE_EVENT_GAP_NS) return;
        } else {
            stale->covered++;
        }
        stale->last_event_ns = now;
        cover_new_exec_range(tgid, address, length);
        emit_process_event_flags(EVENT_MAPS_CHANGED, tgid, tid, 0, address, length, BPF_RB_NO_WAKEUP);
        return;
    }
    cover_new_exec_range(tgid, address, length);
    emit_process_event_range(EVENT_MAPS_CHANGED, tgid, tid, 0, address, length);
    struct maps_staleness fresh = {.last_event_ns = now, .covered = 1};
    maps_stale.update(&tgid, &fresh);
}
TRACEPOINT_PROBE(sched, sched_process_fork) {
    return process_forked(args->child_pid);
}

TRACEPOINT_PROBE(sched, sched_process_exec) {
    return process_execs();
}

TRACEPOINT_PROBE(sched, sched_process_exit) {
    return thread_exits();
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
