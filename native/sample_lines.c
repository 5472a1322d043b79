/* The sample lines of a saved profile (.jitprof), split in C: a profile of
 * an hour holds hundreds of thousands of them, and reading each with a
 * regular expression in Python was most of `jitprof report`'s time. A line
 * in write_raw's own form,
 *
 *     [time,pid,tid,"comm",[id,...],"WALK_END"]   or   ...,"WALK_END",waited]
 *
 * gives its four numbers and, for its three texts (the command name, the
 * stack, the walk's end), the index of that text among the distinct ones
 * this reader has seen; each text is new once, and Python decodes and
 * checks it then. A line in any other form (or with a number out of range,
 * or once the reader holds as many texts as it may) is left to Python's
 * JSON path. The input is the file's text, anyone's: every length is
 * checked, nothing is read past the buffer. */
#include "jitprof_native.h"

#include <stdlib.h>
#include <string.h>

struct text_entry {
    uint64_t hash;
    uint8_t *bytes; /* a copy: the input buffer does not outlive the call */
    uint32_t length;
    uint32_t kind;
    uint32_t index;
    uint32_t used;
};

struct jp_sample_reader {
    struct text_entry *table;
    uint64_t capacity; /* slots, a power of two */
    uint64_t count;
    uint64_t bytes; /* held in copies */
    uint32_t next_index[JP_SAMPLE_TEXT_KINDS];
};

enum { MAX_TEXTS = 1 << 21, MAX_TEXT_BYTES = 256 << 20, FIRST_CAPACITY = 1024 };

int jp_sample_reader_new(struct jp_sample_reader **reader_out) {
    struct jp_sample_reader *reader = calloc(1, sizeof(*reader));
    if (reader == NULL) return JP_NO_MEMORY;
    reader->table = calloc(FIRST_CAPACITY, sizeof(*reader->table));
    if (reader->table == NULL) {
        free(reader);
        return JP_NO_MEMORY;
    }
    reader->capacity = FIRST_CAPACITY;
    *reader_out = reader;
    return JP_OK;
}

void jp_sample_reader_free(struct jp_sample_reader *reader) {
    if (reader == NULL) return;
    for (uint64_t slot = 0; slot < reader->capacity; slot++) free(reader->table[slot].bytes);
    free(reader->table);
    free(reader);
}

static uint64_t hash_of(uint32_t kind, const uint8_t *bytes, uint64_t length) {
    uint64_t hash = 0xcbf29ce484222325ULL ^ kind; /* FNV-1a */
    for (uint64_t at = 0; at < length; at++) {
        hash ^= bytes[at];
        hash *= 0x100000001b3ULL;
    }
    return hash;
}

static int grow(struct jp_sample_reader *reader) {
    uint64_t capacity = reader->capacity * 2;
    struct text_entry *table = calloc(capacity, sizeof(*table));
    if (table == NULL) return JP_NO_MEMORY;
    for (uint64_t slot = 0; slot < reader->capacity; slot++) {
        struct text_entry *entry = &reader->table[slot];
        if (!entry->used) continue;
        uint64_t at = entry->hash & (capacity - 1);
        while (table[at].used) at = (at + 1) & (capacity - 1);
        table[at] = *entry;
    }
    free(reader->table);
    reader->table = table;
    reader->capacity = capacity;
    return JP_OK;
}

/* The index of the text, or -1 when it is new and the reader holds all it
 * may (then the line goes to Python); *is_new says it was added now. */
static int64_t text_index(struct jp_sample_reader *reader, uint32_t kind, const uint8_t *bytes, uint64_t length, int *is_new) {
    *is_new = 0;
    uint64_t hash = hash_of(kind, bytes, length);
    uint64_t at = hash & (reader->capacity - 1);
    while (reader->table[at].used) {
        struct text_entry *entry = &reader->table[at];
        if (entry->hash == hash && entry->kind == kind && entry->length == length && memcmp(entry->bytes, bytes, length) == 0)
            return entry->index;
        at = (at + 1) & (reader->capacity - 1);
    }
    if (reader->count >= MAX_TEXTS || length > MAX_TEXT_BYTES - reader->bytes) return -1;
    if ((reader->count + 1) * 2 > reader->capacity) {
        if (grow(reader) != JP_OK) return -1;
        at = hash & (reader->capacity - 1);
        while (reader->table[at].used) at = (at + 1) & (reader->capacity - 1);
    }
    uint8_t *copy = malloc(length ? length : 1);
    if (copy == NULL) return -1;
    memcpy(copy, bytes, length);
    reader->table[at] = (struct text_entry){hash, copy, (uint32_t)length, kind, reader->next_index[kind]++, 1};
    reader->count++;
    reader->bytes += length;
    *is_new = 1;
    return reader->table[at].index;
}

