/* What jitprof's kernel half and user space share, defined once: the
 * records the BPF program sends up, the maps user space fills, and every
 * code, flag and limit either side reads.
 *
 * Included by bpf/sampler.bpf.c (BCC) and native/jitprof_native.h; the part
 * between the cffi markers is handed to cffi too. The Python side
 * (profiler/kernel/events.py, mappings.py, bpf_program.py) is checked
 * against this file by tests/kernel/test_abi.py, which compiles it with the
 * system's C compiler: a change here that Python does not follow fails. */
#ifndef JITPROF_ABI_H
#define JITPROF_ABI_H

#include <linux/types.h>

/* cffi-begin */
/* Records on the ring buffer (struct sample_event, struct process_event). */
#define EVENT_SAMPLE 1
#define EVENT_FORK 2
#define EVENT_EXEC 3
#define EVENT_EXIT 4
#define EVENT_MAPS_CHANGED 5
#define EVENT_DISCOVERED 6 /* --all: a process sampled for the first time */
/* --off-cpu: a followed thread exits with waits not reported yet (address:
 * their nanoseconds, length: how many) */
#define EVENT_THREAD_WAITS 7
/* --off-cpu: a threadpool thread of a followed process starts a work item
 * (time_ns: now; address: the item's key, the time it was submitted) */
#define EVENT_WORK_STARTED 8
/* --off-cpu: a followed thread exits with time runnable, waiting for a CPU,
 * not reported yet (address: its nanoseconds) */
#define EVENT_THREAD_RUNNABLE 9
/* --off-cpu: a thread of a followed process without rseq (a Go or musl
 * program's) still waits without it 100 ms after its first wait: waits are
 * to be reported at system calls' returns */
#define EVENT_WAITS_WITHOUT_RSEQ 10

/* How a stack walk ended. */
#define WALK_COMPLETE 0
#define WALK_TRUNCATED 1
#define WALK_NO_MAPPING 2
#define WALK_READ_FAULT 3
#define WALK_BAD_FRAME 4
#define WALK_NO_USER_REGS 5
/* Not an end: user space did not know enough yet, and the sample carries a
 * copy of the stack to finish the walk with (profiler/kernel/late_walks.py). */
#define WALK_DEFERRED 6
/* User space's: a walk finished from a copy that did not reach the stack's end. */
#define WALK_COPY_TOO_SHORT 7
/* The thread was in the kernel on its way out, its user memory already gone. */
#define WALK_THREAD_EXITING 8

/* Indexes of the per-CPU counter array. */
#define COUNTER_SAMPLES 0
#define COUNTER_RINGBUF_FULL 1
#define COUNTER_KSTACK_FAILED 2
#define COUNTER_EVENTS_LOST 3
#define COUNTER_OFF_CPU_UNTRACKED 4 /* --off-cpu: a wait not timed (the thread table was full) */
#define COUNTER_COUNT 5

/* Kinds of the mapping trie's entries (struct mapping_info), and of the
 * mappings the user-space walker is given. */
#define MAPPING_ELF 1
#define MAPPING_JIT 2
#define MAPPING_ELF_PENDING 3 /* a file whose unwind table is not attached yet: walks are deferred */
#define MAPPING_PROVISIONAL 4 /* new executable memory, covered until /proc/PID/maps is read */

/* struct unwind_table.first_row of a table being built. */
#define TABLE_PENDING 0xffffffff

/* Unwind rows: how the CFA is found, and where rbp and rbx were saved. */
#define CFA_GAP 0 /* between functions: no row */
#define CFA_RSP 1
#define CFA_RBP 2
#define CFA_PLT 3          /* sp + 8, + 8 more past the PLT entry's push (cfa_offset: its threshold) */
#define CFA_SIGNAL 4       /* a signal frame (__restore_rt): registers from the ucontext */
#define CFA_END_OF_STACK 5 /* the outermost frame (rip undefined) */
#define CFA_UNSUPPORTED 6  /* a rule the walkers cannot follow: frame-pointer step */
#define CFA_RBX 7          /* rbx + cfa_offset: the dynamic loader's trampolines, which realign the stack */
/* struct unwind_row.saved_rules, bits: where the caller's rbp and rbx are.
 * rbx is followed only for the frames whose CFA it holds; with neither bit
 * of its own the caller's rbx is the callee's. */
