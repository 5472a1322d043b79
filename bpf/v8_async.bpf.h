// V8: the async functions awaiting the one a sample runs. Read when the walk
// ends, at the instant: the promises, reactions and generators are young
// objects a scavenge moves, so they are read here or not at all. The chain
// is V8's own (CaptureAsyncStackTrace): the isolate's current microtask, the
// promise the running async function settles, and from each pending promise
// its one reaction to the next. Each object's instance type is checked and
// each closure is known by the builtin its shared info names; anything else
// ends the chain: a chain is cut, never guessed.
#pragma once

BPF_HASH(v8_async_settings, u32, struct v8_async_config, FOLLOWED_ENTRIES);

#define ASYNC_HOPS_PER_CALL 4 /* promises followed per tail call of the reader */
#define ASYNC_MAX_HOPS 96     /* promises followed in all (plain .then links name no frame) */
#define V8_ASYNC_WINDOW 8     /* words of an object taken at once */
#define V8_GENERATOR_WINDOW 16
#define ASYNC_AWAIT_BEFORE 192    /* bytes read before a reaction or microtask: the await's context and closures */
#define ASYNC_GENERATOR_BEFORE 64 /* before a generator: its promise */
#define ASYNC_AWAIT 0             /* the reads around objects (async_near_of) */
#define ASYNC_GENERATOR 1
_Static_assert(V8_GENERATOR_WINDOW <= ASYNC_SPARE_WORDS &&
                   ASYNC_GENERATOR_BEFORE + V8_GENERATOR_WINDOW * 8 <= ASYNC_NEAR_WORDS * 8 &&
                   ASYNC_AWAIT_BEFORE + V8_ASYNC_WINDOW * 8 <= ASYNC_NEAR_WORDS * 8,
               "an object read around is wholly inside the read");

// A map's instance type. The same few maps (a promise's, a reaction's, an
// await closure's, an async function object's) come back at every hop of a
// chain: each is read once a sample, kept in its walk (a map's type does not
// change, and maps do not move in the microseconds a sample's read takes).
static __always_inline u16 async_type_of(const struct v8_async_config *config, struct v8_async_walk *walk, u64 map) {
    if (!v8_is_object(map)) return V8_NO_TYPE;
#pragma unroll
    for (int index = 0; index < ASYNC_KNOWN_MAPS; index++) {
        if (walk->maps[index] == map) return walk->types[index];
    }
    u16 type = v8_type_of(map, config->map_type_at);
    if (type == V8_NO_TYPE) return type;
    u8 slot = walk->next_map & (ASYNC_KNOWN_MAPS - 1);
    walk->maps[slot] = map;
    walk->types[slot] = type;
    walk->next_map = slot + 1;
    return type;
}

// Read ASYNC_NEAR_WORDS words from `before` bytes before object, or where
// those are not all mapped (an object near a page's edge), its first
// `needed` bytes only (none kept when unreadable).
static __always_inline void async_near_read(struct v8_async_near *near, u64 object, u32 before, const u32 needed) {
    near->start = 0;
    if (!v8_is_object(object)) return;
    u64 start = object - V8_HEAP_OBJECT_TAG - before;
    near->length = ASYNC_NEAR_WORDS * 8;
    if (before == 0 || bpf_probe_read_user(near->words, ASYNC_NEAR_WORDS * 8, (void *)start) != 0) {
        start = object - V8_HEAP_OBJECT_TAG;
        near->length = needed;
        if (bpf_probe_read_user(near->words, needed, (void *)start) != 0) return;
    }
    near->start = start;
}

// Where the bytes at address were read around, if they were (-1: not).
static __always_inline int async_near_index(const struct v8_async_near *near, u64 address, u32 bytes) {
    if (near->start == 0 || address < near->start || address + bytes > near->start + near->length) return -1;
    if (((address - near->start) & 7) != 0) return -1;
    return (address - near->start) / 8;
}

