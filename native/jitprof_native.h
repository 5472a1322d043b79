/* jitprof's native library: the work the Python daemon is too slow for.
 * Reached from Python through cffi (profiler/native/library.py); the
 * declarations between the markers are handed to cffi as they are, after
 * those of jitprof_abi.h (the unwind row and the codes the kernel shares). */
#ifndef JITPROF_NATIVE_H
#define JITPROF_NATIVE_H

#include <stddef.h>
#include <stdint.h>

#include "jitprof_abi.h"

/* cffi-begin */

struct jp_table_stats {
    uint64_t fdes;      /* FDEs seen */
    uint64_t failed;    /* FDEs whose CFA program was malformed: their range has no rows */
    uint64_t malformed; /* entries whose header or CIE could not be read */
};

enum {
    JP_OK = 0,
    JP_NOT_ELF = 1,
    JP_UNSUPPORTED = 2, /* not x86-64 ELF64 little-endian */
    JP_TOO_LARGE = 3,
    JP_IO_ERROR = 4,
    JP_NO_MEMORY = 5,
};

/* Rows for every FDE of the file open at fd (.eh_frame, else .debug_frame),
 * sorted, gaps marked, repeats merged. *rows_out is freed with jp_free. */
int jp_unwind_rows(int fd, struct unwind_row **rows_out, uint64_t *count_out, struct jp_table_stats *stats);
int jp_unwind_rows_from_memory(const uint8_t *file, uint64_t file_size, struct unwind_row **rows_out, uint64_t *count_out,
                               struct jp_table_stats *stats);
void jp_free(void *pointer);
/* The start (file address) of every FDE of the file open at fd, in file
 * order: where functions begin, for naming addresses no symbol covers.
 * *starts_out is freed with jp_free. */
int jp_function_starts(int fd, uint32_t **starts_out, uint64_t *count_out);
/* 1 if rows are as the compiler writes them (pc strictly increasing, known
 * CFA kinds and saved-register rules, PLT thresholds in range), else 0:
 * rows from a cache file are checked before they reach the kernel. */
int jp_rows_valid(const struct unwind_row *rows, uint64_t count);

/* Finishing a walk from a stack copy (walk.c). A mapping's kind is the
 * trie's: MAPPING_JIT (frame-pointer steps), MAPPING_ELF (rows; none:
 * frame-pointer steps) or MAPPING_ELF_PENDING (its table is still being
 * built: the walk stops, to be tried again). */

/* One executable mapping; an array of them is sorted by start, not overlapping. */
struct jp_walk_mapping {
    uint64_t start; /* [start, end) */
    uint64_t end;
    uint64_t load_bias; /* address minus file address (ELF vaddr) */
    const struct unwind_row *rows;
    uint64_t row_count;
    uint32_t kind;
    uint32_t reserved;
};

/* The copy: length bytes of user memory from address up (the stack pointer
 * where the kernel's walk stopped, or its page). reached_end: memory beyond
 * it was not readable, so a read there is a fault, not a copy that was too
 * short. holes: bit i set, the copy's bytes [i, i + 1) * STACK_COPY_PAGE_BYTES
 * were not readable (a copy from a page's start, read page by page). */
struct jp_walk_stack {
    const uint8_t *bytes;
    uint64_t length;
    uint64_t address;
    uint32_t reached_end;
    uint32_t holes;
};

struct jp_walk_registers {
    uint64_t pc;
    uint64_t sp;
    uint64_t fp;
    uint64_t rbx;      /* 0: not known */
    uint32_t exact_pc; /* pc is not a return address (the leaf, or a frame a signal interrupted) */
    uint32_t reserved;
};

/* How a walk ended: the kernel walker's WALK_* codes (WALK_COPY_TOO_SHORT
 * when it needed stack beyond the copy), and one of its own. */
enum {
    JP_WALK_PENDING = 64, /* stopped before a MAPPING_ELF_PENDING mapping: frame_count frames so far,
                             and frames[frame_count] is the address in it (when frame_count < max_frames) */
};

/* Walk from start over the copy, writing up to max_frames addresses (leaf
 * first) into frames, and (when frame_pointers is not NULL) each frame's
 * frame pointer into frame_pointers (for reading a JIT frame's slots);
 * returns how the walk ended. */
int jp_walk_copy(const struct jp_walk_mapping *mappings, uint64_t mapping_count, const struct jp_walk_stack *stack,
                 const struct jp_walk_registers *start, uint64_t *frames, uint64_t *frame_pointers, uint32_t max_frames,
                 uint32_t *frame_count);

/* Source maps (source_map.c): for generated positions (0-based, sorted by
 * line then column), the original ones from a map's `mappings` string:
 * the segment at or before the column on the same line; source -1 when
 * there is none or it names no source. */
struct jp_generated {
    int32_t line, column;
};
struct jp_original {
    int32_t source, line, column, name; /* name -1: none */
    int32_t generated_column;           /* where the segment found begins */
};
enum {
    JP_SOURCE_MAP_MALFORMED = 16,
    JP_SOURCE_MAP_UNSORTED = 17,
};
int jp_source_map_lookup(const uint8_t *mappings, uint64_t length, uint32_t source_count, uint32_t name_count,
                         const struct jp_generated *queries, uint64_t query_count, struct jp_original *results);
