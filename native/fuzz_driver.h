/* What the AddressSanitizer drivers (fuzz_*.c) share: a fixed pseudo-random
 * sequence (xorshift64), so that a failing round can be run again. */
#ifndef JITPROF_FUZZ_DRIVER_H
#define JITPROF_FUZZ_DRIVER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FUZZ_SEED 0x9E3779B97F4A7C15ULL

static inline uint64_t next_random(uint64_t *seed) {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    return *seed;
}

/* The rounds asked for as the first argument, or -1 after the usage line. */
static inline long rounds_asked(int argc, char **argv, int wanted_arguments, const char *usage) {
    if (argc < 1 + wanted_arguments) {
        fprintf(stderr, "usage: %s %s\n", argv[0], usage);
        return -1;
    }
    return atol(argv[1]);
}

#endif
