"""A user profiles native programs and reads the stacks back."""

import os
import shutil
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from e2e.conftest import has_chain, jitprof_sampling, read_folded, total
from e2e.test_node import cpu_ms

INFERNO = "{http://github.com/jonhoo/inferno}"
SVG = "{http://www.w3.org/2000/svg}"


def test_chain_fixture_shows_main_a_b_c(jitprof, fixtures_built, tmp_path):
    run = jitprof("-o", "out.folded", "-o", "out.svg", "--", str(fixtures_built / "chain"), "3")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    samples = total(lines)
    assert samples >= 200  # 3 s at 99 Hz on one busy CPU
    with_chain = sum(line.count for line in lines if has_chain(line.frames, ["main", "a", "b", "c"]))
    assert with_chain / samples >= 0.95, lines
    assert all(line.frames[0] == "chain" for line in lines)
    assert f"{samples:,} samples" in run.stderr and "wrote" in run.stderr

    # The SVG shows the same chain: c sits on b on a on main, as wide.
    frames = ET.parse(tmp_path / "out.svg").getroot().find(f"{SVG}svg[@id='frames']")
    assert int(frames.get("total_samples")) == samples
    boxes = {}
    for group in frames.findall(f"{SVG}g"):
        name = group.find(f"{SVG}title").text.split(" [")[0].split(" (")[0]
        rect = group.find(f"{SVG}rect")
        boxes.setdefault(name, []).append((int(rect.get(INFERNO + "w")), float(rect.get("y"))))
    # (main may stand on two towers: below it, libc's start code is walked by
    # DWARF once libc's table is live, by frame pointers before.)
    for name in ("main", "a", "b", "c"):
        assert sum(width for width, _ in boxes[name]) >= 0.95 * samples, name
    for caller, callee in (("main", "a"), ("a", "b"), ("b", "c")):
        assert max(boxes[callee])[1] < max(boxes[caller])[1]  # each callee drawn above its caller


def test_forked_child_is_followed_under_its_own_pid(jitprof, fixtures_built, tmp_path):
    run = jitprof("--by-pid", "-o", "out.folded", "--", str(fixtures_built / "forker"), "2")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    by_root = {}
    for line in lines:
        by_root.setdefault(line.frames[0], []).append(line)
    assert len(by_root) == 2, list(by_root)
    child_roots = [root for root, group in by_root.items() if any("child_work" in line.frames for line in group)]
    parent_roots = [root for root, group in by_root.items() if any("parent_work" in line.frames for line in group)]
    assert len(child_roots) == 1 and len(parent_roots) == 1 and child_roots != parent_roots
    for root in child_roots + parent_roots:
        assert root.startswith("forker-")
        group = by_root[root]
        role = "child" if any("child_work" in line.frames for line in group) else "parent"
        # As many samples as the CPU time it says its work took makes at 99 Hz.
        assert total(group) >= 0.7 * 99 * cpu_ms(run.stdout, role) / 1000 > 0, (role, total(group))
        work = "child_work" if root in child_roots else "parent_work"
        assert sum(line.count for line in group if has_chain(line.frames, ["main", work, "spin"])) / total(group) >= 0.9
    assert "from 2 processes" in run.stderr