// An object's first `words` words (its map first), from the read around it,
// or read now (NULL: unreadable). Every value wanted from them is taken
// before the next read into the same place.
static __always_inline u64 *async_words(struct v8_async_near *near, u64 object, const u32 words) {
    if (!v8_is_object(object)) return NULL;
    int index = async_near_index(near, object - V8_HEAP_OBJECT_TAG, words * 8);
    if (index < 0) {
        async_near_read(near, object, 0, words * 8);
        if (near->start == 0) return NULL;
        index = 0;
    }
    return &near->words[index & (ASYNC_NEAR_WORDS - 1)];
}

// One word of an object, from either read around objects where it is there.
static __always_inline u64 async_word(struct walk_scratch *scratch, u64 object, u32 offset) {
    if (!v8_is_object(object)) return 0;
    u64 address = object - V8_HEAP_OBJECT_TAG + offset;
#pragma unroll
    for (int which = 0; which < 2; which++) {
        struct v8_async_near *near = async_near_of(scratch, which);
        int index = async_near_index(near, address, 8);
        if (index >= 0) return near->words[index & (ASYNC_NEAR_WORDS - 1)];
    }
    return v8_word(object, offset);
}

static __always_inline u16 async_object_type(const struct v8_async_config *config, struct walk_scratch *scratch,
                                             struct v8_async_walk *walk, u64 object) {
    return async_type_of(config, walk, async_word(scratch, object, 0));
}

static __always_inline u64 async_slot(const u64 *window, u8 offset) {
    return window[(offset / 8) & (V8_ASYNC_WINDOW - 1)];
}

static __always_inline u64 generator_slot(const u64 *window, u8 offset) {
    return window[(offset / 8) & (V8_GENERATOR_WINDOW - 1)];
}

// The role of a shared info's builtin (0: not one of the chain's).
static __always_inline u8 async_builtin_role(const struct v8_async_config *config, u64 shared) {
    u64 data = v8_word(shared, config->shared_builtin_at);
    if ((data & 0xffffffffULL) != 0) return 0; // not a Smi: not a builtin
    u16 id = data >> 32;
#pragma unroll
    for (int index = 0; index < V8_ASYNC_BUILTINS; index++) {
        if (config->builtin_roles[index] != 0 && config->builtin_ids[index] == id) return config->builtin_roles[index];
    }
    return 0;
}

#define ASYNC_ROLE_UNREAD 0xff /* a handler that could not be read: the chain is cut there */
// What a function is, if it is one of the builtin closures the chain goes
// through (V8_ROLE_*; 0: another function or none; ASYNC_ROLE_UNREAD), and its context. Every
// await closure shares one shared info: its role is read once a sample.
// The closure is taken from the await's read (allocated with it).
static __always_inline u8 async_role_of(const struct v8_async_config *config, struct walk_scratch *scratch,
                                        struct v8_async_walk *walk, u64 function, u64 *context, u64 *shared) {
    if (!v8_is_object(function)) return 0; // undefined: no handler
    u64 *window = async_words(async_near_of(scratch, ASYNC_AWAIT), function, V8_ASYNC_WINDOW);
    if (!window) return ASYNC_ROLE_UNREAD;
    u16 type = async_type_of(config, walk, window[0]);
    if (type == V8_NO_TYPE || type < config->function_types[0] || type > config->function_types[1]) return 0;
    *context = async_slot(window, config->function_context_at);
    *shared = async_slot(window, config->function_shared_at);
    if (!v8_is_object(*shared)) return 0;
#pragma unroll
    for (int index = 0; index < ASYNC_KNOWN_SHARED; index++) {
        if (walk->shared[index] == *shared) return walk->roles[index];
    }
    u8 role = async_builtin_role(config, *shared);
    u8 slot = walk->next_shared & (ASYNC_KNOWN_SHARED - 1);
    walk->shared[slot] = *shared;
    walk->roles[slot] = role;
    walk->next_shared = slot + 1;
    return role;
}

