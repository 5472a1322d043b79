// V8: the request a sample serves. A node thread's current AsyncContextFrame
// (AsyncLocalStorage's stores, node 24 on) is read at the sample, and in it
// the OpenTelemetry context manager's store down to the active span's trace
// and span ids: the objects move in V8's heap, so they are read here, at
// the instant, or not at all. User space names the span from its address
// only where the span still holds the ids read here.
#pragma once

BPF_HASH(v8_context_settings, u32, struct v8_context_config, FOLLOWED_ENTRIES);

#define V8_TAG_MASK 7
#define V8_HEAP_OBJECT_TAG 1
#define V8_JS_MAP_TABLE_AT 24   /* JSCollection: map, properties, elements, table */
#define V8_ARRAY_DATA_AT 16     /* a FixedArray's first element, after its map and length */
#define V8_PROPERTIES_AT 8      /* a JSObject's out-of-object properties */
#define V8_TABLE_HEADER_WORDS 3 /* an OrderedHashMap: elements, deleted, buckets, then the buckets */
#define V8_TABLE_ENTRY_WORDS 3  /* key, value, chain */
#define V8_MAX_BUCKETS 1024
#define V8_SMALL_BUCKETS 2
#define V8_SMALL_TABLE_WORDS (V8_TABLE_HEADER_WORDS + V8_SMALL_BUCKETS + V8_CONTEXT_ENTRIES * V8_TABLE_ENTRY_WORDS)
#define V8_WINDOW_WORDS 8 /* of an object read at once: its map and first fields */
#define V8_USER_END (1ULL << 47)

static __always_inline int v8_is_object(u64 word) {
    return (word & V8_TAG_MASK) == V8_HEAP_OBJECT_TAG && word > 0xffff && word < V8_USER_END;
}

static __always_inline u64 v8_word(u64 object, u32 offset) {
    u64 word = 0;
    if (bpf_probe_read_user(&word, sizeof(word), (void *)(object - V8_HEAP_OBJECT_TAG + offset)) != 0) return 0;
    return word;
}

// An object's map (0: not an object, or unreadable).
static __always_inline u64 v8_map_of(u64 object) {
    if (!v8_is_object(object)) return 0;
    u64 map = v8_word(object, 0);
    return v8_is_object(map) ? map : 0;
}

#define V8_NO_TYPE 0xffff

// A map's instance type (V8_NO_TYPE: not an object, or unreadable).
static __always_inline u16 v8_type_of(u64 map, u8 map_type_at) {
    u16 type = V8_NO_TYPE;
    if (!v8_is_object(map)) return V8_NO_TYPE;
    if (bpf_probe_read_user(&type, sizeof(type), (void *)(map - V8_HEAP_OBJECT_TAG + map_type_at)) != 0) return V8_NO_TYPE;
    return type;
}

// Read a JSMap's table, up to V8_CONTEXT_ENTRIES entries, into entries:
// how many it has (live and deleted), 0 if it is none or too big.
static __always_inline u32 v8_table_read(const struct v8_context_config *config, u64 js_map, u64 *entries) {
    if (!v8_is_object(js_map)) return 0;
    u64 head[4]; // map, properties, elements, table: one read
    if (bpf_probe_read_user(head, sizeof(head), (void *)(js_map - V8_HEAP_OBJECT_TAG)) != 0) return 0;
    u64 map = head[0], table = head[V8_JS_MAP_TABLE_AT / 8];
    if (v8_type_of(map, config->map_type_at) != config->js_map_type || !v8_is_object(table)) return 0;
    u64 start = table - V8_HEAP_OBJECT_TAG + V8_ARRAY_DATA_AT;
    // A small table (2 buckets: up to 4 entries before it grows) in one read,
    // its header, buckets and entries; else the header, then the entries.
    if (bpf_probe_read_user(entries, V8_SMALL_TABLE_WORDS * 8, (void *)start) == 0 && (entries[2] >> 32) == V8_SMALL_BUCKETS) {
        u64 used = (entries[0] >> 32) + (entries[1] >> 32);
        if (used == 0 || used > V8_CONTEXT_ENTRIES) return 0;
#pragma unroll
        for (int word = 0; word < V8_CONTEXT_ENTRIES * V8_TABLE_ENTRY_WORDS; word++)
            entries[word] = entries[word + V8_TABLE_HEADER_WORDS + V8_SMALL_BUCKETS];
        return used;
    }
    u64 header[V8_TABLE_HEADER_WORDS];
    if (bpf_probe_read_user(header, sizeof(header), (void *)start) != 0) return 0;
    // Smis: the value in the upper half.
    u64 used = (header[0] >> 32) + (header[1] >> 32);
    u64 buckets = header[2] >> 32;
    if (used == 0 || used > V8_CONTEXT_ENTRIES || buckets > V8_MAX_BUCKETS) return 0;
    u64 first = start + (V8_TABLE_HEADER_WORDS + buckets) * 8;
    u32 bytes = (u32)used * V8_TABLE_ENTRY_WORDS * 8;
    if (bytes > V8_CONTEXT_ENTRIES * V8_TABLE_ENTRY_WORDS * 8) return 0;
    if (bpf_probe_read_user(entries, bytes, (void *)first) != 0) return 0;
    return used;
}

