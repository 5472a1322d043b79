"""Java named from HotSpot's own structures: JVMs started with
-XX:+PreserveFramePointer and nothing else, attached with --pid and seen
under --all, on each JDK installed (17; 25 where Temurin's is). What the
frames must say: the inlined chain in order with the inlined methods
marked, the leaf's line, interpreted frames named under -Xint, the same
names a perf map gives; and under class churn and deoptimization, never a
method that was not running. The JVM is asked nothing: no attach listener
thread, no perf map."""

from __future__ import annotations

import re
import selectors
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from e2e.conftest import ROOT, cpu_seconds_in
from profiler.jit.jvm.hotspot.layout import layout_of
from profiler.jit.jvm.hotspot.objects import HotSpotReader
from profiler.jit.jvm.hotspot_source import INLINED_UNKNOWN, HotSpotStructures, libjvm_of
from profiler.jit.jvm.runtime import JAVA
from profiler.kernel.events import WalkEnd
from profiler.kernel.process_memory import ProcessMemory
from profiler.model.profile import FrameKind, Profile
from profiler.model.raw import read_raw

CLASSES = ROOT / "fixtures" / "build" / "java"
SOURCE = ROOT / "fixtures" / "java" / "Inlined.java"
JDKS = {"17": Path("/usr/lib/jvm/java-17-openjdk-amd64"), "25": Path("/usr/lib/jvm/temurin-25-jdk-amd64")}
CHAIN = ["Inlined.run(long)", "Inlined.step(long)", "Inlined.leaf(long)"]
LEAF_LOOP = {number for number, text in enumerate(SOURCE.read_text().splitlines(), 1) if "// LEAF" in text}  # leaf's loop
_SPIN = re.compile(r"\.spin(\d{4})\(")


def java_of(jdk: str) -> str:
    java = JDKS[jdk] / "bin" / "java"
    if not java.exists():
        pytest.skip(f"JDK {jdk} is not installed here ({JDKS[jdk]})")
    if not (CLASSES / "Inlined.class").exists():
        pytest.skip("the Java fixtures are not built (javac missing)")
    return str(java)


def wait_for_line(process: subprocess.Popen, wanted: str, timeout: float = 60.0) -> list[str]:
    """The lines the process printed up to the one starting with wanted."""
    lines: list[str] = []
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not selector.select(timeout=deadline - time.monotonic()):
            break
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.strip())
        if line.startswith(wanted):
            return lines
    raise AssertionError(f"the program never printed {wanted!r}: {lines[-5:]}")


def warm_jvm(background, tmp_path: Path, java: str, *arguments: str) -> subprocess.Popen:
    """A fixture JVM (java arguments..., its class path given), returned once it prints "warm"."""
    target = background(
        java, *arguments[:-2], "-cp", str(CLASSES), *arguments[-2:], cwd=tmp_path, stdout=subprocess.PIPE, text=True
    )
    wait_for_line(target, "warm")
    return target


def stop_jvm(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)


def java_samples(profile: Profile, pid: int, fixture: str = "Inlined", cut: bool = False) -> list[list]:
    """The frames (root first) of the pid's samples that ran the fixture's
    Java code, whole stacks (cut: those the walk cut short, and says so: a
    leaf caught in a compiled method's prologue)."""
    found = []
    for sample in profile.samples:
        if sample.pid != pid or sample.walk_end.cut_short != cut:
            continue
        frames = [profile.frames[index] for index in sample.frame_ids]
        if any(frame.name.startswith(f"{fixture}.") for frame in frames):
            found.append(frames)
    return found


def chained(frames: list) -> tuple[bool, bool]:
    """(run > step > leaf in order, step and leaf marked inlined)"""
    names = [frame.name for frame in frames]
    for index in range(len(names) - 2):
        if names[index : index + 3] == CHAIN:
            return True, frames[index + 1].inlined and frames[index + 2].inlined
    return False, False


def asked_nothing(pid: int) -> None:
    threads = [path.read_text().strip() for path in Path(f"/proc/{pid}/task").glob("*/comm")]
    assert "Attach Listener" not in threads, "jitprof attached to the JVM"
    assert not Path(f"/tmp/perf-{pid}.map").exists()
    assert not Path(f"/tmp/.java_pid{pid}").exists()


