/* Drives the source-map lookup under AddressSanitizer: random strings of
 * base64 digits and separators (a few of them anything), each in a buffer
 * of its exact size, looked up at random sorted positions. Prints how many
 * lookups succeeded and how many were refused as malformed. */
#include "jitprof_native.h"
#include "fuzz_driver.h"

#include <stdio.h>
#include <stdlib.h>

static const char ALPHABET[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/,;;,";
/* Small deltas, mostly: strings a lookup accepts, to reach its answers. */
static const char SMALL[] = "AAAAAAAAAAAACCDgB,,;";

int main(int argc, char **argv) {
    long rounds = rounds_asked(argc, argv, 1, "ROUNDS");
    if (rounds < 0) return 2;
    uint64_t seed = FUZZ_SEED;
    uint64_t accepted = 0, refused = 0;
    for (long round = 0; round < rounds; round++) {
        uint64_t length = next_random(&seed) % (round % 2 ? 64 : 512);
        uint8_t *text = malloc(length ? length : 1);
        if (text == NULL) return 2;
        for (uint64_t index = 0; index < length; index++) {
            uint64_t pick = next_random(&seed);
            if (round % 2)
                text[index] = (uint8_t)SMALL[(pick >> 8) % (sizeof(SMALL) - 1)];
            else
                text[index] = pick % 64 == 0 ? (uint8_t)(pick >> 8) : (uint8_t)ALPHABET[(pick >> 8) % (sizeof(ALPHABET) - 1)];
        }
        uint64_t count = next_random(&seed) % 16;
        struct jp_generated *queries = malloc((count ? count : 1) * sizeof(*queries));
        struct jp_original *results = malloc((count ? count : 1) * sizeof(*results));
        if (queries == NULL || results == NULL) return 2;
        int32_t line = 0, column = 0;
        for (uint64_t index = 0; index < count; index++) {
            if (next_random(&seed) % 3 == 0) {
                line += 1 + (int32_t)(next_random(&seed) % 3);
                column = 0;
            }
            column += (int32_t)(next_random(&seed) % 40);
            queries[index] = (struct jp_generated){line, column};
        }
        uint32_t sources = (uint32_t)(next_random(&seed) % 4), names = (uint32_t)(next_random(&seed) % 4);
        if (round % 2) sources += 64, names += 64;
        int result = jp_source_map_lookup(text, length, sources, names, queries, count, results);
        if (result == JP_OK) {
            accepted++;
            for (uint64_t index = 0; index < count; index++)
                if (results[index].source >= (int32_t)sources || results[index].name >= (int32_t)names ||
                    results[index].generated_column > queries[index].column) {
                    fprintf(stderr, "round %ld: a result outside the map\n", round);
                    return 3;
                }
        } else if (result == JP_SOURCE_MAP_MALFORMED) {
            refused++;
        } else {
            fprintf(stderr, "round %ld: lookup returned %d\n", round, result);
            return 4;
        }
        free(text);
        free(queries);
        free(results);
    }
    printf("accepted %llu refused %llu\n", (unsigned long long)accepted, (unsigned long long)refused);
    return 0;
}
