/* Source-map positions (ECMA-426): the original position of each of a
 * sorted list of generated positions, found in one pass over a map's
 * `mappings` string. The string is a target's file, maybe 50 MB: it is
 * never decoded whole into memory, every value is checked (digits, 32-bit
 * range, source and name indices within the map's arrays), and a malformed
 * string fails the whole lookup rather than giving positions from a
 * half-read map. */
#include "jitprof_native.h"

#include <stddef.h>

static int base64_digit(uint8_t character) {
    if (character >= 'A' && character <= 'Z') return character - 'A';
    if (character >= 'a' && character <= 'z') return character - 'a' + 26;
    if (character >= '0' && character <= '9') return character - '0' + 52;
    if (character == '+') return 62;
    if (character == '/') return 63;
    return -1;
}

/* One base64 VLQ value at *at, which it advances; 0 if malformed. */
static int read_vlq(const uint8_t *text, uint64_t length, uint64_t *at, int64_t *value) {
    uint64_t magnitude = 0;
    unsigned shift = 0;
    for (;;) {
        if (*at >= length) return 0;
        int digit = base64_digit(text[*at]);
        if (digit < 0) return 0;
        (*at)++;
        if (shift > 30) return 0; /* more than 32 bits: no position is that far */
        magnitude |= (uint64_t)(digit & 31) << shift;
        shift += 5;
        if (!(digit & 32)) break;
    }
    int64_t number = (int64_t)(magnitude >> 1);
    *value = (magnitude & 1) ? -number : number;
    return 1;
}

/* Adds delta to *field, which must stay within [0, limit). */
static int add_checked(int64_t *field, int64_t delta, int64_t limit) {
    int64_t sum = *field + delta;
    if (sum < 0 || sum >= limit) return 0;
    *field = sum;
    return 1;
}

struct best {
    int valid;
    int32_t source, line, column, name, generated_column;
};

static void answer(struct jp_original *result, const struct best *best) {
    if (best->valid) {
        result->source = best->source;
        result->line = best->line;
        result->column = best->column;
        result->name = best->name;
        result->generated_column = best->generated_column;
    } else {
        result->source = result->line = result->column = result->name = result->generated_column = -1;
    }
}

int jp_source_map_lookup(const uint8_t *mappings, uint64_t length, uint32_t source_count, uint32_t name_count,
                         const struct jp_generated *queries, uint64_t query_count, struct jp_original *results) {
    for (uint64_t index = 1; index < query_count; index++) {
        const struct jp_generated *before = &queries[index - 1], *after = &queries[index];
        if (after->line < before->line || (after->line == before->line && after->column < before->column))
            return JP_SOURCE_MAP_UNSORTED;
    }
    const struct best none = {0, -1, -1, -1, -1, -1};
    struct best best = none;
    int64_t line = 0, column = 0, source = 0, original_line = 0, original_column = 0, name = 0;
    uint64_t next = 0, at = 0;
    for (;;) {
        /* The queries on lines before this one: the line ended (or had nothing). */
        while (next < query_count && queries[next].line < line) answer(&results[next++], &none);
        if (at >= length) break;
        uint8_t character = mappings[at];
        if (character == ';') {
            while (next < query_count && queries[next].line == line) answer(&results[next++], &best);
            best = none;
            line++;
            if (line > INT32_MAX) return JP_SOURCE_MAP_MALFORMED;
            column = 0;
            at++;
            continue;
        }
        if (character == ',') {
            at++;
            continue;
        }
        int64_t delta;
        if (!read_vlq(mappings, length, &at, &delta) || !add_checked(&column, delta, (int64_t)INT32_MAX + 1))
            return JP_SOURCE_MAP_MALFORMED;
        struct best segment = none;
        if (at < length && mappings[at] != ',' && mappings[at] != ';') {
            /* Four more: the source, its line and column; maybe a fifth, the name. */
            if (!read_vlq(mappings, length, &at, &delta) || !add_checked(&source, delta, source_count) ||
                !read_vlq(mappings, length, &at, &delta) || !add_checked(&original_line, delta, (int64_t)INT32_MAX + 1) ||
                !read_vlq(mappings, length, &at, &delta) || !add_checked(&original_column, delta, (int64_t)INT32_MAX + 1))
                return JP_SOURCE_MAP_MALFORMED;
            segment = (struct best){1, (int32_t)source, (int32_t)original_line, (int32_t)original_column, -1, (int32_t)column};
            if (at < length && mappings[at] != ',' && mappings[at] != ';') {
                if (!read_vlq(mappings, length, &at, &delta) || !add_checked(&name, delta, name_count))
                    return JP_SOURCE_MAP_MALFORMED;
                segment.name = (int32_t)name;
            }
            if (at < length && mappings[at] != ',' && mappings[at] != ';') return JP_SOURCE_MAP_MALFORMED;
        }
        /* Queries before this segment's column take the one before it. */
        while (next < query_count && queries[next].line == line && queries[next].column < column) answer(&results[next++], &best);
        best = segment; /* a segment of one field ends the previous one's range: unmapped */
    }
    while (next < query_count && queries[next].line == line) answer(&results[next++], &best);
    while (next < query_count) answer(&results[next++], &none);
    return JP_OK;
}