// The value a table read by v8_table_read holds for key (a tagged pointer
// compared as is; 0: none).
static __always_inline u64 v8_table_find(const u64 *entries, u32 used, u64 key) {
    u64 found = 0;
    if (key == 0) return 0;
#pragma unroll
    for (int entry = 0; entry < V8_CONTEXT_ENTRIES; entry++) {
        if (found == 0 && entry < used && entries[entry * V8_TABLE_ENTRY_WORDS] == key)
            found = entries[entry * V8_TABLE_ENTRY_WORDS + 1];
    }
    return found;
}

// The field at offset of an object: in it, or (V8_OUT_OF_OBJECT) in its properties array.
static __always_inline u64 v8_slot(u64 object, u16 offset) {
    if (!(offset & V8_OUT_OF_OBJECT)) return v8_word(object, offset);
    u64 properties = v8_word(object, V8_PROPERTIES_AT);
    if (!v8_is_object(properties)) return 0;
    return v8_word(properties, V8_ARRAY_DATA_AT + (u32)(offset & ~V8_OUT_OF_OBJECT) * 8);
}

// The field at offset of an object whose first words window holds (a word
// of the window, read again only where it is not: 0 there, or past it).
static __always_inline u64 v8_window_slot(u64 object, u16 offset, const u64 *window) {
    if (!(offset & V8_OUT_OF_OBJECT) && offset < V8_WINDOW_WORDS * 8) {
        u64 word = window[(offset >> 3) & (V8_WINDOW_WORDS - 1)];
        if (word != 0) return word;
    }
    if (!(offset & V8_OUT_OF_OBJECT)) return v8_word(object, offset);
    u64 properties = window[V8_PROPERTIES_AT / 8];
    if (!v8_is_object(properties)) properties = v8_word(object, V8_PROPERTIES_AT);
    if (!v8_is_object(properties)) return 0;
    return v8_word(properties, V8_ARRAY_DATA_AT + (u32)(offset & ~V8_OUT_OF_OBJECT) * 8);
}

// A field of object at the offset its map has (one of maps); which map
// matched in *which (-1: none; *map_out the object's map). The object's
// first V8_WINDOW_WORDS words are read at once into window: its map and the
// fields a reader takes next.
static __always_inline u64 v8_field_by_map(u64 object, const u64 *maps, const u16 *offsets, int *which, u64 *map_out,
                                           u64 *window) {
    *map_out = 0;
    *which = -1;
    if (!v8_is_object(object)) return 0;
    if (bpf_probe_read_user(window, V8_WINDOW_WORDS * 8, (void *)(object - V8_HEAP_OBJECT_TAG)) != 0) {
        // Near the end of its memory: the map alone.
        window[0] = v8_word(object, 0);
#pragma unroll
        for (int word = 1; word < V8_WINDOW_WORDS; word++) window[word] = 0;
    }
    u64 map = window[0];
    if (!v8_is_object(map)) return 0;
    *map_out = map;
#pragma unroll
    for (int known = 0; known < V8_CONTEXT_MAPS; known++) {
        if (maps[known] != map) continue;
        *which = known;
        return v8_window_slot(object, offsets[known], window);
    }
    return 0;
}