RECORD_ALL_PCS = ("-XX:+UnlockDiagnosticVMOptions", "-XX:+DebugNonSafepoints")


def java_cpu_seconds(pid: int) -> float:
    """The CPU time of the JVM's threads named java: its main Java thread (and the launcher's, which waits)."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip() == "java":
                total += cpu_seconds_in(task / "stat")
        except OSError:
            continue
    return total


def enough_samples(java_cpu_s: float) -> float:
    """What a 499 Hz run must hold of the Java thread's work: half of what
    its CPU time in the run allows (jitprof's start is inside that time; a
    loaded machine gives the JVM less of it), and 100 at least to judge by."""
    return max(100.0, 0.5 * 499 * java_cpu_s)


def told(wrong: list[str], samples: list[list]) -> str:
    """The wrong samples' stacks in full (pytest cuts a list's repr in the middle of a stack)."""
    return f"{len(wrong)} of {len(samples)} samples wrong; the first:\n" + "\n".join(wrong[:3])


def wrong_chains(samples: list[list], truth: list[str]) -> list[str]:
    """The samples whose frames of the fixture's class are not the start of
    the true chain (truth, outermost first), followed at most by the frame
    that says the inlined methods are not known: nothing shown may be
    another chain. A JIT frame left unnamed stands for one frame not known
    (marked so, not another chain). Each wrong sample's whole stack, root
    first, with where each frame was found."""
    fixture = truth[0].split(".")[0] + "."
    wrong = []
    for frames in samples:
        names = [
            UNNAMED if method_not_known(frame) else frame.name
            for frame in frames
            if frame.name.startswith(fixture) or frame.name == INLINED_UNKNOWN.name or method_not_known(frame)
        ]
        known = names[:-1] if names and names[-1] == INLINED_UNKNOWN.name else names
        while len(known) > len(truth) and known[-1] == UNNAMED:
            known.pop()  # a stub past the leaf, not one of the chain's
        if (
            INLINED_UNKNOWN.name in known
            or len(known) > len(truth)
            or any(name not in (UNNAMED, true) for name, true in zip(known, truth))
        ):
            wrong.append(" > ".join(f"{frame.name} [{frame.module}, {frame.kind.name}]" for frame in frames))
    return wrong


UNNAMED = "?"


def unnamed_jit(frame) -> bool:
    return frame.kind is FrameKind.UNKNOWN and frame.module == "[jit]"


def method_not_known(frame) -> bool:
    """A JIT frame whose method is not known: unnamed code, or the
    interpreter where its Method could not be vouched for at the sample's
    time (read first after a safepoint that may have freed it)."""
    return unnamed_jit(frame) or (frame.name == "[interpreter]" and frame.module == "[jit]")


@pytest.mark.parametrize("jdk", sorted(JDKS))
@pytest.mark.parametrize(("mode", "recorded"), [("--pid", True), ("--all", True), ("--pid", False)])
def test_compiled_java_named_with_its_inlined_chain(jitprof, tmp_path, background, jdk, mode, recorded):
    """With -XX:+DebugNonSafepoints HotSpot records the inlined methods at
    every pc: the chain in order, inlined methods marked, the leaf's line.
    Without it (the default), only at safepoints and calls: elsewhere the
    compiled method is shown with "(inlined methods unknown)" below it,
    never the nearest record's chain, and the run says how to see them."""
    java = java_of(jdk)
    flags = RECORD_ALL_PCS if recorded else ()
    target = background(
        java,
        "-XX:+PreserveFramePointer",
        *flags,
        "-cp",
        str(CLASSES),
        "Inlined",
        "60",
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
    )
    wait_for_line(target, "warm")
    scope = ["--pid", str(target.pid)] if mode == "--pid" else ["--all"]
    cpu_before = java_cpu_seconds(target.pid)
    run = jitprof("-F", "499", "-d", "3", *scope, "-o", "out.jitprof")
    java_cpu = java_cpu_seconds(target.pid) - cpu_before
    assert run.returncode == 0, run.stderr
    assert "perf map" not in run.stderr and "restart" not in run.stderr, run.stderr
    asked_nothing(target.pid)
    stop_jvm(target)
    samples = java_samples(read_raw(tmp_path / "out.jitprof"), target.pid)
    assert len(samples) >= enough_samples(java_cpu), (len(samples), java_cpu)
    wrong = wrong_chains(samples, ["Inlined.main(java.lang.String[])", *CHAIN])
    assert wrong == [], told(wrong, samples)
    unnamed = sum(1 for sample in samples if any(unnamed_jit(frame) for frame in sample))
    assert unnamed / len(samples) <= 0.02
    if not recorded:
        assert any(frames[-1].name == INLINED_UNKNOWN.name for frames in samples)
        assert "-XX:+DebugNonSafepoints" in run.stderr, run.stderr
        return
    assert "DebugNonSafepoints" not in run.stderr, run.stderr
    results = [chained(frames) for frames in samples]
    in_order = sum(1 for found, _inlined in results if found) / len(samples)
    marked = sum(1 for found, inlined in results if found and inlined) / max(1, sum(1 for found, _ in results if found))
    assert in_order >= 0.9 and marked >= 0.9, (in_order, marked, [[frame.name for frame in frames] for frames in samples[:5]])
    leaves = [frames[-1] for frames in samples if frames[-1].name == CHAIN[2]]
    assert len(leaves) >= 0.5 * len(samples)
    assert all(leaf.tier in ("c1", "c2") and leaf.file == "Inlined.java" for leaf in leaves)
    in_loop = sum(1 for leaf in leaves if leaf.line in LEAF_LOOP) / len(leaves)
    assert in_loop >= 0.9, sorted({leaf.line for leaf in leaves})


