"""Helpers jitprof starts as root never run code from its working directory
or environment: a planted package, sitecustomize or startup file stays inert."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler.native import elf, library, unwind_rows
from profiler.safety import processes
from profiler.safety.processes import run_as_user
from tests.native.test_unwind_tables import make_store, wait_for


def read_or_empty(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


PLANTED = "import pathlib; pathlib.Path({marker!r}).write_text('ran')\n"


def plant(directory, marker):
    """Everything a hostile user could leave where root starts jitprof."""
    code = PLANTED.format(marker=str(marker))
    package = directory / "profiler" / "native"
    package.mkdir(parents=True)
    (directory / "profiler" / "__init__.py").write_text(code)
    (package / "__init__.py").write_text(code)
    (package / "unwind_worker.py").write_text(code)
    (directory / "sitecustomize.py").write_text(code)
    (directory / "usercustomize.py").write_text(code)
    (directory / "startup.py").write_text(code)
    (directory / "elftools").mkdir()
    (directory / "elftools" / "__init__.py").write_text(code)


def hostile_environment(monkeypatch, directory):
    monkeypatch.chdir(directory)
    monkeypatch.setenv("PYTHONPATH", str(directory))
    monkeypatch.setenv("PYTHONSTARTUP", str(directory / "startup.py"))
    monkeypatch.setenv("PYTHONINSPECT", "1")
    monkeypatch.setenv("PYTHONUSERBASE", str(directory))


def test_table_builds_ignore_planted_code(tmp_path, monkeypatch, chain_binary):
    planted = tmp_path / "planted"
    planted.mkdir()
    marker = tmp_path / "marker"
    plant(planted, marker)
    hostile_environment(monkeypatch, planted)
    # Proof that the plant works: an ordinary `python -m` from there runs it.
    subprocess.run([sys.executable, "-m", "profiler.native.unwind_worker"], capture_output=True, timeout=30)
    assert marker.exists()
    marker.unlink()

    store, memory, published = make_store(100000)
    store.start()
    image = elf.open_elf([str(chain_binary)], str(chain_binary))
    try:
        table_id = store.acquire(image)
        assert wait_for(lambda: published.get(table_id, (0, 0))[1] > 0)
        first, count = published[table_id]
        with open(chain_binary, "rb") as handle:
            expected = library.compile_unwind_rows(handle.fileno()).packed
        assert memory[first * unwind_rows.ROW_SIZE : (first + count) * unwind_rows.ROW_SIZE] == expected
    finally:
        store.stop()
        image.close()
    assert not marker.exists()


def test_helpers_get_a_fixed_environment_and_absolute_tools():
    environment = processes.trusted_environment()
    assert set(environment) == {"PATH", "LC_ALL"}
    assert all(entry.startswith("/") for entry in environment["PATH"].split(":"))
    mount = processes.system_command("mount")
    assert os.path.isabs(mount) and os.access(mount, os.X_OK)


def test_relative_path_entries_are_dropped(tmp_path, monkeypatch):
    from profiler.run.targets import find_command

    tool = tmp_path / "bin" / "lookalike-tool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    assert processes.absolute_path_entries(f"bin::.:/usr/bin:{tmp_path}/bin") == f"/usr/bin:{tmp_path}/bin"
    assert find_command("lookalike-tool", f"{tmp_path}/bin") == str(tool)
    try:
        find_command("lookalike-tool", "bin:.:")
    except Exception as error:  # noqa: BLE001
        assert "command not found" in str(error)
    else:
        raise AssertionError("a relative PATH entry was searched")


def test_a_user_s_program_is_cut_at_its_output_cap_and_its_deadline(tmp_path):
    """A helper running another user's program (bun's transpiler) reads at
    most max_output bytes and waits at most the deadline, then kills the
    program and everything it started."""
    endless = run_as_user(["/usr/bin/yes"], os.geteuid(), os.getegid(), max_output=1 << 20, deadline_s=10)
    assert endless.returncode is None and "over 1 MiB" in endless.overrun and len(endless.output) <= 1 << 20
    marker = tmp_path / "child"
    # The program's own child holds the output open and outlives it, unless its group is killed.
    script = f"(sleep 30; touch {marker}) & echo started; exec sleep 30"
    started = time.monotonic()
    slow = run_as_user(["/bin/sh", "-c", script], os.geteuid(), os.getegid(), max_output=1 << 20, deadline_s=0.5)
    assert slow.returncode is None and "over 0.5 s" in slow.overrun and slow.output == b"started\n"
    assert time.monotonic() - started < 10
    assert not [path for path in Path("/proc").glob("[0-9]*/cmdline") if str(marker).encode() in read_or_empty(path)]
    told: list[int | None] = []
    quick = run_as_user(["/bin/sh", "-c", "echo $PWD $HOME; exit 3"], os.geteuid(), os.getegid(), 1 << 20, 10, told.append)
    assert (quick.returncode, quick.output, quick.overrun) == (3, b"/ /nonexistent\n", "")
    assert len(told) == 2 and told[0] > 0 and told[1] is None  # its process group while it ran, then none


PROBE = """
import json, os, resource
try:
    os.close(os.open("/dev/tty", os.O_RDWR))
    terminal = "opened"
except OSError as error:
    terminal = error.strerror
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
print(json.dumps({
    "terminal": terminal,
    "session_leader": os.getsid(0) == os.getpid(),
    "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid()],
    "groups": os.getgroups(),
    "no_new_privs": status["NoNewPrivs"].strip(),
    "capabilities": [status["CapEff"].strip(), status["CapBnd"].strip()],
    "descriptors": sorted(int(name) for name in os.listdir("/proc/self/fd")),
    "file_size": resource.getrlimit(resource.RLIMIT_FSIZE)[0],
    "core": resource.getrlimit(resource.RLIMIT_CORE)[0],
    "heap": resource.getrlimit(resource.RLIMIT_DATA)[0],
}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="runs a program as nobody: as root (make test)")
def test_a_program_run_as_a_user_is_confined_away_from_jitprof_s_terminal():
    """Run from a session whose controlling terminal is a pty (root's terminal
    in the attack), the program cannot open /dev/tty (so no TIOCSTI into
    root's shell), leads a session of its own (no process group of the
    terminal to join), has the user's ids, no groups, capabilities or new
    privileges, no descriptor but its three, and its limits."""
    import pty

    controller, terminal = pty.openpty()
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.setsid()
            os.close(os.open(os.ttyname(terminal), os.O_RDWR))  # the session's controlling terminal now
            run = run_as_user(["/usr/bin/python3", "-c", PROBE], 65534, 65534, 1 << 20, 10)
            os.write(writer, run.output)
        finally:
            os._exit(0)
    os.close(writer)
    output = b""
    while chunk := os.read(reader, 1 << 16):
        output += chunk
    os.waitpid(child, 0)
    for descriptor in (reader, controller, terminal):
        os.close(descriptor)
    probe = json.loads(output)
    assert probe["terminal"] == "No such device or address"
    assert probe["session_leader"] and probe["ids"] == [65534] * 4 and probe["groups"] == []
    assert probe["no_new_privs"] == "1" and probe["capabilities"] == ["0000000000000000"] * 2
    assert probe["descriptors"] == [0, 1, 2, 3]  # 3: the listing's own
    assert (probe["file_size"], probe["core"], probe["heap"]) == (0, 0, processes.HELPER_DATA_BYTES)