// A string's map and length: its first 16 bytes in one read (V8 keeps the
// length at 12); -1 if it is not an object.
static __always_inline int v8_string_head(const struct v8_context_config *config, u64 string, u64 *map, u32 *length) {
    u64 head[2];
    if (!v8_is_object(string) || bpf_probe_read_user(head, sizeof(head), (void *)(string - V8_HEAP_OBJECT_TAG)) != 0) return -1;
    *map = head[0];
    if (!v8_is_object(*map)) return -1;
    if (config->string_length_at == 12) {
        *length = (u32)(head[1] >> 32);
        return 0;
    }
    return bpf_probe_read_user(length, sizeof(*length), (void *)(string - V8_HEAP_OBJECT_TAG + config->string_length_at)) != 0
               ? -1
               : 0;
}

// Copy a string's first characters (up to max; one-byte, sequential, a
// slice of a sequential one (an id parsed from a traceparent header), or a
// thin string forwarding to one) into out; its length (-1: not such a
// string). With `fixed` (max a constant), its head and first characters come
// in one read (V8_STRING_READ_BYTES into buffer, 6 words): a sequential
// string, the common case, is copied from there whole (past its length too:
// user space reads its length only); a string of another kind goes on from
// the head that read holds, and one whose read fails (it ends a page) is
// read as it is without.
#define V8_STRING_READ_BYTES 48
#define V8_STRING_JOINED (-2)      /* a ConsString: its halves to be read */
#define V8_STRING_JOINED_READ (-3) /* a ConsString whose halves the one read holds (buffer[2], buffer[3]) */
static __always_inline s64 v8_copy_flat(const struct v8_context_config *config, u64 string, char *out, u32 max, u64 *buffer,
                                        const int fixed) {
    if (!v8_is_object(string)) return -1;
    u64 map = 0;
    u32 length = 0;
    int whole = fixed && config->string_length_at == 12 && config->string_chars_at == 16 &&
                bpf_probe_read_user(buffer, V8_STRING_READ_BYTES, (void *)(string - V8_HEAP_OBJECT_TAG)) == 0;
    if (whole) {
        map = buffer[0];
        length = (u32)(buffer[1] >> 32);
        if (!v8_is_object(map)) return -1;
    } else if (v8_string_head(config, string, &map, &length) != 0) {
        return -1;
    }
    u16 type = v8_type_of(map, config->map_type_at);
    if (type >= config->first_nonstring_type) return -1;
    if (config->cons_one_byte_tag != 0 && (type & config->string_tag_mask) == config->cons_one_byte_tag)
        return whole && config->cons_first_at == 16 ? V8_STRING_JOINED_READ : V8_STRING_JOINED;
    if (whole && (type & config->string_tag_mask) == config->seq_one_byte_tag) {
        _Static_assert(V8_STRING_READ_BYTES - 16 >= V8_SPAN_NAME_CHARS && V8_SPAN_NAME_CHARS >= TRACE_ID_CHARS,
                       "a read holds the characters");
        __builtin_memcpy(out, (char *)&buffer[2], max);
        return length;
    }
    if ((type & config->string_tag_mask) == config->thin_one_byte_tag) {
        string = v8_word(string, config->thin_actual_at);
        if (v8_string_head(config, string, &map, &length) != 0) return -1;
        type = v8_type_of(map, config->map_type_at);
        if (type >= config->first_nonstring_type) return -1;
        whole = 0; // the buffer holds the thin string's head, not this one's
    }
    u64 chars = string - V8_HEAP_OBJECT_TAG + config->string_chars_at;
    if ((type & config->string_tag_mask) == config->sliced_one_byte_tag) {
        // A slice's parent and offset are in the head the one read holds.
        int in_buffer =
            whole && config->sliced_parent_at < V8_STRING_READ_BYTES && config->sliced_offset_at < V8_STRING_READ_BYTES;
        u64 parent = in_buffer ? buffer[(config->sliced_parent_at / 8) & 7] : v8_word(string, config->sliced_parent_at);
        u64 offset = (in_buffer ? buffer[(config->sliced_offset_at / 8) & 7] : v8_word(string, config->sliced_offset_at)) >> 32;
        u64 parent_map = 0;
        u32 parent_length = 0;
        if (v8_string_head(config, parent, &parent_map, &parent_length) != 0) return -1;
        u16 parent_type = v8_type_of(parent_map, config->map_type_at);
        if (parent_type >= config->first_nonstring_type || (parent_type & config->string_tag_mask) != config->seq_one_byte_tag)
            return -1;
        if (offset + length > parent_length) return -1;
        chars = parent - V8_HEAP_OBJECT_TAG + config->string_chars_at + offset;
    } else if ((type & config->string_tag_mask) != config->seq_one_byte_tag) {
        return -1;
    }
    u32 copied = length < max ? length : max;
    if (copied > V8_ROUTE_CHARS + TRACE_ID_CHARS) return -1;
    if (copied != 0 && bpf_probe_read_user(out, copied, (void *)chars) != 0) return -1;
    return length;
}

