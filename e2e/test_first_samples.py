"""Complete stacks from a process's first instruction.

Before jitprof has read a new process's maps, or while a file's unwind table
is being built, the kernel sends a copy of the stack instead of a cut-short
walk, and jitprof finishes the walk once it knows the code. These runs start
with an empty cache, as a new user's first runs do: every table is built
while the processes run.
"""

from pathlib import Path

from profiler.kernel.events import WalkEnd
from profiler.model.raw import read_raw

ROOT = Path(__file__).resolve().parent.parent


def test_short_processes_one_after_another(jitprof, tmp_path, fixtures_built):
    """Ten node processes of about 150 ms, then ten native programs built
    -O2 -fomit-frame-pointer that start working at once, at 199 Hz."""
    node_loop = f"for i in 1 2 3 4 5 6 7 8 9 10; do node {ROOT}/fixtures/js/workload.js 5 >/dev/null; done"
    native_loop = f"for i in 1 2 3 4 5 6 7 8 9 10; do {fixtures_built}/dwarf_cases recursion 0.15 now; done"
    run = jitprof(
        "-F",
        "199",
        "-o",
        "out.jitprof",
        "--",
        "sh",
        "-c",
        f"{node_loop}; {native_loop}",
        env={"JITPROF_CACHE_DIR": str(tmp_path / "empty-cache")},
    )
    assert run.returncode == 0, run.stderr
    profile = read_raw(tmp_path / "out.jitprof")
    node = [sample for sample in profile.samples if sample.comm == "node"]
    native = [sample for sample in profile.samples if sample.comm == "dwarf_cases"]
    assert len(node) >= 150 and len(native) >= 150, (len(node), len(native))
    # The kernel could not finish many of these walks itself: they came up as copies.
    assert profile.traffic.stack_copies >= 20, profile.traffic
    short = node + native
    cut_short = [sample for sample in short if sample.walk_end.cut_short]
    assert len(cut_short) <= 0.01 * len(short), profile.walk_ends
    # Every native sample with a user stack (not one taken in _exit, after
    # the process's memory went, nor one inside execve, before the new
    # program's stack is there: a known limit docs/limits.md states) reaches main,
    # or the loader's start or libc's exit around it, from the first one on.
    # A loaded machine makes execve slower, and hits it more.
    names = profile.frames
    in_execve = [
        sample
        for sample in native
        if sample.walk_end is WalkEnd.READ_FAULT and [names[frame].name for frame in sample.frame_ids] == ["execve"]
    ]
    with_stack = [sample for sample in native if sample.walk_end is not WalkEnd.THREAD_EXITING and sample not in in_execve]
    assert len(in_execve) <= 10, len(in_execve)  # one exec each at most

    stacks = {id(sample): [names[frame].name for frame in sample.frame_ids] for sample in with_stack}

    # The truth outside main: the dynamic loader before it (_start >
    # _dl_start > ...) and libc's exit after it (_start > ... > exit). Such a
    # stack is whole when it is read from its leaf to _start.
    def outside_main(stack: list[str]) -> bool:
        return "main" not in stack and stack[:1] == ["_start"] and ("_dl_start" in stack or "exit" in stack)

    around_main = [sample for sample in with_stack if outside_main(stacks[id(sample)])]
    assert all(sample.walk_end is WalkEnd.COMPLETE for sample in around_main), [stacks[id(s)] for s in around_main]
    in_main = [sample for sample in with_stack if not outside_main(stacks[id(sample)])]
    missed = [stacks[id(sample)] for sample in in_main if "main" not in stacks[id(sample)]]
    assert len(missed) <= 0.01 * len(in_main), missed
    chain = ["main", "run_recursion", *["recurse"] * 13, "burn"]
    first = min(with_stack, key=lambda sample: sample.time_ns)
    assert any(
        stacks[id(sample)][-len(chain) :] == chain for sample in sorted(with_stack, key=lambda sample: sample.time_ns)[:10]
    ), stacks[id(first)]


def test_first_samples_of_a_frame_pointer_program(jitprof, tmp_path, fixtures_built):
    """At 999 Hz the first samples fall while the dynamic loader and libc
    start up, before jitprof has read the new image's maps."""
    run = jitprof(
        "-F",
        "999",
        "-o",
        "out.jitprof",
        "--",
        str(fixtures_built / "workload"),
        "40",
        env={"JITPROF_CACHE_DIR": str(tmp_path / "empty-cache")},
    )
    assert run.returncode == 0, run.stderr
    profile = read_raw(tmp_path / "out.jitprof")
    samples = sorted((sample for sample in profile.samples if sample.comm == "workload"), key=lambda sample: sample.time_ns)
    assert len(samples) >= 20
    assert profile.traffic.stack_copies >= 1  # the first ones were walked in user space
    first = samples[:10]
    assert [sample.walk_end for sample in first] == [WalkEnd.COMPLETE] * len(first), [
        (index, sample.walk_end.name, [profile.frames[frame].name for frame in sample.frame_ids])
        for index, sample in enumerate(first)
        if sample.walk_end is not WalkEnd.COMPLETE
    ]
    in_work = [sample for sample in samples[:50] if profile.frames[sample.frame_ids[-1]].name == "inner"]
    assert in_work
    for sample in in_work:
        assert [profile.frames[frame].name for frame in sample.frame_ids][-4:] == ["main", "outer", "middle", "inner"]


def test_forked_children_start_with_their_parents_code(jitprof, tmp_path, fixtures_built):
    """Ten children forked one after another (no exec), in code without
    frame pointers: each is walked with its parent's tables from its first
    sample, before jitprof has read its maps."""
    run = jitprof("-F", "999", "--by-pid", "-o", "out.jitprof", "--", str(fixtures_built / "dwarf_cases"), "forks", "1")
    assert run.returncode == 0, run.stderr
    profile = read_raw(tmp_path / "out.jitprof")
    parent = profile.info.pids[0]
    children = [sample for sample in profile.samples if sample.pid != parent]
    assert len({sample.pid for sample in children}) >= 8 and len(children) >= 500
    whole = [sample for sample in children if not sample.walk_end.cut_short]
    assert len(whole) >= 0.99 * len(children), profile.walk_ends
    for sample in whole:
        if sample.walk_end is WalkEnd.COMPLETE:
            names = [profile.frames[frame].name for frame in sample.frame_ids]
            assert names[:5] == ["_start", "__libc_start_main_impl", "__libc_start_call_main", "main", "run_forks"], names
    # Walked in the kernel, not copied up: the copies are the parent's first samples.
    assert profile.traffic.stack_copies <= 20, profile.traffic


def test_code_a_short_node_compiles_just_before_it_exits(jitprof, tmp_path):
    """Node processes that OSR-compile a hot loop and exit within ~100 ms:
    the code space V8 grows while jitprof's last read of the maps is still
    being waited for is known from the kernel's mapping events, not lost
    with the process."""
    loop = 'for i in $(seq 20); do node -e "let x = 0; for (let i = 0; i < 2e6; i++) x += i"; done'
    run = jitprof("-F", "499", "-o", "out.jitprof", "--", "sh", "-c", loop)
    assert run.returncode == 0, run.stderr
    profile = read_raw(tmp_path / "out.jitprof")
    node = [sample for sample in profile.samples if sample.comm == "node"]
    no_mapping = [sample for sample in node if sample.walk_end is WalkEnd.NO_MAPPING]
    assert len(node) >= 300 and len(no_mapping) <= 0.01 * len(node), (len(node), profile.walk_ends)