#define RBP_SAME 0
#define RBP_OFFSET 1 /* saved at CFA + rbp_offset */
#define RBX_OFFSET 2 /* saved at CFA + rbx_offset */
#define RBX_LOST 4   /* kept where the walkers do not look (a register, an expression): not known */

/* Where a signal frame keeps the interrupted registers, from the stack
 * pointer on entry to __restore_rt: struct ucontext's uc_mcontext gregs. */
#define SIGFRAME_RBP 120
#define SIGFRAME_RBX 128
#define SIGFRAME_RSP 160
#define SIGFRAME_RIP 168

/* struct stack_copy.flags */
#define STACK_COPY_REACHED_END 1 /* memory beyond the copy was not readable */
#define STACK_COPY_EXACT_PC 2    /* pc is not a return address */
#define STACK_COPY_PAGED 4       /* read page by page: the copy starts at sp's page, holes marks pages not read */
#define STACK_COPY_PAGE_BYTES 4096
#define STACK_COPY_PAGES_TRACKED 16 /* struct stack_copy.holes: a bit a page */

/* Limits of a sample record. */
#define MAX_FRAMES 127
#define STACK_COPY_BYTES 27088 /* 26.5 KiB of stack copied for a deferred walk */
/* A stack deeper than MAX_FRAMES: the rest of it, up to DEEP_COPY_BYTES,
 * goes straight into the ring buffer in a record of its own size class, and
 * user space walks it, up to MAX_STACK_FRAMES in all. */
#define DEEP_COPY_BYTES 262144
#define MAX_STACK_FRAMES 2048
#define COMM_LEN 16
#define SAMPLE_HEADER_BYTES                                                                                                      \
    280 /* sent: the header, frame_count addresses, v8_frame_count struct v8_frame, then for WALK_DEFERRED the copy */
/* The first bytes of an OpenTelemetry thread context record (OTEP 4947: a
 * 28-byte header, trace id, span id, valid, attributes' size, then the
 * attributes) sent with a sample of a thread that has one. */
#define THREAD_CONTEXT_BYTES 176 /* the first bytes of an OpenTelemetry record, or a struct v8_context_record */
#define OTEL_CONTEXT_BYTES 144   /* of an OpenTelemetry record, read at most */
#define THREAD_CONTEXT_HEADER_BYTES 28

/* Indexes of the off_cpu_settings array: the shortest wait recorded one by one (ns). */
#define OFF_CPU_SETTING_SHORTEST_WAIT 0
#define OFF_CPU_SETTINGS 1

/* struct sample_event.off_cpu_flags */
#define OFF_CPU_STACK_MOVED 1 /* the thread ran user code since the wait began: the stack is not the wait's */
#define SAMPLE_SUBMITS_WORK 2 /* not a sample: the stack that submits a work item (work) to a threadpool */
#define OFF_CPU_PREEMPTED 4   /* not a sample: time runnable (runnable_ns) under the stack the thread was preempted in */

/* One unwind row (16 bytes): rows of a file are sorted by pc. */
struct unwind_row {
    __u32 pc; /* file address (ELF vaddr) where the row starts */
    __u8 cfa_type;
    __u8 saved_rules; /* RBP_* | RBX_* */
    __s16 rbx_offset;
    __s32 cfa_offset;
    __s32 rbp_offset;
};
/* cffi-end */

/* A V8 frame's slots below its frame pointer, the same from V8 11.3 (Node 20)
 * to 14.6 (Node 26): user space checks them against each node binary's
 * v8dbg_off_fp_* before it asks for V8 frames (profiler/jit/v8/heap/). */
#define V8_FP_CONTEXT (-8) /* a JS frame's context (a tagged pointer); other frames' type marker */
#define V8_FP_FUNCTION (-16)
#define V8_FP_BYTECODE_ARRAY (-32)  /* interpreted and baseline frames */
#define V8_FP_BYTECODE_OFFSET (-40) /* interpreted frames: a Smi */
#define V8_SLOTS_BYTES 40           /* read at fp - 40: the slots above */
#define V8_NO_BYTECODE_OFFSET (-1)
/* A HotSpot interpreted frame's slots below its frame pointer (x86-64, JDK 9
 * to 26: frame_x86.hpp's interpreter_frame_*_offset), sent in a struct
 * v8_frame: the Method* as shared, the bytecode pointer as bytecode_array,
 * the JVM's GC count + 1 as code (0: not read; a Method is freed only in a
 * collection). The leaf's bytecode pointer is r13 (the slot is written at
 * calls only). */