// A name a program joined (a template literal's `${method} ${route}`, 13
// characters or more) is a ConsString of two halves: each copied as a flat
// string, one after the other. Deeper joins are not read here. A flat one
// costs no more than v8_copy_flat: its head is read once, by it.
static __always_inline s64 v8_copy_joined(const struct v8_context_config *config, u64 string, char *out, const u32 max,
                                          u64 *buffer) {
    s64 whole = v8_copy_flat(config, string, out, max, buffer, 1);
    if (whole != V8_STRING_JOINED && whole != V8_STRING_JOINED_READ) return whole;
    u64 halves[2]; /* first, second: side by side */
    if (whole == V8_STRING_JOINED_READ) {
        halves[0] = buffer[2];
        halves[1] = buffer[3];
    } else if (bpf_probe_read_user(halves, sizeof(halves), (void *)(string - V8_HEAP_OBJECT_TAG + config->cons_first_at)) != 0) {
        return -1;
    }
    s64 first = v8_copy_flat(config, halves[0], out, max, buffer, 1);
    if (first < 0) return -1;
    if (first < max) {
        u32 at = (u32)first & (V8_SPAN_NAME_CHARS - 1);
        s64 second = v8_copy_flat(config, halves[1], out + at, max - at, buffer, 0);
        if (second < 0) return -1;
        return first + second;
    }
    return first; /* the first half fills it: the length is at least this */
}

static __always_inline int v8_nibble(char digit) {
    if (digit >= '0' && digit <= '9') return digit - '0';
    if (digit >= 'a' && digit <= 'f') return digit - 'a' + 10;
    return -1;
}

// An id string of exactly 2 * bytes lowercase hex digits, as bytes.
static __always_inline int v8_read_hex_id(const struct v8_context_config *config, u64 string, u8 *out, const u32 bytes,
                                          char *digits, u64 *buffer) {
    if (v8_copy_flat(config, string, digits, bytes * 2, buffer, 1) != bytes * 2) return -1;
    int bad = 0;
#pragma unroll
    for (int index = 0; index < TRACE_ID_CHARS / 2; index++) {
        if (index < bytes) {
            int high = v8_nibble(digits[2 * index]), low = v8_nibble(digits[2 * index + 1]);
            bad |= high | low;
            out[index] = (u8)((high << 4) | (low & 0xf));
        }
    }
    return bad < 0 ? -1 : 0;
}

