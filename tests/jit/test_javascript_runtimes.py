"""Deno and Bun as the runtime records know them: their options merged into
a spawned command's environment, their names read, their files removed."""

from __future__ import annotations

import mmap
import os

from profiler.jit import deno
from profiler.jit.bun.runtime import BUN, frame_for_jsc_name
from profiler.jit.jitdump_files import maps_a_jitdump, remove_jitdumps
from profiler.jit.names import frame_for_name
from profiler.jit.runtimes import DENO, NODE, inject_environment
from profiler.model.profile import FrameKind

DENO_FLAGS = "--interpreted-frames-native-stack,--log-code,--log-source-position,--no-log-source-code"


def test_deno_v8_flags_merged_with_the_user_s_once():
    """The code log without sources and no perf map: the log names all the
    perf map would, and the scripts' lines are read from their files."""
    assert inject_environment({}, None, ["deno", "run", "app.js"])["DENO_V8_FLAGS"] == DENO_FLAGS
    merged = inject_environment({"DENO_V8_FLAGS": "--max-old-space-size=64, --log-code"}, None, ["deno", "task", "dev"])
    assert merged["DENO_V8_FLAGS"].split(",") == [
        "--max-old-space-size=64",
        "--log-code",
        "--interpreted-frames-native-stack",
        "--log-source-position",
        "--no-log-source-code",
    ]
    assert deno.merge_v8_flags(merged["DENO_V8_FLAGS"], deno.deno_flags([], None)) == merged["DENO_V8_FLAGS"]


def test_a_user_s_own_log_source_code_is_kept():
    merged = inject_environment({"DENO_V8_FLAGS": "--log-source-code"}, None, ["deno", "run", "app.js"])
    assert "--no-log-source-code" not in merged["DENO_V8_FLAGS"].split(",")
    assert "--log-code" in merged["DENO_V8_FLAGS"].split(",")


def test_a_deno_that_runs_v8_s_own_sampler_gets_no_interpreter_trampolines():
    assert "--interpreted-frames-native-stack" not in deno.deno_flags(["deno", "run", "--inspect", "app.js"], None)
    assert "--interpreted-frames-native-stack" not in deno.deno_flags(["deno", "run", "app.js"], "--cpu-prof")
    assert "--log-code" in deno.deno_flags(["deno", "run", "--inspect-brk", "app.js"], None)


def test_which_runtimes_may_be_named_after_they_exit():
    """Deno's code is named from its code log and scripts; Bun's from its
    jitdumps, but its interpreter's handlers from a live bun unless kept (no
    bun mapping known here: not kept); node's from V8's objects read as each
    sample comes up, and from its perf map."""
    assert DENO.named_after_exit is not None and DENO.named_after_exit(1, [])
    assert BUN.named_after_exit is not None and not BUN.named_after_exit(1, [])
    assert NODE.named_after_exit is not None and NODE.named_after_exit(1, [])


def test_bun_told_to_write_a_jitdump_into_its_user_s_own_directory():
    """Not /tmp, where another user could plant a link at the name; without
    a directory of its own, bun is asked for no dump (it would write none)."""
    environment = inject_environment({}, None, ["bun", "app.js"], lambda: "/var/lib/jitprof/jitdumps/1000")
    assert environment["BUN_JSC_useJITDump"] == "1"
    assert environment["BUN_JSC_jitDumpDirectory"] == "/var/lib/jitprof/jitdumps/1000"
    assert not [key for key in inject_environment({}, None, ["bun", "app.js"]) if key.startswith("BUN_")]
    # The user's own directory, or the user's "no", is kept.
    assert inject_environment({"BUN_JSC_jitDumpDirectory": "/srv/dumps"})["BUN_JSC_jitDumpDirectory"] == "/srv/dumps"
    assert "BUN_JSC_jitDumpDirectory" not in inject_environment({"BUN_JSC_useJITDump": "0"})
    # Bun refuses to start on a BUN_JSC_ option it does not know: only these two.
    assert {key for key in environment if key.startswith("BUN_")} == {"BUN_JSC_useJITDump", "BUN_JSC_jitDumpDirectory"}