RUNTIME_CHAIN = [
    f"RuntimeCalls.{name}"
    for name in (
        "main(java.lang.String[])",
        "run(java.lang.String, int)",
        "step(java.lang.String, int)",
        "leaf(java.lang.String, int)",
    )
]


@pytest.mark.parametrize("jdk", sorted(JDKS))
@pytest.mark.parametrize(("call", "recorded"), [("drem", True), ("arraycopy", True), ("alloc", True), ("drem", False)])
def test_inlined_code_calling_the_runtime_keeps_its_chain(jitprof, tmp_path, background, jdk, call, recorded):
    """leaf, inlined by C2 into step into run (into main's loop), calls the
    runtime: fmod for a double's %, an arraycopy stub, the allocation path.
    A leaf call's return address has no record without
    -XX:+DebugNonSafepoints: the chain is then marked unknown, never
    another's; with it, the chain is whole."""
    java = java_of(jdk)
    if not (CLASSES / "RuntimeCalls.class").exists():
        pytest.skip("the Java fixtures are not built (javac missing)")
    flags = RECORD_ALL_PCS if recorded else ()
    target = background(
        java,
        "-XX:+PreserveFramePointer",
        *flags,
        "-cp",
        str(CLASSES),
        "RuntimeCalls",
        call,
        "60",
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
    )
    wait_for_line(target, "warm")
    cpu_before = java_cpu_seconds(target.pid)
    run = jitprof("-F", "499", "-d", "3", "--pid", str(target.pid), "-o", "out.jitprof")
    java_cpu = java_cpu_seconds(target.pid) - cpu_before
    assert run.returncode == 0, run.stderr
    stop_jvm(target)
    samples = java_samples(read_raw(tmp_path / "out.jitprof"), target.pid, "RuntimeCalls")
    assert len(samples) >= enough_samples(java_cpu), (len(samples), java_cpu)
    wrong = wrong_chains(samples, RUNTIME_CHAIN)
    assert wrong == [], told(wrong, samples)
    whole = sum(
        1 for frames in samples if [frame.name for frame in frames if frame.name.startswith("RuntimeCalls.")] == RUNTIME_CHAIN
    )
    if recorded:
        # Every chain is the true one or its start (samples in run and step
        # themselves); leaf, where each mode's work is, holds most of them
        # (94-98 % here; the allocation path under JDK 25, 87 %).
        assert whole / len(samples) >= 0.5, whole / len(samples)
    else:
        assert sum(
            1 for frames in samples if frames and any(frame.name == INLINED_UNKNOWN.name for frame in frames)
        ) >= 0.5 * len(samples)