// A labelled store's field: a Smi, a HeapNumber's double, or a one-byte
// sequential string's first V8_STORE_TEXT characters.
static __always_inline void v8_copy_field(const struct v8_context_config *config, u64 value, struct v8_store_field *field) {
    field->kind = V8_FIELD_NONE;
    if ((value & 1) == 0) { // a Smi
        s32 number = (s32)(value >> 32);
        __builtin_memcpy(field->text, &number, sizeof(number));
        field->kind = V8_FIELD_SMI;
        return;
    }
    u64 map = v8_map_of(value);
    if (map == 0) return;
    u16 type = v8_type_of(map, config->map_type_at);
    if (type == config->heap_number_type) {
        if (bpf_probe_read_user(field->text, 8, (void *)(value - V8_HEAP_OBJECT_TAG + 8)) == 0) field->kind = V8_FIELD_DOUBLE;
        return;
    }
    if (type >= config->first_nonstring_type || (type & config->string_tag_mask) != config->seq_one_byte_tag) return;
    u32 length = 0;
    if (bpf_probe_read_user(&length, sizeof(length), (void *)(value - V8_HEAP_OBJECT_TAG + config->string_length_at)) != 0)
        return;
    u32 copied = length < V8_STORE_TEXT ? length : V8_STORE_TEXT;
    if (copied == 0 ||
        bpf_probe_read_user(field->text, copied & 0x1f, (void *)(value - V8_HEAP_OBJECT_TAG + config->string_chars_at)) == 0) {
        field->length = length > 255 ? 255 : length;
        field->kind = V8_FIELD_STRING;
    }
}

// --label-store: the named store's fields, by its map's slots.
static __always_inline void read_label_store(const struct v8_context_config *config, u64 store,
                                             struct v8_context_record *record) {
    record->store_map = v8_map_of(store);
#pragma unroll
    for (int known = 0; known < V8_CONTEXT_MAPS; known++) {
        if (config->label_store_maps[known] != record->store_map || record->store_map == 0) continue;
#pragma unroll
        for (int index = 0; index < V8_STORE_FIELDS; index++) {
            u16 offset = config->label_store_at[known][index];
            if (offset != 0) v8_copy_field(config, v8_slot(store, offset), &record->store_fields[index]);
        }
    }
}

// A thread's V8 isolate as read at its sample: where from (the TLS offset
// of the config that read it) and its address (0: not read). The async
// callers' reader takes it from here.
struct v8_isolate_read {
    s64 tls;
    u64 address;
};