static __always_inline void async_note(struct walk_scratch *scratch, struct v8_async_walk *walk, u16 kind, u64 shared,
                                       s32 position) {
    u16 index = walk->count;
    if (index >= MAX_ASYNC_FRAMES) {
        walk->cut = 1;
        return;
    }
    struct v8_async_frame *frame = &async_notes(scratch)[index & (MAX_ASYNC_FRAMES - 1)];
    frame->shared = shared;
    frame->position = position;
    frame->kind = kind;
    frame->reserved = 0;
    walk->count = index + 1;
}

// An await closure's generator, read with the bytes before it (where an
// async function's promise is) into the generator's place: its window
// (NULL: not one), and its type.
static __always_inline u64 *async_generator_of(const struct v8_async_config *config, struct walk_scratch *scratch,
                                               struct v8_async_walk *walk, u64 context, u16 *type) {
    if (!v8_is_object(context)) return NULL;
    u64 generator = async_word(scratch, context, config->context_extension_at);
    struct v8_async_near *near = async_near_of(scratch, ASYNC_GENERATOR);
    async_near_read(near, generator, ASYNC_GENERATOR_BEFORE, V8_GENERATOR_WINDOW * 8);
    u64 *window = async_words(near, generator, V8_GENERATOR_WINDOW);
    if (!window) return NULL;
    *type = async_type_of(config, walk, window[0]);
    if (*type != config->async_function_type && *type != config->async_generator_type) return NULL;
    return window;
}

// The promise an async function or generator settles (0: none known).
static __always_inline u64 async_generator_promise(const struct v8_async_config *config, struct walk_scratch *scratch,
                                                   struct v8_async_walk *walk, const u64 *generator, u16 type) {
    if (type == config->async_function_type) return generator_slot(generator, config->generator_promise_at);
    u64 queue = generator_slot(generator, config->generator_queue_at);
    if (async_object_type(config, scratch, walk, queue) != config->request_type) return 0;
    return async_word(scratch, queue, config->request_promise_at);
}

// A chain that ends where V8's would not (an object of another type, a
// generator not suspended: read in the middle of a scavenge, say): cut, and
// the sample says so.
static __always_inline u64 async_broken(struct v8_async_walk *walk) {
    walk->cut = 1;
    return 0;
}

// A combinator's element closure: its frame, and the promise the combinator settles.
static __always_inline u64 async_combinator(const struct v8_async_config *config, struct walk_scratch *scratch,
                                            struct v8_async_walk *walk, u64 function, u64 context, u8 role) {
    u64 hash = async_word(scratch, function, config->properties_at);
    s32 index = (hash & 0xffffffffULL) == 0 && (s32)(hash >> 32) > 0 ? (s32)(hash >> 32) - 1 : -1;
    u16 kind = role == V8_ROLE_ALL ? V8_ASYNC_ALL : role == V8_ROLE_ALL_SETTLED ? V8_ASYNC_ALL_SETTLED : V8_ASYNC_ANY;
    async_note(scratch, walk, kind, 0, index);
    // A native context in its place: the closure was called, its context is gone.
    if (async_object_type(config, scratch, walk, context) == config->native_context_type) return 0;
    u64 capability = async_word(scratch, context, config->combinator_capability_at);
    if (async_object_type(config, scratch, walk, capability) != config->capability_type) return async_broken(walk);
    return async_word(scratch, capability, config->capability_promise_at);
}

