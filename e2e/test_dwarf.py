"""DWARF unwinding: complete stacks through code without frame pointers.

Tables are built on a thread and sampling does not wait for them, so each
test warms the (per-session) table cache with a first run; the measured run
then shows the steady state a user sees from the second run on.
"""

import random
import re

import pytest

from e2e.conftest import children_cpu_seconds, has_chain, read_folded, total
from profiler.model.raw import read_raw

START = ["_start", "__libc_start_main_impl", "__libc_start_call_main", "main"]


def share(lines, predicate) -> float:
    return sum(line.count for line in lines if predicate(line.frames)) / total(lines)


@pytest.fixture(scope="module")
def warmed(jitprof_module, fixtures_built):
    for mode in ("recursion", "dlopen", "remapped"):
        run = jitprof_module("-o", "warm.folded", "--", str(fixtures_built / "dwarf_cases"), mode, "0.2")
        assert run.returncode == 0, run.stderr
    return fixtures_built


def profile_case(jitprof, tmp_path, binary, mode, *flags, seconds="2"):
    run = jitprof(*flags, "-o", "out.folded", "--", str(binary), mode, seconds)
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    assert total(lines) >= 150
    return lines, run


def test_deep_recursion(jitprof, warmed, tmp_path):
    lines, run = profile_case(jitprof, tmp_path, warmed / "dwarf_cases", "recursion")
    assert share(lines, lambda frames: has_chain(frames, START)) >= 0.99, lines
    chain = ["main", "run_recursion"] + ["recurse"] * 13 + ["burn"]  # recurse(12) down to recurse(0)
    assert share(lines, lambda frames: has_chain(frames, chain)) >= 0.95
    # No walk fails, not even before the daemon has read the new mappings;
    # at most a sample taken inside execve has no stack (a known limit): its
    # registers are the old image's or the new one's, so its walk ends at a
    # read fault or at a pc in no mapping known yet.
    cut = re.search(r"([\d,]+) stacks cut short(?: \(([^)]*)\))?", run.stderr)
    assert cut is not None, run.stderr
    if cut.group(1) != "0":
        assert cut.group(2) in ("1 read fault", "1 no mapping"), run.stderr


def test_fresh_code_under_a_deep_stack_keeps_its_root(jitprof, warmed, tmp_path):
    """Code mapped since the maps were read, under 70 KiB of stack: the
    kernel defers the walk at the leaf, and the copy it sends must hold the
    whole stack (an ordinary deferred copy is 26.5 KiB), else each such
    sample loses its root as a JIT's new code under a deep recursion did."""
    lines, _ = profile_case(jitprof, tmp_path, warmed / "dwarf_cases", "fresh", "-F", "499", seconds="1.5")
    # The fixture spends its CPU under spin_in_fresh_code; a walk cut at the leaf
    # shows only the fresh code's frame.
    in_fresh = [line for line in lines if "spin_in_fresh_code" in line.frames or line.frames[-1].endswith("([jit])")]
    assert sum(line.count for line in in_fresh) / total(lines) >= 0.9, lines
    chain = START + ["run_fresh_code"] + ["descend"] * 401 + ["spin_in_fresh_code"]
    whole = sum(line.count for line in in_fresh if has_chain(line.frames, chain))
    assert whole / sum(line.count for line in in_fresh) >= 0.95, sorted((len(line.frames), line.count) for line in in_fresh)[:10]


def test_pages_of_stack_not_in_memory_do_not_cut_a_deferred_walk(jitprof, warmed, tmp_path):
    """The leaf is new code (its walks deferred to user space) in an 8 KiB
    frame it never touches, under a caller's 8 KiB buffer touched only at
    its top: the stack's pages at the leaf's sp, and between its frames and
    main's, were never in memory. The copy goes on above them, and the walk
    reaches main: cut at the first such page, a sample was one frame (a read
    fault), as the loader's open_verify was when its alloca reached a new page."""
    run = jitprof("-F", "499", "-o", "out.jitprof", "--", str(warmed / "dwarf_cases"), "holes", "1.5")
    assert run.returncode == 0, run.stderr
    profile = read_raw(tmp_path / "out.jitprof")
    assert profile.traffic.stack_copies >= 20, profile.traffic  # new code is walked from copies
    stacks = [
        [profile.frames[frame].name for frame in sample.frame_ids] for sample in profile.samples if sample.comm == "dwarf_cases"
    ]
    in_spin = [stack for stack in stacks if "spin_in_fresh_code" in stack or (len(stack) < 3 and stack[-1:] != ["settle"])]
    assert len(in_spin) >= 0.9 * len(stacks) and len(in_spin) >= 300, (len(in_spin), len(stacks))
    chain = [*START, "run_holes", "beneath_a_buffer", "spin_in_fresh_code"]
    cut = [stack for stack in in_spin if not has_chain(stack, chain)]
    assert len(cut) <= 0.01 * len(in_spin), cut[:5]