def flag_on(pid: int) -> bool:
    """Does the JVM's own -XX:DebugNonSafepoints read on now?"""
    found = libjvm_of(pid)
    if found is None:
        return False
    path, bias = found
    memory = ProcessMemory(pid)
    try:
        return HotSpotReader(memory, layout_of(memory, path, bias), bias).records_non_safepoints() is True
    finally:
        memory.close()


@pytest.mark.parametrize("jdk", sorted(JDKS))
def test_debug_non_safepoints_turned_on_in_a_running_jvm_names_every_chain(jitprof, tmp_path, background, jdk):
    """A JVM started without -XX:+DebugNonSafepoints, attached with
    --jvm-debug-nonsafepoints before it compiles its work: jitprof turns the
    flag on in it, and the methods HotSpot compiles from then on are named
    whole where, without it, a leaf calling the runtime is unknown."""
    java = java_of(jdk)
    if not (CLASSES / "RuntimeCalls.class").exists():
        pytest.skip("the Java fixtures are not built (javac missing)")
    go = tmp_path / "go"
    target = background(
        java,
        "-XX:+PreserveFramePointer",
        "-cp",
        str(CLASSES),
        "RuntimeCalls",
        "drem",
        "4",
        str(go),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
    )
    wait_for_line(target, "ready")
    assert not flag_on(target.pid)
    started: list[bool] = []

    def start_when_on() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and target.poll() is None:
            if flag_on(target.pid):
                started.append(True)
                go.touch()  # the work starts, and is compiled, once the flag is on
                return
            time.sleep(0.05)
        go.touch()

    watcher = threading.Thread(target=start_when_on)
    watcher.start()
    run = jitprof("-F", "499", "--pid", str(target.pid), "--jvm-debug-nonsafepoints", "-o", "out.jitprof")
    watcher.join()
    target.wait(timeout=30)
    assert run.returncode == 0, run.stderr
    assert started, "the flag never read on in the JVM"
    assert f"turned -XX:+DebugNonSafepoints on in the JVM (pid {target.pid})" in run.stderr, run.stderr
    samples = java_samples(read_raw(tmp_path / "out.jitprof"), target.pid, "RuntimeCalls")
    assert len(samples) >= 600, len(samples)
    wrong = wrong_chains(samples, RUNTIME_CHAIN)
    assert wrong == [], told(wrong, samples)
    names = [[frame.name for frame in frames] for frames in samples]
    whole = sum(1 for frames in names if [name for name in frames if name.startswith("RuntimeCalls.")] == RUNTIME_CHAIN)
    # As with the flag given at start (the same bound); without it, most are unknown.
    assert whole / len(samples) >= 0.5, whole / len(samples)
    unknown = sum(1 for frames in names if INLINED_UNKNOWN.name in frames)
    assert unknown <= 0.05 * len(samples), (unknown, len(samples))
    # A stack cut short (a leaf in a method's prologue, where its caller
    # cannot be told) shows the leaf's end of a true chain, never another.
    slices = {tuple(RUNTIME_CHAIN[start:end]) for start in range(4) for end in range(start + 1, 5)}
    for frames in java_samples(read_raw(tmp_path / "out.jitprof"), target.pid, "RuntimeCalls", cut=True):
        shown = tuple(frame.name for frame in frames if frame.name.startswith("RuntimeCalls."))
        assert shown in slices, shown


