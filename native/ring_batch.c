/* Ring-buffer records gathered in C: the ring's consumer (bpf_calls.c) calls
 * jp_ring_collect for each record, which copies it into a batch, so the
 * daemon's sampling thread takes the GIL once per batch instead of once per
 * record. Per record, a thread that must win the GIL back from a busy one
 * (a symbolizer reading a huge perf map) waits its switch interval (5 ms)
 * each time: 200 records a second at most, fewer than sampling makes. */
#include "jitprof_native.h"

#include <string.h>

/* What a record takes in the batch: an 8-byte header, its bytes padded to 8. */
static uint64_t slot_bytes(uint64_t size) {
    return 8 + ((size + 7) & ~(uint64_t)7);
}

int jp_ring_collect(struct jp_ring_batch *batch, const void *data, size_t size) {
    if (batch->used > batch->capacity) return -1; /* never: the batch's fields are ours */
    uint64_t room = batch->capacity - batch->used;
    uint64_t slot = slot_bytes(size);
    /* The consumer has advanced past this record already: one that does not fit
     * is lost, and counted (the stop rule below keeps room for the largest). */
    if (size > UINT32_MAX || slot > room) {
        batch->dropped++;
        return -1;
    }
    uint8_t *at = batch->buffer + batch->used;
    uint32_t header[2] = {(uint32_t)size, 0};
    memcpy(at, header, sizeof(header));
    memcpy(at + sizeof(header), data, size);
    batch->used += slot;
    batch->records++;
    /* A negative answer stops the consume loop with this record taken. */
    if (batch->records >= batch->max_records || batch->capacity - batch->used < batch->max_record_bytes) {
        batch->full = 1;
        return -1;
    }
    return 0;
}