#define HOTSPOT_FP_METHOD (-24)
#define HOTSPOT_FP_BCP (-64)
#define HOTSPOT_SLOTS_BYTES 64 /* read at fp - 64: the slots above */
/* A HotSpot JVM whose compiled code keeps no frame pointer (run without
 * -XX:+PreserveFramePointer), in the hotspot_code map: where its code heaps
 * and their segment maps are, and where a code blob keeps its frame size,
 * the offset from its code at which its frame is complete, and its code's
 * start. The walker steps over a compiled frame by its size: the caller's
 * return address and saved rbp are the frame's last two words. */
#define HOTSPOT_CODE_HEAPS 3
#define HOTSPOT_BLOB_HEADER_BYTES 64 /* read at a blob: the fields lie within */
#define HOTSPOT_SEGMAP_HOPS 12       /* a block's start: one byte read per hop */
#define HOTSPOT_MAX_FRAME_WORDS 8192
#define HOTSPOT_FP_SENDER_SP (-8) /* an interpreted frame's caller's sp (a c2i adapter moves it) */
struct hotspot_code {
    __u64 heap_low[HOTSPOT_CODE_HEAPS];
    __u64 heap_high[HOTSPOT_CODE_HEAPS];
    __u64 segmap[HOTSPOT_CODE_HEAPS];
    __u32 log2_segment;
    __u16 block_header;        /* the bytes before a blob in its heap block */
    __u8 frame_size_at;        /* CodeBlob::_frame_size (int, words) */
    __u8 frame_complete_at;    /* CodeBlob::_frame_complete_offset (int, bytes from the code) */
    __u8 code_begin_at;        /* CodeBlob::_code_begin (a pointer) or _code_offset (int, from the blob) */
    __u8 code_begin_offset;    /* 1: _code_offset */
    __u8 frame_complete_bytes; /* 2 (JDK 25: an int16_t) or 4 */
    /* 1: the JVM keeps frame pointers; only a leaf caught in a prologue or an
     * epilogue is stepped by what its blob says (its rbp is not its own yet, or
     * any more: the frame-pointer step would skip its caller). */
    __u8 frame_pointers;
    /* CodeBlob::_name (a pointer to a string in libjvm.so): the blobs of
     * vtable and itable stubs ("vtable chunks") keep no frame; 0: not read */
    __u16 name_at;
    __u8 reserved[2];
};

/* JS frames sent per sample, leaf first: one for every frame the kernel can
 * walk, since an attached node has no perf map to name a frame without one.
 * The per-CPU walk state holds them beside the stack copy within 32 KiB (the
 * kernel's largest per-CPU map value): hence the copy's 26.5 KiB. */
#define MAX_V8_FRAMES MAX_FRAMES

/* A file's slice of the row array. */
struct unwind_table {
    __u32 first_row;
    __u32 row_count; /* 0: not live (yet), frame-pointer steps only */
};

/* LPM trie key: pid and address big-endian, so that a prefix covers an
 * aligned address block of one process. */
struct trie_key {
    __u32 prefixlen;
    __u32 pid_be;
    __u64 address_be;
};

struct mapping_info {
    __u32 kind;
    __u32 table_id; /* unwind table of an ELF mapping; unused by the FP walk */
    __u64 load_bias;
};

/* The trie's generation: each writer moves its own count on after it
 * changes the trie (the kernel's with an atomic add; user space writes the
 * whole, its own count new each time), so that a pair once left never comes
 * back: the walkers' known frames hold the pair they were found under. */
struct trie_generation {
    __u32 kernel;
    __u32 user;
};

struct process_event {
    __u32 event_type;
    __u32 pid;
    __u32 tid;
    __u32 parent_pid;
    __u64 time_ns;
    char comm[COMM_LEN];
    __u64 address; /* EVENT_MAPS_CHANGED: the range that became executable */
    __u64 length;  /* EVENT_EXEC: the process's exec count since followed (maps_read's) */
};