@pytest.mark.parametrize("jdk", sorted(JDKS))
def test_a_jvm_without_frame_pointers_is_walked_whole_by_frame_sizes(jitprof, tmp_path, background, jdk):
    """A JVM started with no flag at all: its compiled frames keep no frame
    pointer, and the kernel steps over them by their sizes, so its stacks
    reach the thread's start (through the call stub and JavaCalls), the
    chain named as with frame pointers. Before, they stopped at the first
    compiled frame."""
    java = java_of(jdk)
    target = background(
        java, *RECORD_ALL_PCS, "-cp", str(CLASSES), "Inlined", "60", cwd=tmp_path, stdout=subprocess.PIPE, text=True
    )
    wait_for_line(target, "warm")
    cpu_before = java_cpu_seconds(target.pid)
    run = jitprof("-F", "499", "-d", "3", "--pid", str(target.pid), "-o", "out.jitprof")
    java_cpu = java_cpu_seconds(target.pid) - cpu_before
    assert run.returncode == 0, run.stderr
    assert "walked by their sizes" in run.stderr and "warning" not in run.stderr, run.stderr
    asked_nothing(target.pid)
    stop_jvm(target)
    profile = read_raw(tmp_path / "out.jitprof")
    samples = [sample for sample in profile.samples if sample.pid == target.pid]
    in_java = [
        sample for sample in samples if any(profile.frames[index].name.startswith("Inlined.") for index in sample.frame_ids)
    ]
    assert len(in_java) >= enough_samples(java_cpu), (len(in_java), java_cpu)
    frames_of = [[profile.frames[index] for index in sample.frame_ids] for sample in in_java]
    in_order = sum(1 for frames in frames_of if chained(frames)[0]) / len(in_java)
    whole = sum(
        1
        for sample, frames in zip(in_java, frames_of, strict=True)
        if sample.walk_end is WalkEnd.COMPLETE and "start_thread" in [frame.name for frame in frames[:4]]
    ) / len(in_java)
    shown = [" <- ".join(frame.name for frame in reversed(frames)) for frames in frames_of[:3]]
    assert in_order >= 0.9 and whole >= 0.9, (in_order, whole, profile.walk_ends, shown)


@pytest.mark.parametrize("jdk", sorted(JDKS))
def test_interpreted_java_every_frame_named(jitprof, tmp_path, background, jdk):
    java = java_of(jdk)
    target = warm_jvm(background, tmp_path, java, "-XX:+PreserveFramePointer", "-Xint", "Inlined", "60")
    cpu_before = java_cpu_seconds(target.pid)
    run = jitprof("-F", "499", "-d", "3", "--pid", str(target.pid), "-o", "out.jitprof")
    java_cpu = java_cpu_seconds(target.pid) - cpu_before
    assert run.returncode == 0, run.stderr
    asked_nothing(target.pid)
    stop_jvm(target)
    profile = read_raw(tmp_path / "out.jitprof")
    samples = java_samples(profile, target.pid)
    assert len(samples) >= enough_samples(java_cpu), (len(samples), java_cpu)
    # Interpreted, every frame has its own record: each stack is the true
    # chain from main down to the method the sample is in, none another's.
    truth = ["Inlined.main(java.lang.String[])", *CHAIN]
    cut = java_samples(profile, target.pid, cut=True)
    wrong = wrong_chains(samples, truth)
    assert wrong == [], told(wrong, samples)
    assert len(samples) >= 0.98 * (len(samples) + len(cut)), (len(samples), len(cut))
    assert sum(1 for frames in samples if chained(frames)[0]) / len(samples) >= 0.9
    java_frames = [frame for frames in samples for frame in frames if frame.module == "[jit]"]
    unnamed = [frame for frame in java_frames if frame.kind is FrameKind.UNKNOWN or frame.name == "[interpreter]"]
    assert len(unnamed) / len(java_frames) <= 0.01, len(unnamed)
    leaves = [frames[-1] for frames in samples if frames[-1].name == CHAIN[2]]
    assert leaves and all(leaf.tier == "interpreted" and leaf.line_exact for leaf in leaves)
    assert sum(1 for leaf in leaves if leaf.line in LEAF_LOOP) / len(leaves) >= 0.9


