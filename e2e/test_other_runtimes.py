"""JIT runtimes other than Node's perf-map default: HotSpot (perf map asked
for over the attach socket), MoarVM (its perf map), V8's jitdump."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from e2e.conftest import ROOT, attached_floor, cpu_seconds_of, read_folded, total, wait_for_cpu

JAVA_CLASSES = ROOT / "fixtures" / "build" / "java"
RAKU = ROOT / "fixtures" / "raku" / "fib.raku"
JS = ROOT / "fixtures" / "js"
# Inlined Java methods are not restored (HotSpot's perf map has no inlining
# data): the fixture keeps its own methods out of line.
JAVA_ARGS = ["-XX:CompileCommand=quiet", "-XX:CompileCommand=dontinline,Hot::*", "-cp", str(JAVA_CLASSES), "Hot"]
JAVA_CHAIN = ["Hot.main(java.lang.String[])", "Hot.middle(int)", "Hot.leaf(int)"]


def needs(command: str) -> str:
    path = shutil.which(command)
    if path is None:
        pytest.skip(f"{command} is not installed (make setup installs it)")
    return path


def java_chain(frames: list[str]) -> bool:
    """main, then middle, then leaf at the end, by Java name (leaf may call into a stub)."""
    names = [frame.removesuffix("_[j]") for frame in frames]
    if JAVA_CHAIN[0] not in names:
        return False
    tail = names[names.index(JAVA_CHAIN[0]) :]
    return tail[:3] == JAVA_CHAIN


def no_stray_perf_maps(pids: set[int]) -> None:
    for pid in pids:
        assert not Path(f"/tmp/perf-{pid}.map").exists(), f"perf map of {pid} left behind"


def stop_jvm(process) -> None:  # noqa: ANN001
    """SIGTERM, so the JVM removes its attach socket (SIGKILL would leave it in /tmp)."""
    process.terminate()
    process.wait(timeout=30)
    assert not Path(f"/tmp/.java_pid{process.pid}").exists()


def test_java_spawned(jitprof, tmp_path):
    needs("java")
    run = jitprof("--by-pid", "-o", "java.folded", "--", "java", *JAVA_ARGS, "6")
    assert run.returncode == 0, run.stderr
    assert "PreserveFramePointer" in run.stderr  # the JVM says it picked up the injected options
    lines = read_folded(tmp_path / "java.folded")
    java_pids = {int(line.frames[0].rsplit("-", 1)[1]) for line in lines}
    hot = sum(line.count for line in lines if java_chain(line.frames))
    assert total(lines) >= 300
    assert hot / total(lines) >= 0.9, sorted(lines, key=lambda line: -line.count)[:5]
    # Whole stacks: the Java frames hang off the JVM's native start.
    assert all("JavaMain" in line.frames for line in lines if java_chain(line.frames))
    no_stray_perf_maps(java_pids)


def test_java_attached(jitprof, tmp_path, background):
    java = needs("java")
    process = background(java, "-XX:+PreserveFramePointer", *JAVA_ARGS, "20", cwd=tmp_path)
    wait_for_cpu(process.pid, 1.0, main_thread=False)
    before = cpu_seconds_of(process.pid, main_thread=False)
    run = jitprof("-d", "5", "-o", "attached.folded", "--pid", str(process.pid))
    assert run.returncode == 0, run.stderr
    assert process.poll() is None  # asking it for its map left it running
    ran = cpu_seconds_of(process.pid, main_thread=False) - before
    stop_jvm(process)
    lines = read_folded(tmp_path / "attached.folded")
    hot = sum(line.count for line in lines if java_chain(line.frames))
    assert total(lines) >= attached_floor(99, 5, ran), (total(lines), ran)
    assert hot / total(lines) >= 0.9, sorted(lines, key=lambda line: -line.count)[:5]
    no_stray_perf_maps({process.pid})
    assert not list(tmp_path.glob(".attach_pid*"))


def test_java_attached_without_frame_pointers_is_explained(jitprof, tmp_path, background):
    java = needs("java")
    process = background(java, *JAVA_ARGS, "20", cwd=tmp_path)
    wait_for_cpu(process.pid, 1.0, main_thread=False)
    run = jitprof("-d", "2", "-o", "nofp.folded", "--pid", str(process.pid))
    stop_jvm(process)
    assert run.returncode == 0, run.stderr
    assert "-XX:+PreserveFramePointer" in run.stderr and "restart it" in run.stderr
    lines = read_folded(tmp_path / "nofp.folded")
    # The leaf is still named from the map, where it was sampled.
    leaf = sum(line.count for line in lines if line.frames[-1].removesuffix("_[j]") == "Hot.leaf(int)")
    assert leaf / total(lines) >= 0.5


def test_moarvm_jit_frames_named(jitprof, tmp_path):
    needs("rakudo")
    run = jitprof("--by-pid", "-o", "raku.folded", "--", "rakudo", str(RAKU), "6")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "raku.folded")
    in_jit = [line for line in lines if line.frames[-1].endswith("_[j]")]
    in_jit_total = sum(line.count for line in in_jit)
    named = sum(
        line.count for line in in_jit if line.frames[-1].removesuffix("_[j]").endswith(")") and "[unknown]" not in line.frames[-1]
    )
    fib = sum(line.count for line in in_jit if line.frames[-1] == "fib (fib.raku:2)_[j]")
    # Once fib is compiled its time is in JIT code: a tenth of the run at
    # least (a fifth here, the rest rakudo's start and its interpreter), and
    # enough samples to judge the shares below by.
    assert in_jit_total >= max(0.1 * total(lines), 50), (in_jit_total, total(lines))
    assert named / in_jit_total >= 0.8
    assert fib >= 0.3 * in_jit_total, sorted(in_jit, key=lambda line: -line.count)[:5]
    # Whole stacks: out of the JIT code (frame pointers) into the interpreter
    # loop (DWARF, rbp not a frame pointer there) and down to main.
    with_fib = [line for line in lines if "fib (fib.raku:2)_[j]" in line.frames]
    # A sample at the JIT code's `push rbp` or `ret` (rbp the interpreter's
    # there) is stepped by the return address on top of the stack.
    connected = sum(line.count for line in with_fib if {"MVM_interp_run", "__libc_start_call_main"} <= set(line.frames))
    assert connected / sum(line.count for line in with_fib) >= 0.97
    no_stray_perf_maps({int(line.frames[0].rsplit("-", 1)[1]) for line in lines})


def test_node_jitdump_only(jitprof, tmp_path):
    """Node with --perf-prof and no perf map: JavaScript named from jit-PID.dump."""
    run = jitprof(
        "--no-inject",
        "--by-pid",
        "-o",
        "dump.folded",
        "--",
        "node",
        "--perf-prof",
        "--interpreted-frames-native-stack",
        str(JS / "chain.js"),
        "4",
    )
    assert run.returncode == 0, run.stderr
    dumps = list(tmp_path.glob("jit-*.dump"))
    assert len(dumps) == 1  # V8 wrote it in the working directory (the user's file: kept)
    pid = int(dumps[0].stem.split("-")[1])
    assert not Path(f"/tmp/perf-{pid}.map").exists()  # the dump was the only source
    lines = read_folded(tmp_path / "dump.folded")
    names = ["main chain.js:", "outer chain.js:", "middle chain.js:", "inner chain.js:"]
    chained = sum(line.count for line in lines if all(any(frame.startswith(name) for frame in line.frames) for name in names))
    assert chained / total(lines) >= 0.9, sorted(lines, key=lambda line: -line.count)[:5]
    # Under load a sample can land in code V8's jitdump does not describe yet
    # (seen once, with another test suite running beside it): a few unnamed
    # JIT samples are allowed, a missing source is not.
    unnamed = sum(line.count for line in lines if any(frame.startswith("[unknown] ([jit])") for frame in line.frames))
    assert unnamed <= 0.01 * total(lines), [line for line in lines if "[unknown] ([jit])" in line.frames]