// Follow one pending promise to the next: 0 ends the chain (where V8's
// ends, or cut). The promise is most often in the generator's read of the
// hop before; the reaction is read with the await's closures and context.
static __always_inline u64 async_hop(const struct v8_async_config *config, struct walk_scratch *scratch,
                                     struct v8_async_walk *walk, u64 promise) {
    u64 *window = async_words(async_near_of(scratch, ASYNC_GENERATOR), promise, V8_ASYNC_WINDOW);
    if (!window || async_type_of(config, walk, window[0]) != config->promise_type) return async_broken(walk);
    u64 flags = async_slot(window, config->promise_flags_at);
    if ((flags & 0xffffffffULL) != 0) return async_broken(walk);
    if (((flags >> 32) & 3) != 0) return 0; // settled: nothing awaits it any more
    u64 reaction = async_slot(window, config->promise_reactions_at);
    if ((reaction & 1) == 0) return 0; // no reaction: the outermost
    struct v8_async_near *await = async_near_of(scratch, ASYNC_AWAIT);
    async_near_read(await, reaction, ASYNC_AWAIT_BEFORE, V8_ASYNC_WINDOW * 8);
    window = async_words(await, reaction, V8_ASYNC_WINDOW);
    if (!window || async_type_of(config, walk, window[0]) != config->reaction_type) return async_broken(walk);
    if ((async_slot(window, config->reaction_next_at) & 1) != 0) return 0; // more than one reaction: no one chain
    u64 fulfill = async_slot(window, config->reaction_fulfill_at);
    u64 reject = async_slot(window, config->reaction_reject_at);
    u64 target = async_slot(window, config->reaction_promise_at);
    u64 context = 0, shared = 0;
    u8 role = async_role_of(config, scratch, walk, fulfill, &context, &shared);
    if (role == ASYNC_ROLE_UNREAD) return async_broken(walk);
    if (role == V8_ROLE_AWAIT) {
        u16 type = V8_NO_TYPE;
        u64 *generator = async_generator_of(config, scratch, walk, context, &type);
        if (!generator) return async_broken(walk);
        u64 continuation = generator_slot(generator, config->generator_continuation_at);
        if ((continuation & 0xffffffffULL) != 0 || (s32)(continuation >> 32) < 0) return async_broken(walk); // not suspended
        u64 function = generator_slot(generator, config->generator_function_at);
        u64 position = generator_slot(generator, config->generator_position_at);
        u64 next = async_generator_promise(config, scratch, walk, generator, type);
        u64 function_shared = v8_is_object(function) ? v8_word(function, config->function_shared_at) : 0;
        if (!v8_is_object(function_shared) || (position & 0xffffffffULL) != 0) return async_broken(walk);
        async_note(scratch, walk, type == config->async_function_type ? V8_ASYNC_FUNCTION : V8_ASYNC_GENERATOR, function_shared,
                   (s32)(position >> 32));
        // An async function always has its promise; an async generator with no request queued ends the chain.
        return next != 0 || type != config->async_function_type ? next : async_broken(walk);
    }
    if (role == V8_ROLE_ALL || role == V8_ROLE_ALL_SETTLED)
        return async_combinator(config, scratch, walk, fulfill, context, role);
    u64 reject_context = 0;
    u8 reject_role = async_role_of(config, scratch, walk, reject, &reject_context, &shared);
    if (reject_role == ASYNC_ROLE_UNREAD) return async_broken(walk); // Promise.any's, or not: unknown
    if (reject_role == V8_ROLE_ANY) return async_combinator(config, scratch, walk, reject, reject_context, V8_ROLE_ANY);
    if (role == V8_ROLE_DEFAULT_RESOLVE)
        return v8_is_object(context) ? async_word(scratch, context, config->resolve_promise_at) : async_broken(walk);
    // A plain .then(): on to the promise it settles, if a native one.
    u16 type = async_object_type(config, scratch, walk, target);
    if (type == config->promise_type) return target;
    if (type == config->capability_type) return async_word(scratch, target, config->capability_promise_at);
    return 0;
}