/* Where user space resumes a deferred walk: the registers of the first
 * frame not walked, and how much stack from sp up follows. */
struct stack_copy {
    __u64 pc;
    __u64 sp;
    __u64 fp;
    __u64 rbx; /* 0: not known */
    __u32 copy_length;
    __u16 flags;
    /* STACK_COPY_PAGED: bit i set, the copy's page i was not in memory (a
     * page never touched, below pages that were): zeros, not its bytes. */
    __u16 holes;
};

/* What identifies one JavaScript frame, for a frame in a V8 process's JIT
 * code or its builtins whose context slot holds a tagged pointer (a JS frame,
 * not a stub's type marker). The function's SharedFunctionInfo and code are
 * read at sample time, or at an earlier sample of the same function slot at
 * the same pc (and bytecode array, in the builtins): a JSFunction may move at
 * the next scavenge, they stay.
 * User space reads the objects from the process's memory and checks all it
 * reads: these are the target's words. */
struct v8_frame {
    __u64 shared;          /* the JSFunction's SharedFunctionInfo (tagged) */
    __u64 code;            /* the JSFunction's code (tagged; from V8 13, a dispatch handle) */
    __u64 bytecode_array;  /* fp - 32: interpreted and baseline frames' BytecodeArray (tagged) */
    __s32 bytecode_offset; /* the Smi at fp - 40 (interpreted frames), V8_NO_BYTECODE_OFFSET when the slot holds no Smi */
    __u16 frame_index;     /* the address it belongs to, 0 the leaf */
    __u16 flags;           /* V8_FRAME_* */
};
#define V8_FRAME_INTERPRETER 1 /* the pc is in V8's builtins (the interpreter among them), or HotSpot's interpreter */

/* V8's async callers of a sample (node 22 on): from the isolate's current
 * microtask, the promise the running async function will settle, then each
 * promise's one reaction: an await's closure names the async function (its
 * suspended generator) awaiting it, Promise.all/allSettled/any's element
 * closures the combinator, and each gives the next promise, as V8's
 * CaptureAsyncStackTrace does for Error().stack. Read at the sample: every
 * object's instance type and every closure's builtin are checked; a chain
 * not understood is cut, never guessed. */
#define MAX_ASYNC_FRAMES 64
#define V8_ASYNC_BUILTINS 16
struct v8_async_frame {
    __u64 shared;   /* the awaiting function's SharedFunctionInfo (tagged); 0 for a combinator */
    __s32 position; /* its generator's bytecode offset where it waits; a combinator's element index (-1: not known) */
    __u16 kind;     /* V8_ASYNC_* */
    __u16 reserved;
};
#define V8_ASYNC_FUNCTION 1
#define V8_ASYNC_GENERATOR 2
#define V8_ASYNC_ALL 3
#define V8_ASYNC_ALL_SETTLED 4
#define V8_ASYNC_ANY 5
/* struct sample_event.async_flags */
#define V8_ASYNC_CUT 1 /* more callers than MAX_ASYNC_FRAMES (or than the tail calls left): the outermost are missing */
/* What a builtin closure is (struct v8_async_config.builtin_roles). */
#define V8_ROLE_AWAIT 1           /* an await's (or async generator yield's) fulfill closure */
#define V8_ROLE_AWAIT_REJECT 2    /* its reject closure */
#define V8_ROLE_ALL 3             /* Promise.all's resolve element closure */
#define V8_ROLE_ALL_SETTLED 4     /* Promise.allSettled's */
#define V8_ROLE_ANY 5             /* Promise.any's reject element closure */
#define V8_ROLE_DEFAULT_RESOLVE 6 /* a promise capability's resolve function */
struct v8_async_config {
    __s64 isolate_tls;       /* g_current_isolate_ from the thread pointer */
    __u32 microtask_at;      /* the isolate's current microtask (a root) */
    __u16 function_types[2]; /* first, last JSFunction instance type */
    __u16 fulfill_job_type;  /* instance types */
    __u16 reject_job_type;
    __u16 promise_type;
    __u16 reaction_type;
    __u16 async_function_type;
    __u16 async_generator_type;
    __u16 request_type; /* AsyncGeneratorRequest */
    __u16 capability_type;
    __u16 native_context_type;
    __u16 builtin_ids[V8_ASYNC_BUILTINS];  /* builtins by id (a builtin closure's shared info holds its id) */
    __u8 builtin_roles[V8_ASYNC_BUILTINS]; /* V8_ROLE_* (0: unused) */
    __u8 map_type_at;                      /* a Map's instance_type */
    __u8 function_shared_at;               /* a JSFunction's shared info and context (within its first 64 bytes) */
    __u8 function_context_at;
    __u8 shared_builtin_at; /* a SharedFunctionInfo's function data: a builtin's id as a Smi */
    __u8 task_handler_at;   /* a PromiseReactionJobTask's handler and promise_or_capability (within 64 bytes) */
    __u8 task_promise_at;
    __u8 reaction_next_at; /* a PromiseReaction's next, handlers, promise_or_capability (within 64 bytes) */
    __u8 reaction_reject_at;
    __u8 reaction_fulfill_at;
    __u8 reaction_promise_at;
    __u8 promise_reactions_at; /* a JSPromise's reactions_or_result and flags (within 64 bytes) */
    __u8 promise_flags_at;
    __u8 generator_function_at; /* a JSGeneratorObject's function, position, continuation (within 128 bytes) */
    __u8 generator_position_at;
    __u8 generator_continuation_at;
    __u8 generator_promise_at;     /* a JSAsyncFunctionObject's promise */
    __u8 generator_queue_at;       /* a JSAsyncGeneratorObject's queue */
    __u8 request_promise_at;       /* an AsyncGeneratorRequest's promise */
    __u8 capability_promise_at;    /* a PromiseCapability's promise */
    __u8 context_extension_at;     /* an await closure's context: the generator */
    __u8 combinator_capability_at; /* an element closure's context: the combinator's capability */
    __u8 resolve_promise_at;       /* a resolve function's context: its promise */
    __u8 properties_at;            /* a JSObject's properties or hash (an element closure's index + 1) */
    __u8 reserved[3];
};

