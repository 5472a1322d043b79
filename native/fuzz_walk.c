/* Drives the copy walker under AddressSanitizer: the rows of a real file
 * (argv[2]), and random stacks whose words point into the stack, the
 * mappings or nowhere, walked from random registers. Every buffer is
 * allocated at its exact size, so any read past one is caught. Prints the
 * walk ends seen. */
#include "jitprof_native.h"
#include "fuzz_driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>

#define MAPPINGS 4
#define STACK_ADDRESS 0x7ffe00000000ULL

int main(int argc, char **argv) {
    long rounds = rounds_asked(argc, argv, 2, "ROUNDS ELF-FILE");
    if (rounds < 0) return 2;
    int fd = open(argv[2], O_RDONLY);
    if (fd < 0) return 2;
    struct unwind_row *rows = NULL;
    uint64_t row_count = 0;
    struct jp_table_stats stats;
    if (jp_unwind_rows(fd, &rows, &row_count, &stats) != JP_OK || row_count == 0) return 2;
    close(fd);
    /* An exact-size copy of the rows: a search past the end is caught. */
    struct unwind_row *exact_rows = malloc(row_count * sizeof(*rows));
    if (exact_rows == NULL) return 2;
    memcpy(exact_rows, rows, row_count * sizeof(*rows));
    jp_free(rows);
    uint64_t last_pc = exact_rows[row_count - 1].pc;

    /* ELF text, a second ELF mapping, JIT memory, a pending file. */
    struct jp_walk_mapping mappings[MAPPINGS] = {
        {0x100000, 0x100000 + last_pc + 0x1000, 0x100000, exact_rows, row_count, MAPPING_ELF, 0},
        {0x40000000, 0x40100000, 0x40000000, exact_rows, row_count / 2, MAPPING_ELF, 0},
        {0x50000000, 0x50100000, 0, NULL, 0, MAPPING_JIT, 0},
        {0x60000000, 0x60100000, 0, NULL, 0, MAPPING_ELF_PENDING, 0},
    };
    uint64_t seed = FUZZ_SEED;
    uint64_t ends[256] = {0};
    uint64_t frames[127];
    uint64_t frame_pointers[127];
    for (long round = 0; round < rounds; round++) {
        uint64_t length = next_random(&seed) % 12288 + (next_random(&seed) % 2 ? 0 : next_random(&seed) % 8);
        uint8_t *stack = malloc(length ? length : 1);
        if (stack == NULL) return 2;
        for (uint64_t offset = 0; offset + 8 <= length; offset += 8) {
            uint64_t word;
            switch (next_random(&seed) % 5) {
            case 0: word = STACK_ADDRESS + next_random(&seed) % (length + 64); break;
            case 1: word = mappings[next_random(&seed) % MAPPINGS].start + next_random(&seed) % 0x100000; break;
            case 2: word = 0; break;
            case 3: word = next_random(&seed); break;
            default: word = 0x100000 + next_random(&seed) % (last_pc + 0x1000); break;
            }
            memcpy(stack + offset, &word, 8);
        }
        /* Pages not read (holes) in some copies: any bit, even past the copy's end. */
        uint32_t holes = next_random(&seed) % 2 ? (uint32_t)next_random(&seed) : 0;
        struct jp_walk_stack copy = {stack, length, STACK_ADDRESS, (uint32_t)(next_random(&seed) % 2), holes};
        struct jp_walk_registers start = {
            mappings[next_random(&seed) % MAPPINGS].start + next_random(&seed) % 0x100000,
            STACK_ADDRESS + next_random(&seed) % 64,
            next_random(&seed) % 2 ? STACK_ADDRESS + next_random(&seed) % (length + 64) : next_random(&seed),
            next_random(&seed) % 2   ? STACK_ADDRESS + next_random(&seed) % (length + 64)
            : next_random(&seed) % 2 ? next_random(&seed)
                                     : 0,
            (uint32_t)(next_random(&seed) % 2),
            0,
        };
        uint32_t max_frames = (uint32_t)(next_random(&seed) % 128);
        uint32_t count = 0;
        int end = jp_walk_copy(mappings, MAPPINGS, &copy, &start, frames, frame_pointers, max_frames, &count);
        if (count > max_frames || end < 0 || end > 255) {
            fprintf(stderr, "bad result: end %d, %u frames of %u\n", end, count, max_frames);
            return 3;
        }
        ends[end]++;
        free(stack);
    }
    for (int end = 0; end < 256; end++)
        if (ends[end]) printf("end %d %llu\n", end, (unsigned long long)ends[end]);
    free(exact_rows);
    return 0;
}
