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
#define HOTSPOT_CODE_INLINE __always_inline
#include "hotspot_code.h"

_Static_assert(COMM_LEN == TASK_COMM_LEN, "a comm is the kernel's");
_Static_assert(sizeof(struct sample_event) - sizeof(((struct sample_event *)0)->addresses) -
                       sizeof(((struct sample_event *)0)->copy_space) ==
                   SAMPLE_HEADER_BYTES,
               "the header user space reads");

// bpf_tail_call indexes of stack_walkers.
#define WALKER_PROGRAM 0
#define COPIER_PROGRAM 1
#define ASYNC_PROGRAM 2
#define CONTEXT_PROGRAM 3
#define JVM_WALKER_PROGRAM 4

#include "process_state.bpf.h"
#include "dwarf_unwind.bpf.h"
#include "v8_context.bpf.h"
#include "walk_state.bpf.h"
#include "known_frames.bpf.h"
#include "otel_context.bpf.h"
#include "hotspot_frames.bpf.h"
#include "v8_frames.bpf.h"
#include "v8_async.bpf.h"
#include "stack_walk.bpf.h"
#include "threadpool.bpf.h"
#include "off_cpu.bpf.h"
#include "process_events.bpf.h"

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

    u64 pc = 0, sp = 0, fp = 0, rbx = 0;
    ev->user_mode = (ctx->regs.cs & 3) == 3;
    if (ev->user_mode) {
        pc = ctx->regs.ip;
        sp = ctx->regs.sp;
        fp = ctx->regs.bp;
        rbx = ctx->regs.bx;
        scratch->leaf_bcp = ctx->regs.r13;
    } else {
        // In the kernel on behalf of the task.
        saved_user_registers(&pc, &sp, &fp, &rbx);
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
    walk_and_send(ctx, scratch, tgid, pc, sp, fp, rbx, WALKERS_PERF_EVENT);
    return 0;
}