def test_a_jvm_read_while_it_loads_libjvm_is_named_once_loaded(background):
    """Just mapped, libjvm.so's tables are not relocated yet and read as
    malformed: a JVM read then (at every try, as a sampled one may be) was
    refused for good and named from perf maps. It is read again until it
    loads. Three starts: the moment is a race the test does not always win."""
    java = java_of("17")
    for _start in range(3):
        source = HotSpotStructures(None, lambda _pid: True)
        target = background(java, "-XX:+PreserveFramePointer", "-cp", str(CLASSES), "Inlined", "5", stdout=subprocess.DEVNULL)
        try:
            source.watch(target.pid)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and libjvm_of(target.pid) is None:
                pass  # the first moment it is mapped
            jvm = source._jvms[target.pid]
            tries = 0
            while time.monotonic() < deadline and not source.refused(target.pid):
                jvm.next_setup = 0.0  # every try made, none waited for
                tries += 1
                if source._set_up(jvm):
                    break
                time.sleep(0.002)
            assert source.refused(target.pid) == "" and source.has_source(target.pid), (source.refused(target.pid), tries)
        finally:
            source.close()
            target.kill()
            target.wait()


@pytest.mark.parametrize("collector", ["-XX:+UseG1GC", "-XX:+UseZGC"])
def test_churned_classes_and_deoptimized_code_never_misnamed(jitprof, tmp_path, collector):
    """Phase N runs spinNNNN only: a sample named spinNNNN must fall inside
    phase N; under G1, which frees classes in its pauses, and ZGC, which
    frees them while the program runs."""
    java_of("17")
    # Phases of 1 s: code compiled where other code was freed is named from
    # its first read on (the reader is up to ~0.3 s behind the samples).
    command = ["java", collector, "-cp", str(CLASSES), "Churn", "12", "1000"]
    run = jitprof("-F", "499", "-o", "churn.jitprof", "--", *command, timeout=180)
    assert run.returncode == 0, run.stderr
    phases = {}
    for line in run.stdout.splitlines():
        if line.startswith("phase "):
            _word, number, start, end = line.split()
            phases[int(number) % 10_000] = (int(start), int(end))
    assert len(phases) >= 8, run.stdout[-500:]
    profile = read_raw(tmp_path / "churn.jitprof")
    named = misnamed = in_phases = 0
    details: list[str] = []
    for sample in profile.samples:
        during = [number for number, (start, end) in phases.items() if start <= sample.time_ns <= end]
        names = [profile.frames[index].name for index in sample.frame_ids]
        in_phases += bool(during) and "Churn.main(java.lang.String[])" in names  # the main thread, in Java
        spins = {int(found.group(1)) for name in names if (found := _SPIN.search(name))}
        if not spins:
            continue
        named += 1
        if spins != set(during):
            misnamed += 1
            frames = [profile.frames[index] for index in sample.frame_ids]
            near = sorted(phases.items(), key=lambda item: abs(item[1][0] - sample.time_ns))[:2]
            details.append(
                f"at {sample.time_ns} (tid {sample.tid}), phases {near}: "
                + " <- ".join(f"{frame.name} [{frame.tier or frame.kind.name}]" for frame in reversed(frames))
            )
    assert misnamed == 0, f"{misnamed} of {named} samples named a spin method that was not running: {details[:5]}"
    # And most of the main thread's samples in phases are named (jitprof's notes say why if not).
    assert named >= 0.5 * in_phases, (named, in_phases, run.stderr[-2000:])


@pytest.mark.parametrize("jdk", sorted(JDKS))
def test_structures_and_perf_map_name_the_same_methods(background, tmp_path, jdk):
    """Every nmethod in a perf map the JVM writes is the same method read from its structures."""
    java = java_of(jdk)
    target = background(
        java, "-XX:+PreserveFramePointer", "-cp", str(CLASSES), "Inlined", "60", cwd=tmp_path, stdout=subprocess.PIPE, text=True
    )
    wait_for_line(target, "warm")
    perf_map = Path(f"/tmp/perf-{target.pid}.map")
    try:
        subprocess.run(
            [str(JDKS[jdk] / "bin" / "jcmd"), str(target.pid), "Compiler.perfmap"], check=True, capture_output=True, timeout=60
        )
        entries = [line.split(" ", 2) for line in perf_map.read_text().splitlines()]
        found = libjvm_of(target.pid)
        assert found is not None
        path, bias = found
        memory = ProcessMemory(target.pid)
        reader = HotSpotReader(memory, layout_of(memory, path, bias), bias)
        compared = 0
        for start, _size, name in entries:
            expected = JAVA.frame_for_name(name) if JAVA.frame_for_name else None
            if expected is None or expected.tier != "compiled":
                continue
            blob = reader.blob_at(int(start, 16))
            code = reader.compiled(blob) if blob is not None and blob.code_begin == int(start, 16) else None
            if code is None:
                continue  # freed since the map was written
            method = reader.method(code.method)
            assert method is not None and method.display == expected.name, (name, method)
            compared += 1
        assert compared >= 10, compared  # Inlined's and the JDK's it runs (15 to 20)
        memory.close()
    finally:
        perf_map.unlink(missing_ok=True)
        stop_jvm(target)


