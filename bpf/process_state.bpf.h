// Which processes are followed and what the kernel knows of their code: the
// followed table with each process's exec count, the trie of mappings user
// space fills from /proc/PID/maps, the ring buffer of events and the counters.
#pragma once

// Followed processes, each with how many times it has exec'd: only this
// program changes a count, so user space can tell whether the maps it read
// are still the process's (maps_read holds the count they were read at).
BPF_HASH(followed, u32, u32, FOLLOWED_ENTRIES);
BPF_HASH(maps_read, u32, u32, FOLLOWED_ENTRIES);
// A forked child whose maps user space has not read yet walks with its
// parent's trie entries: until it execs, its code is its parent's.
BPF_HASH(fork_parents, u32, u32, FOLLOWED_ENTRIES);
// Processes with a maps-changed event user space has not read their maps
// for: the time of the latest event, and how many ranges were covered since.
struct maps_staleness {
    u64 last_event_ns;
    u32 covered;
    u32 reserved;
};
BPF_HASH(maps_stale, u32, struct maps_staleness, FOLLOWED_ENTRIES);
// Threads past sched_process_exit: their user memory goes next (exit_mm).
BPF_TABLE("lru_hash", u32, u8, exiting_threads, FOLLOWED_ENTRIES);
// --all: settings[0] is 1, and every process with user code is followed
// from its first sample, but for those user space ignores (its own).
BPF_ARRAY(settings, u32, 1);
BPF_HASH(ignored, u32, u8, 256);
BPF_LPM_TRIE(mappings, struct trie_key, struct mapping_info, TRIE_ENTRIES);
BPF_ARRAY(trie_generations, struct trie_generation, 1);

#ifdef WITH_KERNEL_STACKS
BPF_STACK_TRACE(kernel_stacks, KERNEL_STACK_ENTRIES);
#endif
BPF_RINGBUF_OUTPUT(events, RINGBUF_PAGES);
BPF_PERCPU_ARRAY(counters, u64, COUNTER_COUNT);

static __always_inline void count(int index) {
    u64 *value = counters.lookup(&index);
    if (value) *value += 1;
}

// The current thread's thread pointer (x86-64: fs's base, where its TLS and
// its descriptor are), or 0: not known (the running kernel's BTF did not
// say where the task keeps it).
static __always_inline u64 current_thread_pointer(void) {
    u64 thread_pointer = 0;
#ifdef TASK_FSBASE_OFFSET
    bpf_probe_read_kernel(&thread_pointer, sizeof(thread_pointer), (void *)(bpf_get_current_task() + TASK_FSBASE_OFFSET));
#endif
    return thread_pointer;
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