/* A followed V8 process (the v8_processes map): where its builtins are (the
 * interpreter among them: V8 may map them twice, the copy near its JIT code
 * for short calls), and where a JSFunction keeps its shared info and code,
 * inside V8_FUNCTION_WINDOW bytes from function_window. Its anonymous
 * executable mappings are V8's JIT code. A HotSpot JVM (kind
 * RUNTIME_HOTSPOT) has its template interpreter as builtins, no copy
 * (copy_end 0), and in copy_start where it counts its collections. */
#define V8_FUNCTION_WINDOW 32
struct v8_process {
    __u64 builtins_start;
    __u64 builtins_end;
    __u64 copy_start; /* the second mapping of the builtins; 0, 0: none */
    __u64 copy_end;
    __u32 function_window; /* from the untagged JSFunction */
    __u8 shared_at;        /* offsets inside the window, multiples of 8 */
    __u8 code_at;
    __u16 kind; /* RUNTIME_V8, RUNTIME_HOTSPOT */
};
#define RUNTIME_V8 0
#define RUNTIME_HOTSPOT 1

/* A node process's AsyncLocalStorage, read at each sample (the
 * v8_context_settings map, by tgid): the thread's isolate (a static TLS
 * pointer), its continuation-preserved embedder data (node 24 on, and 22
 * with --experimental-async-context-frame: the current AsyncContextFrame, a
 * JSMap from each AsyncLocalStorage to its store), and in the OpenTelemetry
 * context manager's store the active span's ids. Keys and maps are the
 * objects user space learned from the process's heap; every object is read
 * only where its map is one of them, so a moved or other object ends the
 * read (no label), never gives another's. */