// The promise the running microtask's async function settles, where the
// chain begins (0: none: no microtask, or not one of a promise). The
// isolate is the one the labels' reader read at this sample, where it did.
// The microtask is the await's reaction morphed in its place: read with
// the closures and context before it.
static __always_inline u64 async_first_promise(const struct v8_async_config *config, struct walk_scratch *scratch,
                                               struct v8_async_walk *walk) {
#ifdef TASK_FSBASE_OFFSET
    u64 isolate = walk->isolate.tls == config->isolate_tls ? walk->isolate.address : 0;
    if (isolate == 0) {
        u64 thread_pointer = current_thread_pointer();
        if (thread_pointer == 0) return 0;
        if (bpf_probe_read_user(&isolate, sizeof(isolate), (void *)(thread_pointer + config->isolate_tls)) != 0 || isolate == 0)
            return 0;
    }
    u64 task = 0;
    if (bpf_probe_read_user(&task, sizeof(task), (void *)(isolate + config->microtask_at)) != 0) return 0;
    struct v8_async_near *await = async_near_of(scratch, ASYNC_AWAIT);
    async_near_read(await, task, ASYNC_AWAIT_BEFORE, V8_ASYNC_WINDOW * 8);
    u64 *window = async_words(await, task, V8_ASYNC_WINDOW);
    if (!window) return 0;
    u16 type = async_type_of(config, walk, window[0]);
    if (type != config->fulfill_job_type && type != config->reject_job_type) return 0;
    u64 handler = async_slot(window, config->task_handler_at);
    u64 target = async_slot(window, config->task_promise_at);
    u64 context = 0, shared = 0;
    u8 role = async_role_of(config, scratch, walk, handler, &context, &shared);
    if (role == V8_ROLE_AWAIT || role == V8_ROLE_AWAIT_REJECT) {
        u16 generator_type = V8_NO_TYPE;
        u64 *generator = async_generator_of(config, scratch, walk, context, &generator_type);
        if (!generator) return 0;
        // Running: the generator the closure resumed is the sample's own function.
        if (generator_slot(generator, config->generator_continuation_at) != 0xfffffffe00000000ULL) return 0;
        return async_generator_promise(config, scratch, walk, generator, generator_type);
    }
    return async_object_type(config, scratch, walk, target) == config->promise_type ? target : 0;
#else
    return 0;
#endif
}

// Does this sample's process have its async callers read?
static __always_inline int wants_async_callers(struct walk_scratch *scratch) {
    if (scratch->v8.builtins_end == 0 || scratch->v8.kind != RUNTIME_V8 || scratch->v8_count == 0) return 0;
    u32 tgid = scratch->event.pid;
    return v8_async_settings.lookup(&tgid) != NULL;
}

// Read the async callers ASYNC_HOPS_PER_CALL promises a call, then send the
// sample: the walk's last tail calls (a chain longer than the calls left
// is cut, and says so).
static __always_inline int read_async_callers_from(void *ctx, const int walkers) {
    struct walk_scratch *scratch = scratch_of(walkers);
    if (!scratch) return 0;
    u32 tgid = scratch->event.pid;
    const struct v8_async_config *config = v8_async_settings.lookup(&tgid);
    struct v8_async_walk *walk = async_walk_of(scratch);
    if (config) {
        if (walk->hops == 0) {
            async_near_of(scratch, ASYNC_AWAIT)->start = 0;
            async_near_of(scratch, ASYNC_GENERATOR)->start = 0;
        }
        u64 promise = walk->hops == 0 ? async_first_promise(config, scratch, walk) : walk->promise;
        for (int hop = 0; hop < ASYNC_HOPS_PER_CALL; hop++) {
            if (promise == 0 || walk->cut) break;
            if (walk->hops >= ASYNC_MAX_HOPS) {
                walk->cut = 1;
                break;
            }
            walk->hops++;
            promise = async_hop(config, scratch, walk, promise);
        }
        walk->promise = walk->cut ? 0 : promise;
        if (walk->promise != 0) {
            tail_call_walker(ctx, walkers, ASYNC_PROGRAM);
            walk->cut = 1; // out of tail calls
        }
    }
    scratch->event.async_count = walk->count;
    scratch->event.async_flags = walk->cut ? V8_ASYNC_CUT : 0;
    submit_sample(scratch);
    return 0;
}

int read_async_callers(struct bpf_perf_event_data *ctx) {
    return read_async_callers_from(ctx, WALKERS_PERF_EVENT);
}

#ifdef WITH_OFF_CPU
int read_async_callers_off_cpu(void *ctx) {
    return read_async_callers_from(ctx, WALKERS_TRACEPOINT);
}

int read_async_callers_uprobe(struct pt_regs *ctx) {
    return read_async_callers_from(ctx, WALKERS_UPROBE);
}
#endif
