// --off-cpu: node's threadpool, charged to the JavaScript that queued its work.
#pragma once

#ifdef WITH_OFF_CPU

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

static __always_inline u64 work_running(u32 tid) {
    u64 *key = threadpool_running.lookup(&tid);
    return key ? *key : 0;
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
    walk_and_send(ctx, scratch, tgid, PT_REGS_IP(ctx), PT_REGS_SP(ctx), ctx->bp, ctx->bx, WALKERS_UPROBE);
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