#define V8_CONTEXT_MAPS 4       /* known maps (hidden classes) per object read */
#define V8_CONTEXT_ENTRIES 8    /* of a JSMap's table looked at (live and deleted) */
#define V8_OUT_OF_OBJECT 0x8000 /* a field offset: a slot of the properties array, not in the object */
#define V8_STORE_FIELDS 3       /* of a labelled store read */
#define V8_STORE_TEXT 18        /* characters of a field's string read */
#define V8_FIELD_NONE 0
#define V8_FIELD_STRING 1 /* one-byte characters, length the string's (text has its first V8_STORE_TEXT) */
#define V8_FIELD_SMI 2    /* a small integer: text has its s32 */
#define V8_FIELD_DOUBLE 3 /* a HeapNumber: text has its f64 */
struct v8_store_field {
    __u8 kind;
    __u8 length;
    char text[V8_STORE_TEXT];
};
struct v8_context_config {
    __s64 isolate_tls; /* g_current_isolate_ from the thread pointer */
    __u32 cped_offset; /* the embedder data in the Isolate */
    __u16 js_map_type; /* instance types */
    __u16 first_nonstring_type;
    __u8 map_type_at;     /* a Map's instance_type */
    __u8 string_tag_mask; /* representation and encoding bits of a string's type */
    __u8 seq_one_byte_tag;
    __u8 sliced_one_byte_tag;
    __u8 string_length_at;
    __u8 string_chars_at;
    __u8 sliced_parent_at;
    __u8 sliced_offset_at;
    __u64 store_key;                     /* the OpenTelemetry context manager's AsyncLocalStorage (0: not known yet) */
    __u64 span_key;                      /* the context's key of the active span (a Symbol; 0: not known yet) */
    __u64 context_maps[V8_CONTEXT_MAPS]; /* a Context object's map, and where it keeps its JSMap */
    __u16 context_map_at[V8_CONTEXT_MAPS];
    __u64 span_maps[V8_CONTEXT_MAPS]; /* a span's map, and where it keeps its span context */
    __u16 span_context_at[V8_CONTEXT_MAPS];
    __u64 span_context_maps[V8_CONTEXT_MAPS]; /* a span context's map, where it keeps its ids */
    __u16 trace_id_at[V8_CONTEXT_MAPS];
    __u16 span_id_at[V8_CONTEXT_MAPS];
    __u16 attributes_at[V8_CONTEXT_MAPS];   /* by span map: where a span keeps its attributes (0: not known) */
    __u16 span_name_at[V8_CONTEXT_MAPS];    /* and its name (0: not known) */
    __u64 attributes_maps[V8_CONTEXT_MAPS]; /* an attributes object's map, and where it keeps http.route (0: none) */
    __u16 route_at[V8_CONTEXT_MAPS];
    /* --label-store: the AsyncLocalStorage whose store's fields label samples */
    __u64 label_store_key; /* 0: none (not asked, or not known yet) */
    __u64 label_store_maps[V8_CONTEXT_MAPS];
    __u16 label_store_at[V8_CONTEXT_MAPS][V8_STORE_FIELDS]; /* its fields (0: none) */
    __u16 heap_number_type;
    __u8 learning;          /* user space learns this process's objects: a record that stops short wakes it at once */
    __u8 thin_one_byte_tag; /* a ThinString (an internalized string's forwarder, as a Map key leaves it) */
    __u8 thin_actual_at;
    __u8 cons_one_byte_tag; /* a ConsString of one-byte halves (0: not read) */
    __u8 cons_first_at;     /* its first half, the second right after */
    __u8 reserved;
};
/* What a sample's read of it found (struct sample_event.context, with
 * context_kind CONTEXT_V8). */
#define V8_REACHED_FRAME 1   /* a frame, with no store known in it */
#define V8_REACHED_STORE 2   /* the context manager's store, of a map not known */
#define V8_REACHED_CONTEXT 3 /* its context, with no span in it */
#define V8_REACHED_SPAN 4    /* a span of a map not known, or its span context's */
#define V8_REACHED_IDS 5     /* the span's trace and span id, read whole */
#define TRACE_ID_CHARS 32
#define SPAN_ID_CHARS 16
#define V8_ROUTE_CHARS 28
#define V8_ROUTE_UNKNOWN 255
#define V8_SPAN_NAME_CHARS 32
struct v8_context_record {
    __u8 reached;
    __u8 route_length;     /* of the span's http.route (0: none; V8_ROUTE_UNKNOWN: its attributes' map not known) */
    __u8 span_name_length; /* of its name (0: not read: not a flat one-byte string, or its map's slot not known) */
    __u8 reserved[5];
    __u64 frame;                       /* the AsyncContextFrame (tagged); V8_REACHED_SPAN, V8_ROUTE_UNKNOWN: the map not known */
    __u64 object;                      /* where the read stopped (V8_REACHED_IDS: the span) */
    __u8 trace_id[TRACE_ID_CHARS / 2]; /* the ids' hex, as bytes */
    __u8 span_id[SPAN_ID_CHARS / 2];
    __u64 store_map; /* the labelled store's map (0: no store read) */
    struct v8_store_field store_fields[V8_STORE_FIELDS];
    char route[V8_ROUTE_CHARS];         /* its first characters */
    char span_name[V8_SPAN_NAME_CHARS]; /* and the span's name's */
};
#define CONTEXT_OTEL 0    /* sample_event.context_kind: an OpenTelemetry thread context record */
#define CONTEXT_V8 1      /* a struct v8_context_record */
#define CONTEXT_WAKE 0x80 /* with CONTEXT_V8: the read stopped short while user space learns; the sample woke it */