def test_qsort_comparator_callback(jitprof, warmed, tmp_path):
    lines, _ = profile_case(jitprof, tmp_path, warmed / "dwarf_cases", "qsort")
    assert share(lines, lambda frames: has_chain(frames, START)) >= 0.99

    def through_libc(frames):
        # glibc's msort_with_tmp is inlined into qsort_r, as `perf report --inline` shows it.
        return has_chain(frames, ["main", "run_qsort", "__qsort_r", "msort_with_tmp_[i]", "msort_with_tmp.part.0"]) and frames[
            -2:
        ] == [
            "compare_slowly",
            "burn",
        ]

    assert share(lines, through_libc) >= 0.9


def test_plt_call_into_dlopened_library(jitprof, warmed, tmp_path):
    lines, _ = profile_case(jitprof, tmp_path, warmed / "dwarf_cases", "dlopen")
    assert share(lines, lambda frames: has_chain(frames, START)) >= 0.99
    assert share(lines, lambda frames: has_chain(frames, ["main", "run_dlopen", "lib_entry", "lib_hot"])) >= 0.95


def test_a_library_opened_where_another_was_is_stepped_by_its_own_rows(jitprof, warmed, tmp_path):
    """The kernel keeps the rows it found for return addresses it meets
    again; libframe_b.so, opened where libframe_a.so was, returns to the
    same address from a frame of another size. Stepped by the first
    library's row, its stacks would stop there (a return address read from
    inside its buffer)."""
    run = jitprof("-F", "999", "-o", "out.folded", "--", str(warmed / "dwarf_cases"), "remapped", "2")
    assert run.returncode == 0, run.stderr
    opened = dict(line.split(" ", 1) for line in run.stdout.splitlines() if line.startswith("through_"))
    # The case holds only if the second library took the first one's place.
    assert opened.keys() == {"through_a", "through_b"} and opened["through_a"] == opened["through_b"], run.stdout
    lines = read_folded(tmp_path / "out.folded")
    for through in ("through_a", "through_b"):
        sampled = [line for line in lines if through in line.frames]
        assert total(sampled) >= 200, (through, lines)
        whole = [*START, "run_remapped", through, "remapped_work"]
        assert share(sampled, lambda frames, whole=whole: has_chain(frames, whole)) >= 0.95, (through, sampled)


def test_lazy_binding_through_the_dynamic_loaders_trampoline(jitprof, warmed, tmp_path):
    """With LD_BIND_NOT=1 every call through the PLT is resolved again:
    _dl_runtime_resolve realigns the stack and keeps its CFA in rbx, which
    _dl_fixup and the lookup below it save and reuse."""
    run = jitprof("-o", "out.folded", "--", "env", "LD_BIND_NOT=1", str(warmed / "dwarf_cases"), "lazy", "2")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    assert total(lines) >= 150

    def through_trampoline(frames):
        return any(frame.startswith("_dl_runtime_resolve") for frame in frames)

    # Almost all of its time: every call looks its symbol up again.
    assert share(lines, through_trampoline) >= 0.5, lines
    assert share(lines, lambda frames: has_chain(frames, START)) >= 0.99, lines
    # Each of them whole, from _start through the call that went through the
    # PLT: lib_entry's, or one of the program's own calls into libc (main's
    # strcmp and atof, the library's dlopen, the clock) bound lazily as well.
    calls_through_the_plt = (
        ["main"],
        ["main", "run_lazy_binding"],
        ["main", "run_lazy_binding", "lib_entry"],
        ["main", "run_lazy_binding", "cpu_seconds"],
        ["main", "run_lazy_binding", "open_lib_entry"],
        ["main", "run_lazy_binding", "settle"],
    )
    for line in lines:
        if through_trampoline(line.frames):
            trampoline = next(index for index, frame in enumerate(line.frames) if frame.startswith("_dl_runtime_resolve"))
            callers = line.frames[:trampoline]
            assert has_chain(callers, START) and callers[callers.index("main") :] in calls_through_the_plt, line
    # Nearly all of them lib_entry's.
    assert share(lines, lambda frames: through_trampoline(frames) and has_chain(frames, ["run_lazy_binding", "lib_entry"])) >= 0.5


def test_signal_handler(jitprof, warmed, tmp_path):
    lines, _ = profile_case(jitprof, tmp_path, warmed / "dwarf_cases", "signal")
    assert share(lines, lambda frames: has_chain(frames, START)) >= 0.99
    in_handler = ["__restore_rt", "on_signal", "handler_work", "burn"]
    handler_share = share(lines, lambda frames: has_chain(frames, in_handler))
    assert handler_share >= 0.1  # the handler burns ~5 ms after every 20 ms of CPU
    # Below the signal frame: the interrupted code, then the real callers.
    assert (
        share(lines, lambda frames: has_chain(frames, in_handler) and has_chain(frames, ["main", "run_signal", "spin"]))
        >= handler_share * 0.95
    )


