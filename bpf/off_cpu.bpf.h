// --off-cpu: where threads of followed processes wait, timed from the
// scheduler's switch and walked on their way back to user space.
#pragma once

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

// Shorter than --off-cpu-min: counted, not recorded one by one.
static __always_inline int wait_is_short(u64 waited) {
    u32 shortest_index = OFF_CPU_SETTING_SHORTEST_WAIT;
    u64 *shortest = off_cpu_settings.lookup(&shortest_index);
    return shortest && waited < *shortest;
}

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
//
// A preempted thread's time runnable is summed the same way. Back from a
// preemption long enough to be recorded (a CPU quota's throttling, a busy
// machine), it is walked on its way back to user space as a wait is: its
// stack then is the one it was preempted in. Shorter stretches go with the
// thread's next record (its next CPU sample or wait).

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
            if (coming->runnable) {
                coming->runnable_ns += now - coming->left_ns;
                // Preempted, not woken from a wait (whose record takes this time).
                if (coming->waited_ns == 0 && !wait_is_short(coming->runnable_ns)) coming->walk_runnable = 1;
            } else {
                coming->waited_ns += now - coming->left_ns;
            }
            coming->left_ns = 0;
        }
        if (coming && (coming->waited_ns != 0 || coming->walk_runnable)) reporting = ctx->args[2];
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
    if (leaving->runnable) {
        // Where it was preempted, to check it is the stack walked when it is back.
        if (leaving->waited_ns == 0) {
            u64 pc = 0, fp = 0;
            saved_user_registers(&pc, &leaving->wait_sp, &fp, NULL);
            leaving->wait_pc = pc;
        }
        return 0;
    }
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
    saved_user_registers(&pc, &leaving->wait_sp, &fp, NULL);
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
static __always_inline void submit_without_stack(void *ctx, struct walk_scratch *scratch) {
    scratch->event.off_cpu_flags = OFF_CPU_STACK_MOVED;
    scratch->event.kernel_stack_id = -1;
    scratch->event.v8_frame_count = 0;
    scratch->event.walk_end = WALK_COMPLETE;
    scratch->v8_count = 0;
    scratch->depth = 0;
    // Its request still: the context reader sends it.
    if (wants_v8_context(&scratch->event)) tail_call_walker(ctx, WALKERS_TRACEPOINT, CONTEXT_PROGRAM);
    submit_sample(scratch);
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
    if (!thread) return 0;
    u64 waited = thread->waited_ns;
    u32 walk_runnable = thread->walk_runnable;
    thread->waited_ns = 0;
    thread->walk_runnable = 0;
    if (waited != 0 && wait_is_short(waited)) {
        thread->short_wait_ns += waited;
        thread->short_waits += 1;
        waited = 0;
    }
    // A CPU sample since may have taken the time runnable: none left to walk for.
    if (waited == 0 && (!walk_runnable || wait_is_short(thread->runnable_ns))) return 0;
    u64 pc = 0, sp = 0, fp = 0, rbx = 0;
    saved_user_registers(&pc, &sp, &fp, &rbx);
    // Not where it was preempted (cannot be, short of a kernel that moved
    // it): its time runnable goes with its next record.
    if (waited == 0 && (pc != thread->wait_pc || sp != thread->wait_sp || pc == 0)) return 0;
    struct walk_scratch *scratch = begin_event(pid_tgid, WALKERS_TRACEPOINT);
    if (!scratch) return 0;
    struct sample_event *ev = &scratch->event;
    ev->off_cpu_ns = waited;
    if (waited == 0) ev->off_cpu_flags = OFF_CPU_PREEMPTED;
    ev->short_wait_ns = thread->short_wait_ns;
    ev->short_waits = thread->short_waits;
    ev->runnable_ns = thread->runnable_ns;
    thread->short_wait_ns = 0;
    thread->short_waits = 0;
    thread->runnable_ns = 0;
    ev->kernel_stack_id = waited != 0 ? thread->kernel_stack_id : -1;
    ev->user_mode = 0;
    if (pc != thread->wait_pc || sp != thread->wait_sp) {
        // It waited outside a system call (a page fault's read) and ran on: the stack is another's.
        submit_without_stack(ctx, scratch);
        return 0;
    }
    if (pc == 0) return 0;
    ev->work = work_running(tid);
    walk_and_send(ctx, scratch, pid_tgid >> 32, pc, sp, fp, rbx, WALKERS_TRACEPOINT);
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
    u64 pc = 0, sp = 0, fp = 0, rbx = 0;
    saved_user_registers(&pc, &sp, &fp, &rbx);
    struct walk_scratch *scratch = begin_event(pid_tgid, WALKERS_TRACEPOINT);
    if (!scratch) return 0;
    struct sample_event *ev = &scratch->event;
    ev->off_cpu_ns = last.waited_ns;
    ev->kernel_stack_id = last.kernel_stack_id;
    ev->user_mode = 0;
    if (pc != last.wait_pc || sp != last.wait_sp) {
        submit_without_stack(ctx, scratch);
        return 0;
    }
    ev->work = work_running(tid);
    walk_and_send(ctx, scratch, tgid, pc, sp, fp, rbx, WALKERS_TRACEPOINT);
    return 0;
}
#endif
