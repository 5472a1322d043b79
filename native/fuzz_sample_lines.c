/* Drives the sample-line splitter under AddressSanitizer: blocks of lines
 * in write_raw's form, each byte of them sometimes replaced or cut short,
 * in a buffer of their exact size, through one reader (its table of texts
 * grows across rounds). Checks that every index and span it gives is in
 * range; prints how many lines were split and how many were left. */
#include "jitprof_native.h"
#include "fuzz_driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const SHAPES[] = {
    "[1,2,3,\"node\",[0,1,2],\"COMPLETE\"]",    "[18446744073709551615,2,3,\"a\\\"b\",[],\"COPY_TOO_SHORT\",77]",
    "[0,0,0,\"\\u00e9\",[9],\"READ_FAULT\",1]", "[12,34,56,\"x\",[1,,2],\"NO_MAPPING\"]",
    "[01,2,3,\"x\",[1],\"COMPLETE\"]",
};
static const char NOISE[] = "[],\"\\0123456789AZ_\n\x01\xff";

int main(int argc, char **argv) {
    long rounds = rounds_asked(argc, argv, 1, "ROUNDS");
    if (rounds < 0) return 2;
    uint64_t seed = FUZZ_SEED;
    uint64_t split = 0, left = 0;
    struct jp_sample_reader *reader;
    if (jp_sample_reader_new(&reader) != JP_OK) return 2;
    uint32_t seen[JP_SAMPLE_TEXT_KINDS] = {0};
    for (long round = 0; round < rounds; round++) {
        uint64_t line_count = 1 + next_random(&seed) % 8;
        char block[4096];
        uint64_t length = 0;
        for (uint64_t line = 0; line < line_count; line++) {
            const char *shape = SHAPES[next_random(&seed) % (sizeof(SHAPES) / sizeof(SHAPES[0]))];
            for (const char *at = shape; *at && length < sizeof(block) - 2; at++) {
                uint64_t pick = next_random(&seed);
                if (pick % 97 == 0) continue; /* a byte cut */
                block[length++] = pick % 89 == 0 ? NOISE[(pick >> 8) % (sizeof(NOISE) - 1)] : *at;
            }
            if (line + 1 < line_count) block[length++] = '\n';
        }
        uint8_t *text = malloc(length ? length : 1);
        struct jp_sample_columns columns = {
            malloc(line_count * 8), malloc(line_count * 8), malloc(line_count * 8), malloc(line_count * 8),
            malloc(line_count * 4), malloc(line_count * 4), malloc(line_count * 4), malloc(line_count),
        };
        struct jp_sample_text *news = malloc(3 * line_count * sizeof(*news));
        if (text == NULL || news == NULL || columns.parsed == NULL) return 2;
        memcpy(text, block, length);
        uint64_t news_count = 0;
        /* A noise byte may be a newline: the count of lines is then off, which the splitter says. */
        int result = jp_sample_lines(reader, text, length, line_count, 1ULL << 63, &columns, news, &news_count);
        if (result != JP_OK && result != JP_SAMPLE_LINES_SHORT && result != JP_SAMPLE_LINES_LONG) {
            fprintf(stderr, "round %ld: returned %d\n", round, result);
            return 3;
        }
        if (news_count > 3 * line_count) return 4;
        for (uint64_t index = 0; index < news_count; index++) {
            struct jp_sample_text *text_seen = &news[index];
            if (text_seen->kind >= JP_SAMPLE_TEXT_KINDS || text_seen->index != seen[text_seen->kind] ||
                text_seen->line >= line_count || text_seen->offset + text_seen->length > length) {
                fprintf(stderr, "round %ld: a new text out of range\n", round);
                return 5;
            }
            seen[text_seen->kind]++;
        }
        for (uint64_t line = 0; result != JP_SAMPLE_LINES_SHORT && line < line_count; line++) {
            if (!columns.parsed[line]) {
                left++;
                continue;
            }
            split++;
            if (columns.comm[line] >= seen[0] || columns.stack[line] >= seen[1] || columns.walk_end[line] >= seen[2] ||
                columns.time_ns[line] >= 1ULL << 63) {
                fprintf(stderr, "round %ld: an index or number out of range\n", round);
                return 6;
            }
        }
        free(text);
        free(news);
        free(columns.time_ns), free(columns.pid), free(columns.tid), free(columns.waited_ns);
        free(columns.comm), free(columns.stack), free(columns.walk_end), free(columns.parsed);
    }
    jp_sample_reader_free(reader);
    printf("split %llu left %llu\n", (unsigned long long)split, (unsigned long long)left);
    return 0;
}