@pytest.mark.parametrize("mode", ["recursion", "qsort", "dlopen", "signal"])
def test_frame_pointers_alone_cannot(jitprof, warmed, tmp_path, mode):
    """--no-dwarf shows the truncation: DWARF is what completes these stacks."""
    lines, run = profile_case(jitprof, tmp_path, warmed / "dwarf_cases", mode, "--no-dwarf")
    assert share(lines, lambda frames: "main" in frames) <= 0.1
    assert "stacks cut short (" in run.stderr


@pytest.fixture
def compressible_file(tmp_path):
    rng = random.Random(1)
    words = [bytes(rng.choice(b"abcdefghij") for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    path = tmp_path / "input.txt"
    with open(path, "wb") as handle:
        for _ in range(60):
            handle.write(b" ".join(rng.choice(words) for _ in range(60000)))
    return path


@pytest.mark.parametrize("tool", [["xz", "-6", "-T1", "-k", "-f"], ["bzip2", "-9", "-k", "-f"]])
def test_distribution_compressors(jitprof, tmp_path, compressible_file, tool):
    command = [*tool, str(compressible_file)]
    jitprof("-d", "2", "-o", "warm.folded", "--", *command)  # builds the tables
    # Stopped after 3 s (bzip2 exits 1 on SIGTERM), under a shell that then
    # prints its CPU time: at 99 Hz, most of that time is in the profile.
    run = jitprof("-o", "out.folded", "--", "sh", "-c", 'timeout 3 "$@"; times', "sh", *command)
    assert run.returncode == 0, run.stderr
    cpu_s = children_cpu_seconds(run.stdout)
    lines = [line for line in read_folded(tmp_path / "out.folded") if line.frames[0] == tool[0]]
    assert total(lines) >= max(30, 0.7 * 99 * cpu_s), (total(lines), cpu_s)
    # Stripped binaries: their own frames are unnamed, but the walk must pass
    # through them to libc's start code, from their entry point, named as
    # the ELF header says it is (no symbol does).
    assert share(lines, lambda frames: has_chain(frames, ["_start", "__libc_start_main_impl", "__libc_start_call_main"])) >= 0.95


def test_python_interpreter(jitprof, tmp_path):
    script = "import sys, time\nend = time.time() + float(sys.argv[1])\nwhile time.time() < end:\n    sum(i * i for i in range(1000))\n"
    # python3.11's cold table takes ~4 s after libc's ~1.5 s: warm for 8 s.
    jitprof("-d", "8", "-o", "warm.folded", "--", "/usr/bin/python3", "-c", script, "10")
    run = jitprof("-o", "out.folded", "--", "/usr/bin/python3", "-c", script, "3")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    assert (
        share(
            lines,
            lambda frames: has_chain(frames, ["__libc_start_main_impl", "__libc_start_call_main"]) and "Py_BytesMain" in frames,
        )
        >= 0.95
    )
    assert share(lines, lambda frames: "_PyEval_EvalFrameDefault" in frames) >= 0.8


def test_a_program_making_threads_is_walked_through_its_clones(jitprof, warmed, tmp_path):
    """glibc's clone3 gives the instructions after its system call no CFI,
    and a thread-making parent spends its clone's whole system call there
    (the new thread its first moments): its stacks reach main through
    pthread_create, a new thread's is the clone alone, each whole. And the
    threads made, a thousand times a second, are not events the kernel
    sends: they filled its buffer, and half the samples were lost."""
    command = f'"{warmed / "dwarf_cases"}" threads 1.5; times'  # the program's CPU time, on the last line
    run = jitprof("-F", "999", "-o", "out.jitprof", "--", "sh", "-c", command)
    assert run.returncode == 0, run.stderr
    cpu_s = children_cpu_seconds(run.stdout)
    profile = read_raw(tmp_path / "out.jitprof")
    assert not [warning for warning in profile.info.warnings if "lost" in warning], profile.info.warnings
    samples = [sample for sample in profile.samples if sample.comm == "dwarf_cases"]
    # Some 60-75 % of its CPU time is sampled here, where the other cases get all of theirs (perf record -a
    # about 85 %): not known why. The check that no sample is lost is the strict one.
    assert len(samples) >= 0.35 * 999 * cpu_s, (len(samples), cpu_s)
    assert profile.traffic.records <= profile.traffic.samples + 50, profile.traffic  # samples, a few processes' events

    def names(sample) -> list[str]:
        return [profile.frames[frame].name for frame in sample.frame_ids]

    in_clone = [sample for sample in samples if "clone" in names(sample)[-1]]
    assert len(in_clone) >= 0.2 * len(samples), (len(in_clone), len(samples))
    parents = [sample for sample in in_clone if len(sample.frame_ids) > 1]
    assert len(parents) >= 0.5 * len(in_clone), (len(parents), len(in_clone))
    for sample in in_clone:
        assert sample.walk_end.name == "COMPLETE", (sample.walk_end, names(sample))
        if len(sample.frame_ids) > 1:  # a parent's
            assert has_chain(names(sample), [*START, "run_threads", "make_thread"]), names(sample)