/* Ring-buffer records gathered for one poll (ring_batch.c). Each record
 * is its size as a uint32, 4 zero bytes, then its bytes, padded to 8. */
struct jp_ring_batch {
    uint8_t *buffer;
    uint64_t capacity;         /* bytes of buffer */
    uint64_t used;             /* bytes of records in it */
    uint64_t records;          /* records in it */
    uint64_t max_records;      /* stop once this many are in */
    uint64_t max_record_bytes; /* stop once less room than this is left: the largest record fits */
    uint64_t dropped;          /* records that did not fit (lost) */
    uint32_t full;             /* the batch stopped the consume loop: more may wait in the ring */
    uint32_t reserved;
};
/* Takes one record into the batch; negative: stop consuming, with this record taken. */
int jp_ring_collect(struct jp_ring_batch *batch, const void *data, size_t size);
/* Kernel calls for a loaded sampler (bpf_calls.c): what the kernel gave (a
 * descriptor, 0), or -errno. */
int jp_bpf_map_create(uint32_t map_type, const char *name, uint32_t key_size, uint32_t value_size, uint32_t max_entries,
                      uint32_t flags);
int jp_bpf_prog_load(uint32_t program_type, const char *name, const void *instructions, uint64_t instruction_bytes,
                     const char *license, uint32_t kernel_version, uint32_t log_level, char *log, uint32_t log_size);
int jp_bpf_map_lookup(int map_fd, const void *key, void *value);
int jp_bpf_map_update(int map_fd, const void *key, const void *value, uint64_t flags);
int jp_bpf_map_delete(int map_fd, const void *key);
int jp_bpf_map_next_key(int map_fd, const void *key, void *next_key);
int jp_bpf_raw_tracepoint_open(const char *name, int program_fd);
/* A perf event on (pid, cpu) running program_fd, enabled; sample_freq 0:
 * every sample_period events. */
int jp_perf_event_attach(int program_fd, uint32_t event_type, uint64_t config, uint64_t sample_period, uint64_t sample_freq,
                         int pid, int cpu);
int jp_perf_event_attach_uprobe(int program_fd, uint32_t pmu_type, uint64_t config, const char *path, uint64_t offset, int pid);
/* The consumer of a BPF ring buffer map whose data area is data_size bytes. */
struct jp_ring;
int jp_ring_open(int map_fd, uint64_t data_size, struct jp_ring **ring_out);
/* Wait up to timeout_ms for a wakeup, then take records into the batch:
 * the records taken, or -errno. */
int jp_ring_poll(struct jp_ring *ring, int timeout_ms, struct jp_ring_batch *batch);
int jp_ring_watch(struct jp_ring *ring, int fd);
int jp_ring_consume(struct jp_ring *ring, struct jp_ring_batch *batch);
void jp_ring_close(struct jp_ring *ring);
/* The sample lines of a saved profile (sample_lines.c). A line's texts
 * (kinds 0, 1, 2): its command name (a JSON string, quotes included), its
 * stack (a JSON list of frame ids), its walk's end (the name, unquoted). */
enum {
    JP_SAMPLE_TEXT_KINDS = 3,
    JP_SAMPLE_LINES_SHORT = 32, /* fewer lines in the text than line_count */
    JP_SAMPLE_LINES_LONG = 33,  /* text left after line_count lines */
};
/* Per line (arrays of line_count): parsed 1 when the line is in write_raw's
 * form with every number below number_limit, then its fields; 0 and the
 * fields unset otherwise. comm, stack, walk_end: each text's index among
 * the distinct texts of its kind the reader has seen, from 0 up. */
struct jp_sample_columns {
    uint64_t *time_ns;
    uint64_t *pid;
    uint64_t *tid;
    uint64_t *waited_ns; /* 0: none (a CPU sample) */
    uint32_t *comm;
    uint32_t *stack;
    uint32_t *walk_end;
    uint8_t *parsed;
};
/* A text seen for the first time: where it is in this call's text. */
struct jp_sample_text {
    uint32_t kind;
    uint32_t index;
    uint64_t line; /* of this call, from 0 */
    uint64_t offset;
    uint64_t length;
};
struct jp_sample_reader;
int jp_sample_reader_new(struct jp_sample_reader **reader_out);
void jp_sample_reader_free(struct jp_sample_reader *reader);
/* Splits line_count lines (separated by '\n') of text into columns; the
 * texts new to the reader into news (room for 3 per line), *news_count of them. */
int jp_sample_lines(struct jp_sample_reader *reader, const uint8_t *text, uint64_t length, uint64_t line_count,
                    uint64_t number_limit, struct jp_sample_columns *columns, struct jp_sample_text *news, uint64_t *news_count);
/* HotSpot's compiled code at a leaf (bpf/hotspot_code.h): bytes holds at
 * least 24 bytes, from pc - 8 for the prologue, from pc for the epilogue.
 * The prologue's PROLOGUE_* state, or the epilogue's words left above the
 * return address (0: the frame is whole); -1 for too few bytes. */
int jp_hotspot_prologue(const uint8_t *bytes, uint64_t length);
int jp_hotspot_epilogue(const uint8_t *bytes, uint64_t length);
/* cffi-end */

#endif
