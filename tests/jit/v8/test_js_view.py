"""The JS view: the runtime's frames hidden, their time given to the JS that called them."""

from profiler.jit.v8.js_view import GARBAGE_COLLECTOR, PROGRAM, js_only, js_stack
from profiler.kernel.events import WalkEnd
from profiler.model.profile import Frame, FrameKind, Profile, RunInfo, Sample


def native(name, module="node"):
    return Frame(name, module, FrameKind.NATIVE)


def js(name, inlined=False):
    return Frame(name, "[jit]", FrameKind.JIT, file="/app/main.js", line=3, tier="turbofan", inlined=inlined)


START = [native("_start"), native("__libc_start_main", "libc.so.6"), native("node::Start(int, char**)")]
ENTRY = [native("v8::internal::Execution::Call(...)"), Frame("[builtin] JSEntry", "[jit]", FrameKind.JIT, tier="builtin")]


def names(frames):
    return [frame.name for frame in frames]


def test_runtime_frames_between_and_above_js_go():
    stack = (
        START
        + ENTRY
        + [
            js("main"),
            Frame("[builtin] ArrayMap", "[jit]", FrameKind.JIT, tier="builtin"),
            js("step", inlined=True),
            native("v8::internal::Runtime_StringAdd(...)"),
            native("memcpy", "libc.so.6"),
        ]
    )
    assert names(js_stack(stack)) == ["main", "step"]  # the string work is step's


def test_an_addon_the_js_calls_stays_with_all_it_calls():
    stack = (
        START
        + ENTRY
        + [
            js("main"),
            native("v8::internal::Builtin_HandleApiCall(...)"),
            native("Compress", "addon.node"),
            native("deflate", "libz.so.1"),
            native("memcpy", "libc.so.6"),
            Frame("copy_page", "[kernel]", FrameKind.KERNEL),
        ]
    )
    assert names(js_stack(stack)) == ["main", "Compress", "deflate", "memcpy", "copy_page"]


def test_stacks_without_js_become_program_or_garbage_collector():
    profile = Profile(RunInfo(["node"], [1], 99))
    idle = START + [native("uv_run"), native("epoll_wait", "libc.so.6")]
    collecting = START + [native("v8::internal::Heap::CollectGarbage(...)"), native("v8::internal::Scavenger::Process()")]
    working = START + ENTRY + [js("main")]
    for time_ns, stack in enumerate([idle, collecting, working, working]):
        ids = tuple(profile.intern(frame) for frame in stack)
        profile.add(Sample(time_ns, 1, 1, "node", ids, WalkEnd.COMPLETE))
    view = js_only(profile)
    shown = [names(view.stack(sample)) for sample in view.samples]
    assert shown == [[PROGRAM.name], [GARBAGE_COLLECTOR.name], ["main"], ["main"]]
    assert [sample.time_ns for sample in view.samples] == [0, 1, 2, 3]
    assert view.samples[2].frame_ids is view.samples[3].frame_ids  # each distinct stack worked out once
    assert len(profile.frames) == len(set(profile.frames))  # the original is untouched
    assert all(names(profile.stack(sample))[0] == "_start" for sample in profile.samples)


def test_v8_logging_for_a_profiler_is_not_charged_to_the_js_that_compiled():
    """Writing a perf map or code log happens only because a profiler asked:
    the JS function whose compilation triggered it is not charged."""
    from profiler.jit.v8.js_view import PROFILING, shown_in_js_view

    stack = START + ENTRY + [js("main"), native("v8::internal::Compiler::Compile(...)")]
    logging = stack + [native("v8::internal::CodeEventLogger::CodeCreateEvent(...)"), native("write", "libc.so.6")]
    assert shown_in_js_view(logging) == [PROFILING]
    assert names(shown_in_js_view(stack)) == ["main"]


def test_the_garbage_collector_is_apart_whoever_allocated():
    """As DevTools shows it: the JS function that allocated did not collect."""
    from profiler.jit.v8.js_view import shown_in_js_view  # noqa: PLC0415

    allocating = START + ENTRY + [js("main"), native("v8::internal::Factory::NewFixedArray(int)")]
    collecting = allocating + [
        native("v8::internal::Heap::CollectGarbage(v8::internal::AllocationSpace, ...)"),
        native("v8::internal::ScavengerCollector::CollectGarbage()"),
    ]
    assert shown_in_js_view(collecting) == [GARBAGE_COLLECTOR]
    assert names(shown_in_js_view(allocating)) == ["main"]  # allocating is the function's own work


def test_async_callers_stay_as_devtools_shows_them():
    """The microtask runner goes; the async functions awaiting the code stay above it."""
    runner = [
        native("v8::internal::MicrotaskQueue::RunMicrotasks(...)"),
        Frame("[builtin] RunMicrotasks", "[jit]", FrameKind.JIT, tier="builtin"),
    ]
    callers = [
        Frame("[async] handler main.js:4", "[jit]", FrameKind.ASYNC, file="/app/main.js", line=5),
        Frame("[async] Promise.all (index 0)", "[jit]", FrameKind.ASYNC, tier="builtin"),
    ]
    stack = START + runner + callers + [js("parseRow")]
    assert names(js_stack(stack)) == ["[async] handler main.js:4", "[async] Promise.all (index 0)", "parseRow"]