def test_javascriptcore_names_read_as_frames():
    leaf = frame_for_jsc_name("JSC-DFG: leaf#BiF1ZL")
    assert leaf is not None and (leaf.name, leaf.tier, leaf.kind) == ("leaf", "dfg", FrameKind.JIT)
    assert frame_for_name("JSC-FTL: Array.prototype.map#Ab12Cd").name == "Array.prototype.map"
    assert frame_for_name("JSC-Baseline: leaf#BiF1ZL").tier == "baseline"
    # Anonymous functions are told apart by their source's hash.
    assert frame_for_name("JSC-Baseline: #Ab12Cd").name == "(anonymous)#Ab12Cd"
    thunk = frame_for_name("JSC-LLIntThunk: op_call")
    assert (thunk.name, thunk.tier) == ("[LLIntThunk] op_call", "stub")
    assert frame_for_jsc_name("JS:*leaf /x.js:1:1") is None
    assert BUN.own_names_only and "BUN_JSC_useJITDump=1" in BUN.fix


def test_deno_names_read_as_node_s_and_its_logs_are_cleaned_up():
    frame = frame_for_name("JS:o*leaf file:///srv/app/main.mjs:2:14", DENO)
    assert (frame.name, frame.file, frame.line, frame.tier) == ("leaf main.mjs:2", "file:///srv/app/main.mjs", 2, "turbofan")
    assert DENO.writes_v8_logs and NODE.writes_v8_logs
    assert "DENO_V8_FLAGS=--perf-basic-prof,--interpreted-frames-native-stack" in DENO.fix


def test_jitdumps_removed_only_when_they_are_the_processes_own_files(tmp_path):
    uid = os.getuid()
    # perf's jit-PID.dump and JavaScriptCore's jit-TID-PID.dump
    for name in ("jit-100.dump", "jit-101-100.dump", "jit-201-200.dump", "jit-1000.dump", "jit-100.dump.bak", "jit-100-7.dump"):
        (tmp_path / name).write_bytes(b"JiTD")
    (tmp_path / "jit-102-100.dump").symlink_to(tmp_path / "jit-201-200.dump")
    removed = remove_jitdumps([100], uid, str(tmp_path))
    assert sorted(removed) == ["jit-100.dump", "jit-101-100.dump"]
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "jit-100-7.dump",
        "jit-100.dump.bak",
        "jit-1000.dump",
        "jit-102-100.dump",
        "jit-201-200.dump",
    ]
    assert remove_jitdumps([200], uid + 1, str(tmp_path)) == []  # another user's files stay


def test_a_process_that_maps_a_jitdump_is_seen_to_write_one(tmp_path):
    assert not maps_a_jitdump(os.getpid())
    dump = tmp_path / f"jit-{os.getpid() + 1}-{os.getpid()}.dump"
    dump.write_bytes(b"\0" * 4096)
    with open(dump, "rb") as handle:
        marker = mmap.mmap(handle.fileno(), 4096, prot=mmap.PROT_READ | mmap.PROT_EXEC, flags=mmap.MAP_PRIVATE)
    try:
        assert maps_a_jitdump(os.getpid())
    finally:
        marker.close()


def test_spawned_dumps_go_where_the_mount_table_says_memory_is():
    """JavaScriptCore syncs its dump as it writes: on a tmpfs that costs nothing."""
    from profiler.jit import jitdump_files  # noqa: PLC0415

    mounts = {"/": "ext4", "/run": "tmpfs", "/dev": "devtmpfs", "/dev/shm": "tmpfs", "/run/user/1000": "tmpfs"}
    assert jitdump_files._filesystem_of("/run/jitprof/jitdumps", mounts) == "tmpfs"
    assert jitdump_files._filesystem_of("/dev/shm/jitprof/jitdumps", mounts) == "tmpfs"
    assert jitdump_files._filesystem_of("/devices/x", mounts) == "ext4"  # a prefix of a name is no mount point's
    assert jitdump_files._filesystem_of("/var/lib/jitprof/jitdumps", {"/": "ext4", "/run": "tmpfs"}) == "ext4"
    assert jitdump_files._filesystem_of("/run/jitprof/jitdumps", {}) == ""
    own = jitdump_files._filesystem_types()
    assert own.get("/") and all(point.startswith("/") for point in own)