@pytest.mark.parametrize("jdk", sorted(JDKS))
@pytest.mark.parametrize("frame_pointers", [False, True], ids=["no-flags", "frame-pointers"])
def test_a_leaf_in_a_dispatch_stub_or_a_prologue_keeps_its_caller(jitprof, tmp_path, background, jdk, frame_pointers):
    """A virtual or interface call that has seen four classes goes through a
    vtable or itable stub ("vtable chunks"): a jump, with no frame. A leaf
    sampled there has only its caller's return address on the stack. With
    frame pointers the frame-pointer step skipped that caller (main >
    [stub], run lost); without, the walk ended there (closure-compiler: 3.5 %
    of its compiling thread's samples a lone stub). Now the kernel tells
    such a blob by its name and steps by the return address: run is the
    stub's caller, and the stack reaches main. So does a leaf in the called
    method's prologue, stepped by the instruction it is at."""
    java = java_of(jdk)
    flags = ("-XX:+PreserveFramePointer",) if frame_pointers else ()
    target = warm_jvm(
        background,
        tmp_path,
        java,
        *flags,
        "-XX:CompileCommand=quiet",
        "-XX:CompileCommand=dontinline,Dispatch*::*",
        "Dispatch",
        "60",
    )
    run = jitprof("-F", "499", "-d", "3", "--pid", str(target.pid), "-o", "out.jitprof")
    stop_jvm(target)
    assert run.returncode == 0, run.stderr
    profile = read_raw(tmp_path / "out.jitprof")
    stacks = [
        [profile.frames[index].name for index in sample.frame_ids]
        for sample in profile.samples
        if sample.pid == target.pid and sample.frame_ids
    ]
    in_stub = [names for names in stacks if names[-1] == "[stub] vtable chunks"]
    in_dispatch = sum(1 for names in stacks if any(name.startswith("Dispatch.run(") for name in names))
    # The stubs' share is the program's own; a few percent of its samples are plenty to judge.
    assert len(in_stub) >= 0.02 * in_dispatch and len(in_stub) >= 20, (len(in_stub), in_dispatch)
    shown = [[name for name in names if name.startswith("Dispatch.")] for names in in_stub]
    # Never another chain: main > run, or (cut short) nothing of the program's.
    wrong = [names for names in shown if names and [name.split("(")[0] for name in names] != ["Dispatch.main", "Dispatch.run"]]
    assert wrong == [], told([" > ".join(names) for names in wrong], in_stub)
    whole = sum(1 for names in shown if names)
    assert whole >= 0.9 * len(in_stub), (whole, len(in_stub), in_stub[:3])
    # A leaf in a called method itself (area or size: a few instructions, its
    # prologue and epilogue a good share of them) keeps run and main.
    in_callee = [
        [name.split("(")[0] for name in names if name.startswith("Dispatch")]
        for names in stacks
        if names[-1].startswith("Dispatch$") and names[-1].split("(")[0].endswith((".area", ".size"))
    ]
    # Cut there were 13-48 % of them on JDK 25 and 43 % on JDK 17 with frame
    # pointers: the kernel knew neither HotSpot's `mov rbp, rsp` (48 8b ec)
    # nor the entry barrier's branch (none now, in 400-630).
    cut = [names for names in in_callee if names[:2] != ["Dispatch.main", "Dispatch.run"]]
    assert len(in_callee) >= 100 and len(cut) <= 0.03 * len(in_callee), (len(cut), len(in_callee), cut[:3])
