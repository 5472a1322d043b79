/* jitprof's native library: the work the Python daemon is too slow for.
 * Reached from Python through cffi (profiler/native/library.py); the
 * declarations between the markers are handed to cffi as they are. */
#ifndef JITPROF_NATIVE_H
#define JITPROF_NATIVE_H

#include <stdint.h>

/* cffi-begin */
/* One unwind row, exactly as bpf/sampler.bpf.c reads it (16 bytes). */
struct jp_row {
    uint32_t pc;
    uint8_t cfa_type;
    uint8_t rbp_rule;
    uint16_t reserved;
    int32_t cfa_offset;
    int32_t rbp_offset;
};

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
int jp_unwind_rows(int fd, struct jp_row **rows_out, uint64_t *count_out, struct jp_table_stats *stats);
int jp_unwind_rows_from_memory(const uint8_t *file, uint64_t file_size, struct jp_row **rows_out, uint64_t *count_out,
                               struct jp_table_stats *stats);
void jp_free(void *pointer);
/* 1 if rows are as the compiler writes them (pc strictly increasing, known
 * CFA and rbp kinds, reserved bytes zero, PLT thresholds in range), else 0:
 * rows from a cache file are checked before they reach the kernel. */
int jp_rows_valid(const struct jp_row *rows, uint64_t count);
/* cffi-end */

#endif