def cpu_seconds(pid: int) -> float:
    """A process's own CPU time so far (utime + stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_attach_collects_only_that_process_and_stops_after_duration(symbol_cache, fixtures_built, tmp_path, background):
    target = background(str(fixtures_built / "chain"), "60")
    bystander = background(str(fixtures_built / "chain"), "60")
    started = time.monotonic()
    jitprof = jitprof_sampling(symbol_cache, tmp_path, "--by-pid", "--pid", str(target.pid), "-d", "2", "-o", "out.folded")
    cpu_before = cpu_seconds(target.pid)  # from its first samples on: a slow start-up is not counted
    _, stderr = jitprof.communicate(timeout=120)
    elapsed, target_cpu = time.monotonic() - started, cpu_seconds(target.pid) - cpu_before
    assert jitprof.returncode == 0, stderr
    lines = read_folded(tmp_path / "out.folded")
    assert {line.frames[0] for line in lines} == {f"chain-{target.pid}"}
    assert f"chain-{bystander.pid}" not in (tmp_path / "out.folded").read_text()
    # About two seconds of the target's CPU at 99 Hz (less beside other work:
    # counted against the CPU it had from jitprof's first samples to its exit).
    assert 0.6 * 99 * target_cpu <= total(lines) <= 99 * target_cpu + 10, (total(lines), target_cpu)
    assert total(lines) <= 240
    assert elapsed < 15
    assert sum(line.count for line in lines if has_chain(line.frames, ["main", "a", "b", "c"])) / total(lines) >= 0.95
    assert target.poll() is None  # attaching does not disturb the target


def test_exit_status_passes_through(jitprof):
    assert jitprof("-o", "x.folded", "--", "sh", "-c", "exit 7").returncode == 7
    assert jitprof("-o", "x.folded", "--", "sh", "-c", "kill -TERM $$").returncode == 128 + 15


def test_duration_stops_a_spawned_program(jitprof, fixtures_built, tmp_path):
    started = time.monotonic()
    run = jitprof("-d", "2", "-o", "out.folded", "--", str(fixtures_built / "chain"), "60")
    assert time.monotonic() - started < 20
    assert run.returncode == 128 + 15  # stopped with SIGTERM, like timeout(1)
    assert 150 <= total(read_folded(tmp_path / "out.folded")) <= 240


def test_kernel_stacks(jitprof, tmp_path):
    run = jitprof("--kernel", "-o", "out.folded", "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=1M", "count=60000")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    with_kernel = sum(line.count for line in lines if any(frame.endswith("_[k]") for frame in line.frames))
    assert with_kernel / total(lines) >= 0.5
    kernel_frames = {frame for line in lines for frame in line.frames if frame.endswith("_[k]")}
    assert any("syscall" in frame.lower() for frame in kernel_frames), sorted(kernel_frames)[:20]
    # User frames come first, kernel frames above them.
    for line in lines:
        kinds = [frame.endswith("_[k]") for frame in line.frames[1:]]
        assert kinds == sorted(kinds)


def test_a_run_from_the_kept_sampler_never_loads_bcc(jitprof, tmp_path):
    """With the compiled sampler kept (set-up keeps one), jitprof makes the
    kernel calls itself: BCC's library, LLVM and clang (about 100 MiB of a
    run's memory) are never mapped. The command reads its parent's maps
    while the run samples it, then spins until it has used 0.4 s of CPU
    (its own utime, not a count of iterations: a fast machine ran 200,000 in
    under 20 samples)."""
    spin = "while :; do read -r stat < /proc/$$/stat; set -- $stat; [ ${14} -ge 40 ] && break; done"
    script = f"cat /proc/$PPID/maps; grep VmRSS /proc/$PPID/status; {spin}"
    run = jitprof("-o", "out.folded", "--", "sh", "-c", script)
    assert run.returncode == 0, run.stderr
    mapped = {line.split()[-1] for line in run.stdout.splitlines() if line.count(" ") >= 5 and "/" in line}
    assert any("libjitprof_native" in path for path in mapped), sorted(mapped)  # the parent is jitprof
    assert not [path for path in mapped if "libbcc" in path or "LLVM" in path or "clang" in path]
    assert total(read_folded(tmp_path / "out.folded")) >= 20


def test_program_runs_as_the_sudo_caller(jitprof, tmp_path):
    shared = Path(tempfile.mkdtemp(prefix="jitprof-e2e-"))  # reachable by nobody, unlike tmp_path
    shared.chmod(0o777)
    try:
        outputs = shared / "callers-dir"
        outputs.mkdir()
        os.chown(outputs, 65534, 65534)
        _check_runs_as_sudo_caller(jitprof, outputs, shared / "who")
    finally:
        shutil.rmtree(shared)


def _check_runs_as_sudo_caller(jitprof, outputs, report):
    run = jitprof(
        "-o",
        str(outputs / "out.folded"),
        "--",
        "sh",
        "-c",
        f'echo "$(id -u) $(id -g) $HOME $USER" > {report}',
        env={"SUDO_UID": "65534", "SUDO_GID": "65534", "SUDO_USER": "nobody"},
    )
    assert run.returncode == 0, run.stderr
    uid, gid, home, user = report.read_text().split()
    assert (uid, gid, user) == ("65534", "65534", "nobody")
    assert home == os.path.expanduser("~nobody")
    assert (outputs / "out.folded").stat().st_uid == 65534  # outputs are the caller's, written as the caller
    report.unlink()
    as_root = jitprof(
        "--as-root", "-o", str(outputs / "out.folded"), "--", "sh", "-c", f"id -u > {report}", env={"SUDO_UID": "65534"}
    )
    assert as_root.returncode == 0 and report.read_text().strip() == "0"


def test_default_output_name(jitprof, fixtures_built, tmp_path):
    run = jitprof("--", str(fixtures_built / "chain"), "1")
    assert run.returncode == 0, run.stderr
    written = list(tmp_path.glob("jitprof-*.svg"))
    assert len(written) == 1 and written[0].name in run.stderr
    ET.parse(written[0])