// Read the current thread's async context into ev (context_size 0: none).
// entries: scratch (64 words) for a JSMap's table (its first 29 words), then objects' windows.
static __always_inline void read_v8_context(struct sample_event *ev, u64 *entries, struct v8_isolate_read *isolate_read) {
#ifdef TASK_FSBASE_OFFSET
    u32 tgid = ev->pid;
    const struct v8_context_config *config = v8_context_settings.lookup(&tgid);
    if (!config) return;
    u64 thread_pointer = 0;
    bpf_probe_read_kernel(&thread_pointer, sizeof(thread_pointer), (void *)(bpf_get_current_task() + TASK_FSBASE_OFFSET));
    if (thread_pointer == 0) return;
    u64 isolate = 0;
    if (bpf_probe_read_user(&isolate, sizeof(isolate), (void *)(thread_pointer + config->isolate_tls)) != 0 || isolate == 0)
        return;
    isolate_read->tls = config->isolate_tls;
    isolate_read->address = isolate;
    u64 frame = 0;
    if (bpf_probe_read_user(&frame, sizeof(frame), (void *)(isolate + config->cped_offset)) != 0 || !v8_is_object(frame)) return;
    struct v8_context_record *record = (struct v8_context_record *)ev->context;
    _Static_assert(sizeof(struct v8_context_record) <= THREAD_CONTEXT_BYTES, "a record fits the event");
    ev->context_kind = CONTEXT_V8;
    ev->context_size = sizeof(struct v8_context_record);
    record->frame = frame;
    record->object = frame;
    record->reached = V8_REACHED_FRAME;
    record->route_length = 0;
    record->span_name_length = 0;
    record->store_map = 0;
#pragma unroll
    for (int index = 0; index < V8_STORE_FIELDS; index++) record->store_fields[index].kind = V8_FIELD_NONE;
    u32 used = v8_table_read(config, frame, entries);
    if (config->label_store_key != 0) {
        u64 labelled = v8_table_find(entries, used, config->label_store_key);
        if (labelled != 0) read_label_store(config, labelled, record);
    }
    u64 store = v8_table_find(entries, used, config->store_key);
    if (store == 0) return;
    record->reached = V8_REACHED_STORE;
    record->object = store;
    int which = -1;
    u64 map = 0;
    u64 context = v8_field_by_map(store, config->context_maps, config->context_map_at, &which, &map, entries + 32);
    if (which < 0) return;
    record->reached = V8_REACHED_CONTEXT;
    u64 span = v8_table_find(entries, v8_table_read(config, context, entries), config->span_key);
    if (span == 0) return;
    record->reached = V8_REACHED_SPAN;
    record->object = span;
    // Past the context, a map not known is sent in place of the frame:
    // user space learns a span's, its span context's and its attributes'
    // maps from the maps themselves (old objects, still there when it reads).
    u64 *span_window = entries + 40;
    u64 span_context = v8_field_by_map(span, config->span_maps, config->span_context_at, &which, &map, span_window);
    if (which < 0 || which >= V8_CONTEXT_MAPS) {
        record->frame = map;
        return;
    }
    int span_map_index = which;
    record->object = span_context;
    u64 *context_window = entries + 48;
    u64 trace_id = v8_field_by_map(span_context, config->span_context_maps, config->trace_id_at, &which, &map, context_window);
    if (which < 0 || which >= V8_CONTEXT_MAPS) {
        record->frame = map;
        return;
    }
    u64 span_id = v8_window_slot(span_context, config->span_id_at[which], context_window);
    // The tables are read: their scratch holds the ids' digits, then each string's read.
    char *digits = (char *)entries;
    u64 *string_buffer = entries + 8;
    if (v8_read_hex_id(config, trace_id, record->trace_id, TRACE_ID_CHARS / 2, digits, string_buffer) != 0 ||
        v8_read_hex_id(config, span_id, record->span_id, SPAN_ID_CHARS / 2, digits, string_buffer) != 0)
        return;
    record->reached = V8_REACHED_IDS;
    record->object = span;
    // Its name, read here: young spans move within milliseconds.
    u16 name_at = config->span_name_at[span_map_index];
    if (name_at != 0) {
        s64 name_length = v8_copy_joined(config, v8_window_slot(span, name_at, span_window), record->span_name,
                                         V8_SPAN_NAME_CHARS, string_buffer);
        if (name_length > 0) record->span_name_length = name_length > 254 ? 254 : name_length;
    }
    // The span's http.route, where its attributes' map is known.
    record->route_length = V8_ROUTE_UNKNOWN;
    u16 attributes_at = config->attributes_at[span_map_index];
    if (attributes_at == 0) return;
    u64 attributes = v8_window_slot(span, attributes_at, span_window);
    u64 route = v8_field_by_map(attributes, config->attributes_maps, config->route_at, &which, &map, entries + 56);
    if (which < 0 || which >= V8_CONTEXT_MAPS) {
        record->frame = map;
        return;
    }
    record->route_length = 0;
    if (config->route_at[which] == 0) return; // attributes without a route
    s64 length = v8_copy_joined(config, route, record->route, V8_ROUTE_CHARS, string_buffer);
    if (length > 0) record->route_length = length > 254 ? 254 : length;
#endif
}

// Is the event's V8 context to be read (its process's layouts known, and no
// OpenTelemetry thread context read in its place)?
static __always_inline int wants_v8_context(struct sample_event *ev) {
#ifdef TASK_FSBASE_OFFSET
    u32 tgid = ev->pid;
    return ev->context_size == 0 && v8_context_settings.lookup(&tgid) != NULL;
#else
    return 0;
#endif
}

// Was the read of a context cut short while user space learns its process?
// Then its sample wakes the reader of the ring at once: the frame it names
// is learned from before a scavenge moves it.
static __always_inline u64 v8_context_wakeup(struct sample_event *ev) {
    if (ev->context_kind != CONTEXT_V8) return BPF_RB_NO_WAKEUP;
    struct v8_context_record *record = (struct v8_context_record *)ev->context;
    if (record->reached >= V8_REACHED_SPAN) return BPF_RB_NO_WAKEUP; // what it lacks is learned from a map
    u32 tgid = ev->pid;
    const struct v8_context_config *config = v8_context_settings.lookup(&tgid);
    if (!config || !config->learning) return BPF_RB_NO_WAKEUP;
    ev->context_kind |= CONTEXT_WAKE;
    return BPF_RB_FORCE_WAKEUP;
}
