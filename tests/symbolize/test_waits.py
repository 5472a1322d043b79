"""--off-cpu in user space: what wait records and threadpool records become
in the profile (the kernel's side is e2e/test_off_cpu.py)."""

from __future__ import annotations

from profiler.jit.jvm.idle import waits_for_work as jvm_waits_for_work
from profiler.jit.v8 import threadpool
from profiler.jit.v8.idle import waits_for_work as node_waits_for_work
from profiler.kernel.events import RawSample, WalkEnd
from profiler.model.profile import Frame, FrameKind, Profile, RunInfo, Sample
from profiler.symbolize.waits import WaitRecorder, duration_text, is_wait_record, needs_stack, within_run
from profiler.symbolize.work_charges import WorkCharges
from tests.helpers import native


def js(name: str, file: str = "/app/server.js", line: int = 3) -> Frame:
    return Frame(f"{name} {file.rsplit('/', 1)[-1]}:{line}", "[jit]", FrameKind.JIT, file=file, line=line)


def node_js(name: str, file: str) -> Frame:
    return Frame(f"{name} {file}:10", "[jit]", FrameKind.JIT, file=file, line=10)


EVENT_LOOP = [
    native("main"),
    native("node::SpinEventLoopInternal(node::Environment*)"),
    native("uv_run"),
    native("uv__io_poll"),
    native("epoll_wait"),
]


def test_node_event_loop_with_nothing_to_do_is_idle():
    assert node_waits_for_work(EVENT_LOOP)


def test_a_loop_run_under_javascript_is_blocking():
    """execSync runs a loop of its own under the JS that called it."""
    stack = [native("main"), js("runChild"), native("node::SyncProcessRunner::Spawn"), native("uv_run"), native("uv__io_poll")]
    assert not node_waits_for_work(stack)


def test_pool_threads_waiting_for_work_are_idle_but_not_waiting_in_it():
    idle = [native("start_thread"), native("worker"), native("uv_cond_wait"), native("pthread_cond_wait")]
    assert node_waits_for_work(idle)
    platform = [
        native("start_thread"),
        native("node::(anonymous namespace)::PlatformWorkerThread(void*)"),
        native("uv_cond_wait"),
    ]
    assert node_waits_for_work(platform)
    busy = [native("start_thread"), native("worker"), native("uv__fs_work"), native("uv_cond_wait")]
    assert not node_waits_for_work(busy)


def test_jvm_pool_and_vm_threads_waiting_are_idle_but_a_monitor_is_not():
    pool = [Frame("java.util.concurrent.ThreadPoolExecutor.getTask()", "[jit]", FrameKind.JIT), native("Unsafe_Park")]
    assert jvm_waits_for_work(pool)
    assert jvm_waits_for_work([native("VMThread::run()"), native("VMThread::wait_for_operation()")])
    blocked = [Frame("Blocked.waitForLock()", "[jit]", FrameKind.JIT), native("ObjectMonitor::EnterI(JavaThread*)")]
    assert not jvm_waits_for_work(blocked)


def raw(**fields: object) -> RawSample:
    base: dict[str, object] = {
        "pid": 5,
        "tid": 6,
        "cpu": 0,
        "time_ns": 1,
        "comm": "app",
        "addresses": (0x10,),
        "walk_end": WalkEnd.COMPLETE,
        "kernel_stack_id": -1,
        "user_mode": False,
    }
    return RawSample(**(base | fields))  # type: ignore[arg-type]


def named(profile: Profile, frames: list[Frame], record: RawSample) -> Sample:
    ids = tuple(profile.intern(frame) for frame in frames)
    return Sample(record.time_ns, record.pid, record.tid, record.comm, ids, WalkEnd.COMPLETE)


def off_cpu_profile(keep_idle: bool = False) -> Profile:
    return Profile(RunInfo(["app"], [5], 99, off_cpu=True, idle_kept=keep_idle, shortest_wait_ns=1_000_000))


def leaf_names(profile: Profile) -> list[tuple[str, int]]:
    return [(profile.frames[sample.frame_ids[-1]].name, sample.off_cpu_ns) for sample in profile.samples]