/* A number as write_raw writes it (no sign, no leading zero) below limit. */
static int read_number(const uint8_t *line, uint64_t length, uint64_t *at, uint64_t limit, uint64_t *value) {
    uint64_t start = *at, result = 0;
    while (*at < length && line[*at] >= '0' && line[*at] <= '9') {
        uint64_t digit = (uint64_t)(line[*at] - '0');
        if (result > (limit - digit) / 10) return 0; /* result * 10 + digit >= limit, or would overflow */
        result = result * 10 + digit;
        if (result >= limit) return 0;
        (*at)++;
    }
    if (*at == start || (line[start] == '0' && *at - start > 1)) return 0;
    *value = result;
    return 1;
}

static int expect(const uint8_t *line, uint64_t length, uint64_t *at, uint8_t wanted) {
    if (*at >= length || line[*at] != wanted) return 0;
    (*at)++;
    return 1;
}

/* A JSON string's span, quotes included: no control characters, escapes kept whole. */
static int read_string(const uint8_t *line, uint64_t length, uint64_t *at) {
    if (!expect(line, length, at, '"')) return 0;
    while (*at < length) {
        uint8_t byte = line[*at];
        if (byte < 0x20) return 0;
        if (byte == '"') {
            (*at)++;
            return 1;
        }
        if (byte == '\\') {
            if (*at + 1 >= length || line[*at + 1] < 0x20) return 0;
            (*at)++;
        }
        (*at)++;
    }
    return 0;
}

struct span {
    uint64_t start, length;
};

/* One line in write_raw's form: its fields, or 0. */
static int split_line(const uint8_t *line, uint64_t length, uint64_t limit, uint64_t numbers[4], struct span texts[3]) {
    uint64_t at = 0;
    numbers[3] = 0;
    if (!expect(line, length, &at, '[')) return 0;
    for (int field = 0; field < 3; field++)
        if (!read_number(line, length, &at, limit, &numbers[field]) || !expect(line, length, &at, ',')) return 0;
    texts[0].start = at;
    if (!read_string(line, length, &at)) return 0;
    texts[0].length = at - texts[0].start;
    if (!expect(line, length, &at, ',')) return 0;
    texts[1].start = at;
    if (!expect(line, length, &at, '[')) return 0;
    while (at < length && ((line[at] >= '0' && line[at] <= '9') || line[at] == ',')) at++;
    if (!expect(line, length, &at, ']')) return 0;
    texts[1].length = at - texts[1].start;
    if (!expect(line, length, &at, ',') || !expect(line, length, &at, '"')) return 0;
    texts[2].start = at;
    while (at < length && ((line[at] >= 'A' && line[at] <= 'Z') || line[at] == '_')) at++;
    texts[2].length = at - texts[2].start;
    if (texts[2].length == 0 || !expect(line, length, &at, '"')) return 0;
    if (at < length && line[at] == ',') {
        at++;
        if (!read_number(line, length, &at, limit, &numbers[3]) || numbers[3] == 0) return 0;
    }
    return expect(line, length, &at, ']') && at == length;
}

int jp_sample_lines(struct jp_sample_reader *reader, const uint8_t *text, uint64_t length, uint64_t line_count,
                    uint64_t number_limit, struct jp_sample_columns *columns, struct jp_sample_text *news, uint64_t *news_count) {
    uint64_t at = 0, news_used = 0;
    for (uint64_t line = 0; line < line_count; line++) {
        if (at > length) {
            *news_count = news_used;
            return JP_SAMPLE_LINES_SHORT;
        }
        const uint8_t *start = text + at;
        const uint8_t *newline = memchr(start, '\n', length - at);
        uint64_t line_length = newline != NULL ? (uint64_t)(newline - start) : length - at;
        at += line_length + 1;
        uint64_t numbers[4];
        struct span spans[3];
        uint32_t indexes[3];
        int ok = split_line(start, line_length, number_limit, numbers, spans);
        for (uint32_t kind = 0; ok && kind < JP_SAMPLE_TEXT_KINDS; kind++) {
            int is_new;
            int64_t index = text_index(reader, kind, start + spans[kind].start, spans[kind].length, &is_new);
            if (index < 0) {
                ok = 0;
                break;
            }
            indexes[kind] = (uint32_t)index;
            if (is_new) /* at most three per line: the caller's array has room */
                news[news_used++] = (struct jp_sample_text){kind, (uint32_t)index, line,
                                                            (uint64_t)(start - text) + spans[kind].start, spans[kind].length};
        }
        columns->parsed[line] = (uint8_t)ok;
        if (!ok) continue;
        columns->time_ns[line] = numbers[0];
        columns->pid[line] = numbers[1];
        columns->tid[line] = numbers[2];
        columns->waited_ns[line] = numbers[3];
        columns->comm[line] = indexes[0];
        columns->stack[line] = indexes[1];
        columns->walk_end[line] = indexes[2];
    }
    *news_count = news_used;
    return at >= length ? JP_OK : JP_SAMPLE_LINES_LONG;
}