/* --off-cpu: a timed thread (the off_cpu_threads map, by thread id). */
struct off_cpu_thread {
    __u64 left_ns;       /* when it left the CPU to wait; 0 while it runs */
    __u64 waited_ns;     /* off the CPU since the wait began (a system call can wait several times) */
    __u64 short_wait_ns; /* waits too short to record one by one, not reported yet */
    __u64 wait_pc;       /* the user pc and sp the wait began with: its stack */
    __u64 wait_sp;
    __u32 short_waits;
    __s32 kernel_stack_id; /* where in the kernel the wait began (--kernel) */
    __u32 tgid;
    __u32 runnable;           /* off the CPU since left_ns while runnable (preempted): not a wait */
    __u64 runnable_ns;        /* runnable, waiting for a CPU, not reported yet */
    __u64 without_rseq_since; /* when it first waited with no rseq registered (0: it has rseq) */
    __u32 walk_runnable;      /* back from a preemption long enough to record: walked on its way to user space */
    __u32 reserved;
};

/* --off-cpu: a threadpool's work item (the threadpool_works map), by the
 * process and the address of its struct uv__work. */
struct work_address {
    __u32 tgid;
    __u32 reserved;
    __u64 address;
};
struct work_item {
    __u64 key;  /* when it was submitted */
    __u64 from; /* which probe saw it submitted (bpf/sampler.bpf.c) */
};

/* A sample goes up as its first SAMPLE_HEADER_BYTES, frame_count addresses
 * and v8_frame_count struct v8_frame; a deferred one (walk_end
 * WALK_DEFERRED) then a struct stack_copy and copy_length bytes of stack. */
struct sample_event {
    __u32 event_type;
    __u32 pid;
    __u32 tid;
    __u16 cpu;
    __u16 v8_frame_count;
    __u64 time_ns;
    __s32 kernel_stack_id;
    __u16 frame_count;
    __u8 walk_end;
    __u8 user_mode;
    char comm[COMM_LEN];
    /* --off-cpu: 0 for a CPU sample; else a wait's nanoseconds off the CPU
     * (from leaving it until running again), its stack the thread's as
     * the wait ended, and the thread's waits too short to be recorded
     * one by one since its last record. */
    __u64 off_cpu_ns;
    __u64 short_wait_ns;
    __u32 short_waits;
    __u32 off_cpu_flags;
    /* --off-cpu, a threadpool's work item (its key: the time it was
     * submitted; 0: none): the one the thread runs, or with
     * SAMPLE_SUBMITS_WORK the one submitted, and parent_work the one whose
     * completion submits it. */
    __u64 work;
    __u64 parent_work;
    /* --off-cpu: the thread's time runnable but not running (preempted,
     * waiting for a CPU) since its last record. */
    __u64 runnable_ns;
    /* The thread's OpenTelemetry context record as the sample found it
     * (context_size bytes; 0: none). */
    __u8 context_size;
    __u8 context_kind; /* CONTEXT_OTEL, CONTEXT_V8 */
    /* The async functions awaiting the running one (struct v8_async_frame,
     * after the V8 frames), and V8_ASYNC_* flags. */
    __u8 async_count;
    __u8 async_flags;
    __u8 reserved[4];
    __u8 context[THREAD_CONTEXT_BYTES];
    __u64 addresses[MAX_FRAMES + 1];
    __u8 copy_space[MAX_V8_FRAMES * sizeof(struct v8_frame) + sizeof(struct stack_copy) + STACK_COPY_BYTES];
};

#endif