def test_a_wait_ends_in_off_cpu_with_its_time_and_the_threads_short_waits_beside():
    profile = off_cpu_profile()
    recorder = WaitRecorder(profile, node_waits_for_work)
    wait = raw(off_cpu_ns=40_000_000, short_wait_ns=700_000, short_waits=9)
    recorder.add(wait, named(profile, [native("main"), native("read")], wait))
    assert leaf_names(profile) == [("(waits under 1 ms)", 700_000), ("(off-CPU)", 40_000_000)]
    assert profile.waits.short_waits == 9


def test_idle_is_left_out_unless_kept():
    for keep in (False, True):
        profile = off_cpu_profile(keep)
        wait = raw(off_cpu_ns=2_000_000_000)
        WaitRecorder(profile, node_waits_for_work).add(wait, named(profile, EVENT_LOOP, wait))
        assert leaf_names(profile) == ([("(idle)", 2_000_000_000)] if keep else [])
        assert profile.waits.idle_ns == 2_000_000_000


def test_time_runnable_goes_under_the_stack_it_came_with_and_the_cpu_sample_stays():
    profile = off_cpu_profile()
    sample = raw(runnable_ns=3_000_000)
    WaitRecorder(profile, node_waits_for_work).add(sample, named(profile, [native("main"), native("burn")], sample))
    stacks = [([profile.frames[i].name for i in s.frame_ids], s.off_cpu_ns) for s in profile.samples]
    assert stacks == [(["main", "burn", "(runnable, waiting for a CPU)"], 3_000_000), (["main", "burn"], 0)]


def test_time_runnable_walked_where_it_was_preempted_is_no_cpu_sample():
    """The kernel's record of a preemption (OFF_CPU_PREEMPTED): its time under
    the stack, and no CPU sample of its own."""
    profile = off_cpu_profile()
    record = raw(runnable_ns=40_000_000, preempted=True, short_wait_ns=200_000, short_waits=2)
    assert is_wait_record(record) and needs_stack(record)
    WaitRecorder(profile, node_waits_for_work).add(record, named(profile, [native("main"), native("burn")], record))
    stacks = [([profile.frames[i].name for i in s.frame_ids], s.off_cpu_ns) for s in profile.samples]
    assert stacks == [(["main", "burn", "(runnable, waiting for a CPU)"], 40_000_000), (["(waits under 1 ms)"], 200_000)]
    assert profile.waits.runnable_ns == 40_000_000
    # Its time taken by a CPU sample meanwhile: still no CPU sample of its own.
    emptied = raw(preempted=True)
    assert is_wait_record(emptied)
    WaitRecorder(profile, node_waits_for_work).add(emptied, named(profile, [native("main"), native("burn")], emptied))
    assert len(profile.samples) == 2


def test_records_of_time_only_have_no_stack():
    record = raw(addresses=(), short_wait_ns=5, time_only=True)
    assert is_wait_record(record) and not needs_stack(record)
    assert needs_stack(raw()) and not is_wait_record(raw())
    assert not needs_stack(raw(off_cpu_ns=9, stack_moved=True))


def test_durations_read_as_people_write_them():
    assert [duration_text(value) for value in (1_000_000, 250_000, 2_500_000_000, 10)] == ["1 ms", "250 µs", "2.5 s", "10 ns"]


READ_FILES = [
    native("main"),
    js("readFiles"),
    node_js("readFile", "node:fs"),
    native("node::fs::Open"),
    native("uv__work_submit"),
]
CONTINUED = [native("main"), native("uv__work_done"), node_js("readFileAfterOpen", "node:fs"), native("uv__work_submit")]
POOL_READ = [native("start_thread"), native("worker"), native("uv__fs_work"), native("uv__fs_read"), native("read")]


def test_node_names_work_by_the_api_the_program_called():
    assert threadpool.label(READ_FILES) == "fs.readFile"
    pbkdf2 = [js("hashPasswords"), node_js("pbkdf2", "node:internal/crypto/pbkdf2"), native("uv_queue_work")]
    assert threadpool.label(pbkdf2) == "crypto.pbkdf2"
    # util.promisify's wrapper is not the API the program called.
    wrapped = [js("parseRow"), node_js("fn", "node:internal/util"), node_js("(anonymous)", "node:internal/util"), *pbkdf2[1:]]
    assert threadpool.label(wrapped) == "crypto.pbkdf2"
    assert threadpool.starts_work(READ_FILES) and not threadpool.starts_work(CONTINUED)
    assert threadpool.work_begins(POOL_READ) == 2
    assert threadpool.work_begins([native("start_thread"), native("worker"), native("uv_cond_wait")]) is None


