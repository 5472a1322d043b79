// OpenTelemetry thread context (OTEP 4947): a process whose SDK publishes
// its current span in a TLSDESC thread-local pointer has the pointer's
// offset from the thread pointer here (user space reads it from the GOT);
// each sample of its threads carries the record the pointer held at that
// instant. The SDK sets the pointer to NULL while it builds a record, so a
// record read at the sample is whole, or there is none.
#pragma once

BPF_HASH(thread_context_offsets, u32, s64, FOLLOWED_ENTRIES);

static __always_inline void read_thread_context(struct sample_event *ev) {
    ev->context_size = 0;
    ev->context_kind = CONTEXT_OTEL;
#ifdef TASK_FSBASE_OFFSET
    u32 tgid = ev->pid;
    s64 *offset = thread_context_offsets.lookup(&tgid);
    if (!offset) return;
    u64 thread_pointer = current_thread_pointer();
    if (thread_pointer == 0) return;
    u64 record = 0;
    if (bpf_probe_read_user(&record, sizeof(record), (void *)(thread_pointer + *offset)) != 0 || record == 0) return;
    if (bpf_probe_read_user(ev->context, OTEL_CONTEXT_BYTES, (void *)record) == 0) {
        ev->context_size = OTEL_CONTEXT_BYTES;
    } else if (bpf_probe_read_user(ev->context, THREAD_CONTEXT_HEADER_BYTES, (void *)record) == 0) {
        ev->context_size = THREAD_CONTEXT_HEADER_BYTES; // a record at the end of its memory
    }
#endif
}
