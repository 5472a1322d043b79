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
#define V8_ASYNC_WINDOW 8     /* words of an object read at once */
#define V8_GENERATOR_WINDOW 16
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

// An object's first words, and its type.
static __always_inline u16 async_window(const struct v8_async_config *config, struct v8_async_walk *walk, u64 object, u64 *window,
                                        u32 bytes) {
    if (!v8_is_object(object)) return V8_NO_TYPE;
    if (bpf_probe_read_user(window, bytes, (void *)(object - V8_HEAP_OBJECT_TAG)) != 0) return V8_NO_TYPE;
    return async_type_of(config, walk, window[0]);
}

static __always_inline u16 async_object_type(const struct v8_async_config *config, struct v8_async_walk *walk, u64 object) {
    return async_type_of(config, walk, v8_map_of(object));
}

static __always_inline u64 async_slot(u64 *window, u8 offset) {
    return window[(offset / 8) & (V8_ASYNC_WINDOW - 1)];
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

// What a function is, if it is one of the builtin closures the chain goes
// through (V8_ROLE_*; 0: another function or none), and its context. Every
// await closure shares one shared info: its role is read once a sample.
static __always_inline u8 async_role_of(const struct v8_async_config *config, struct v8_async_walk *walk, u64 function,
                                        u64 *context, u64 *shared) {
    u64 window[V8_ASYNC_WINDOW];
    u16 type = async_window(config, walk, function, window, sizeof(window));
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

// The promise an async function or generator settles (0: none known).
static __always_inline u64 async_generator_promise(const struct v8_async_config *config, struct v8_async_walk *walk,
                                                   u64 *generator, u16 type) {
    if (type == config->async_function_type) return generator[(config->generator_promise_at / 8) & (V8_GENERATOR_WINDOW - 1)];
    u64 queue = generator[(config->generator_queue_at / 8) & (V8_GENERATOR_WINDOW - 1)];
    if (async_object_type(config, walk, queue) != config->request_type) return 0;
    return v8_word(queue, config->request_promise_at);
}

// An await closure's generator, read into window (V8_NO_TYPE: not one).
static __always_inline u16 async_generator_of(const struct v8_async_config *config, struct v8_async_walk *walk, u64 context,
                                              u64 *window) {
    if (!v8_is_object(context)) return V8_NO_TYPE;
    u64 generator = v8_word(context, config->context_extension_at);
    u16 type = async_window(config, walk, generator, window, V8_GENERATOR_WINDOW * 8);
    if (type != config->async_function_type && type != config->async_generator_type) return V8_NO_TYPE;
    return type;
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
    u64 hash = v8_word(function, config->properties_at);
    s32 index = (hash & 0xffffffffULL) == 0 && (s32)(hash >> 32) > 0 ? (s32)(hash >> 32) - 1 : -1;
    u16 kind = role == V8_ROLE_ALL ? V8_ASYNC_ALL : role == V8_ROLE_ALL_SETTLED ? V8_ASYNC_ALL_SETTLED : V8_ASYNC_ANY;
    async_note(scratch, walk, kind, 0, index);
    // A native context in its place: the closure was called, its context is gone.
    if (async_object_type(config, walk, context) == config->native_context_type) return 0;
    u64 capability = v8_word(context, config->combinator_capability_at);
    if (async_object_type(config, walk, capability) != config->capability_type) return async_broken(walk);
    return v8_word(capability, config->capability_promise_at);
}

// Follow one pending promise to the next: 0 ends the chain (where V8's
// ends, or cut).
static __always_inline u64 async_hop(const struct v8_async_config *config, struct walk_scratch *scratch,
                                     struct v8_async_walk *walk, u64 promise) {
    u64 window[V8_ASYNC_WINDOW];
    if (async_window(config, walk, promise, window, sizeof(window)) != config->promise_type) return async_broken(walk);
    u64 flags = async_slot(window, config->promise_flags_at);
    if ((flags & 0xffffffffULL) != 0) return async_broken(walk);
    if (((flags >> 32) & 3) != 0) return 0; // settled: nothing awaits it any more
    u64 reaction = async_slot(window, config->promise_reactions_at);
    if ((reaction & 1) == 0) return 0; // no reaction: the outermost
    if (async_window(config, walk, reaction, window, sizeof(window)) != config->reaction_type) return async_broken(walk);
    if ((async_slot(window, config->reaction_next_at) & 1) != 0) return 0; // more than one reaction: no one chain
    u64 fulfill = async_slot(window, config->reaction_fulfill_at);
    u64 reject = async_slot(window, config->reaction_reject_at);
    u64 target = async_slot(window, config->reaction_promise_at);
    u64 context = 0, shared = 0;
    u8 role = async_role_of(config, walk, fulfill, &context, &shared);
    if (role == V8_ROLE_AWAIT) {
        u64 generator[V8_GENERATOR_WINDOW];
        u16 type = async_generator_of(config, walk, context, generator);
        if (type == V8_NO_TYPE) return async_broken(walk);
        u64 continuation = generator[(config->generator_continuation_at / 8) & (V8_GENERATOR_WINDOW - 1)];
        if ((continuation & 0xffffffffULL) != 0 || (s32)(continuation >> 32) < 0) return async_broken(walk); // not suspended
        u64 function = generator[(config->generator_function_at / 8) & (V8_GENERATOR_WINDOW - 1)];
        u64 position = generator[(config->generator_position_at / 8) & (V8_GENERATOR_WINDOW - 1)];
        u64 function_shared = v8_is_object(function) ? v8_word(function, config->function_shared_at) : 0;
        if (!v8_is_object(function_shared) || (position & 0xffffffffULL) != 0) return async_broken(walk);
        async_note(scratch, walk, type == config->async_function_type ? V8_ASYNC_FUNCTION : V8_ASYNC_GENERATOR, function_shared,
                   (s32)(position >> 32));
        u64 next = async_generator_promise(config, walk, generator, type);
        // An async function always has its promise; an async generator with no request queued ends the chain.
        return next != 0 || type != config->async_function_type ? next : async_broken(walk);
    }
    if (role == V8_ROLE_ALL || role == V8_ROLE_ALL_SETTLED)
        return async_combinator(config, scratch, walk, fulfill, context, role);
    u64 reject_context = 0;
    if (async_role_of(config, walk, reject, &reject_context, &shared) == V8_ROLE_ANY)
        return async_combinator(config, scratch, walk, reject, reject_context, V8_ROLE_ANY);
    if (role == V8_ROLE_DEFAULT_RESOLVE)
        return v8_is_object(context) ? v8_word(context, config->resolve_promise_at) : async_broken(walk);
    // A plain .then(): on to the promise it settles, if a native one.
    u16 type = async_object_type(config, walk, target);
    if (type == config->promise_type) return target;
    if (type == config->capability_type) return v8_word(target, config->capability_promise_at);
    return 0;
}

// The promise the running microtask's async function settles, where the
// chain begins (0: none: no microtask, or not one of a promise). The
// isolate is the one the labels' reader read at this sample, where it did.
static __always_inline u64 async_first_promise(const struct v8_async_config *config, struct v8_async_walk *walk) {
#ifdef TASK_FSBASE_OFFSET
    u64 isolate = walk->isolate.tls == config->isolate_tls ? walk->isolate.address : 0;
    if (isolate == 0) {
        u64 thread_pointer = 0;
        bpf_probe_read_kernel(&thread_pointer, sizeof(thread_pointer), (void *)(bpf_get_current_task() + TASK_FSBASE_OFFSET));
        if (thread_pointer == 0) return 0;
        if (bpf_probe_read_user(&isolate, sizeof(isolate), (void *)(thread_pointer + config->isolate_tls)) != 0 || isolate == 0)
            return 0;
    }
    u64 task = 0;
    if (bpf_probe_read_user(&task, sizeof(task), (void *)(isolate + config->microtask_at)) != 0) return 0;
    u64 window[V8_ASYNC_WINDOW];
    u16 type = async_window(config, walk, task, window, sizeof(window));
    if (type != config->fulfill_job_type && type != config->reject_job_type) return 0;
    u64 handler = async_slot(window, config->task_handler_at);
    u64 target = async_slot(window, config->task_promise_at);
    u64 context = 0, shared = 0;
    u8 role = async_role_of(config, walk, handler, &context, &shared);
    if (role == V8_ROLE_AWAIT || role == V8_ROLE_AWAIT_REJECT) {
        u64 generator[V8_GENERATOR_WINDOW];
        u16 generator_type = async_generator_of(config, walk, context, generator);
        if (generator_type == V8_NO_TYPE) return 0;
        // Running: the generator the closure resumed is the sample's own function.
        if (generator[(config->generator_continuation_at / 8) & (V8_GENERATOR_WINDOW - 1)] != 0xfffffffe00000000ULL) return 0;
        return async_generator_promise(config, walk, generator, generator_type);
    }
    return async_object_type(config, walk, target) == config->promise_type ? target : 0;
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
        u64 promise = walk->hops == 0 ? async_first_promise(config, walk) : walk->promise;
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