def test_a_pool_threads_work_is_charged_to_the_javascript_that_queued_its_chain():
    profile = off_cpu_profile()
    charges = WorkCharges(profile)
    first = raw(tid=5, submits_work=True, work=100)
    charges.submitted(first, named(profile, READ_FILES, first))
    second = raw(tid=5, submits_work=True, work=200, parent_work=100, time_ns=2)
    charges.submitted(second, named(profile, CONTINUED, second))
    charges.started(raw(tid=9, work_started=True, work=200, off_cpu_ns=30_000_000, addresses=()))
    on_pool = raw(tid=9, work=200, off_cpu_ns=4_000_000)
    charged = charges.charged(on_pool, named(profile, POOL_READ, on_pool))
    names = [profile.frames[frame_id].name for frame_id in charged.frame_ids]
    assert names == [
        "main",
        "readFiles server.js:3",
        "readFile node:fs:10",
        "node::fs::Open",
        "uv__work_submit",
        "[threadpool] fs.readFile",
        "uv__fs_work",
        "uv__fs_read",
        "read",
    ]
    assert charged.tid == 9 and charged.comm == "app"
    (queued,) = profile.samples
    assert [profile.frames[i].name for i in queued.frame_ids][-2:] == ["[threadpool] fs.readFile", "(queued)"]
    assert queued.off_cpu_ns == 30_000_000 and queued.tid == 5


def test_a_pool_thread_between_items_is_its_own():
    profile = off_cpu_profile()
    charges = WorkCharges(profile)
    first = raw(submits_work=True, work=100)
    charges.submitted(first, named(profile, READ_FILES, first))
    idle = raw(tid=9, work=100, off_cpu_ns=9)
    stack = named(profile, [native("start_thread"), native("worker"), native("uv_cond_wait")], idle)
    assert charges.charged(idle, stack) is stack
    unknown = raw(tid=9, work=555)
    assert charges.charged(unknown, named(profile, POOL_READ, unknown)).frame_ids == named(profile, POOL_READ, unknown).frame_ids


STARTED_NS = 10_000_000_000  # when sampling began


def test_a_wait_reported_before_sampling_began_is_left_out():
    """Attached, a process's waits are timed from a little before sampling
    begins: those the run did not see do not count."""
    record = raw(time_ns=STARTED_NS - 1, off_cpu_ns=50_000_000, runnable_ns=1_000)
    assert not within_run(record, STARTED_NS)


def test_a_wait_that_began_before_sampling_counts_from_then():
    record = raw(time_ns=STARTED_NS + 30_000_000, off_cpu_ns=80_000_000, runnable_ns=5_000_000)
    assert within_run(record, STARTED_NS)
    assert (record.runnable_ns, record.off_cpu_ns, record.time_only) == (5_000_000, 25_000_000, False)


def test_a_wait_with_only_its_wake_up_in_the_run_keeps_no_stack():
    """Its stack is the wait's, and none of the wait is in the run: with no
    stack it cannot pass for a CPU sample."""
    record = raw(time_ns=STARTED_NS + 2_000_000, off_cpu_ns=80_000_000, runnable_ns=5_000_000)
    assert within_run(record, STARTED_NS)
    assert (record.runnable_ns, record.off_cpu_ns, record.time_only) == (2_000_000, 0, True)
    assert not needs_stack(record)


def test_short_waits_are_cut_with_their_count():
    record = raw(time_ns=STARTED_NS + 3_000_000, short_wait_ns=6_000_000, short_waits=12, time_only=True)
    assert within_run(record, STARTED_NS)
    assert (record.short_wait_ns, record.short_waits) == (3_000_000, 6)


def test_a_wait_within_the_run_and_queued_items_keep_their_time():
    inside = raw(time_ns=STARTED_NS + 90_000_000, off_cpu_ns=80_000_000, runnable_ns=5_000_000)
    assert within_run(inside, STARTED_NS) and (inside.off_cpu_ns, inside.runnable_ns) == (80_000_000, 5_000_000)
    queued = raw(time_ns=STARTED_NS + 1, off_cpu_ns=80_000_000, work=7, work_started=True)
    assert within_run(queued, STARTED_NS) and queued.off_cpu_ns == 80_000_000
