/* Drives the table compiler over files under AddressSanitizer: each argument
 * is a file, compiled whole, then as every prefix step and with bytes
 * flipped by a fixed pseudo-random sequence. Prints "rows N" per file. */
#include "jitprof_native.h"
#include "fuzz_driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void compile(const uint8_t *data, uint64_t size, uint64_t *rows_total) {
    struct unwind_row *rows = NULL;
    uint64_t count = 0;
    struct jp_table_stats stats;
    /* a copy of exactly size bytes, so that any read past it is caught */
    uint8_t *copy = malloc(size ? size : 1);
    if (copy == NULL) exit(2);
    memcpy(copy, data, size);
    jp_unwind_rows_from_memory(copy, size, &rows, &count, &stats);
    for (uint64_t index = 1; index < count; index++)
        if (rows[index].pc <= rows[index - 1].pc) {
            fprintf(stderr, "rows not sorted at %llu\n", (unsigned long long)index);
            exit(3);
        }
    *rows_total += count;
    jp_free(rows);
    free(copy);
}

int main(int argc, char **argv) {
    int mutations = argc > 2 ? atoi(argv[1]) : 200;
    for (int index = 2; index < argc; index++) {
        FILE *file = fopen(argv[index], "rb");
        if (file == NULL) return 2;
        fseek(file, 0, SEEK_END);
        long size = ftell(file);
        fseek(file, 0, SEEK_SET);
        uint8_t *data = malloc((size_t)size + 1);
        if (data == NULL || fread(data, 1, (size_t)size, file) != (size_t)size) return 2;
        fclose(file);
        uint64_t whole = 0, total = 0, seed = FUZZ_SEED ^ (uint64_t)size;
        compile(data, (uint64_t)size, &whole);
        for (long cut = 0; cut < size; cut += size / 64 + 1) compile(data, (uint64_t)cut, &total);
        uint8_t *mutated = malloc((size_t)size);
        if (mutated == NULL) return 2;
        for (int round = 0; round < mutations; round++) {
            memcpy(mutated, data, (size_t)size);
            int flips = 1 + (int)(next_random(&seed) % 16);
            for (int flip = 0; flip < flips; flip++)
                mutated[next_random(&seed) % (uint64_t)size] ^= (uint8_t)(1 + next_random(&seed) % 255);
            compile(mutated, (uint64_t)size, &total);
        }
        free(mutated);
        free(data);
        printf("rows %llu\n", (unsigned long long)whole);
    }
    return 0;
}
