"""Creating and removing files where a target can reach: one directory
descriptor, checked once; a target cannot steer root elsewhere."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.jit.jvm import attach
from profiler.safety import files


def test_a_directory_of_another_user_is_refused(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    descriptor = files.open_directory_for(str(mine), os.geteuid())
    os.close(descriptor)
    with pytest.raises(files.UnsafeDirectory, match="belongs to uid"):
        files.open_directory_for(str(mine), os.geteuid() + 1)


def test_a_shared_sticky_directory_is_accepted():
    info = os.stat("/tmp")
    if info.st_uid != 0 or not info.st_mode & 0o1000:
        pytest.skip("/tmp is not a root-owned sticky directory here")
    os.close(files.open_directory_for("/tmp", 12345))


def test_an_existing_name_or_symlink_is_never_opened(tmp_path):
    directory = files.open_directory_for(str(tmp_path), os.geteuid())
    try:
        target = tmp_path / "elsewhere"
        (tmp_path / "trigger").symlink_to(target)
        with pytest.raises(FileExistsError):
            files.create_exclusive(directory, "trigger")
        assert not target.exists()
        with pytest.raises(ValueError):
            files.create_exclusive(directory, "../escape")
    finally:
        os.close(directory)


def test_only_the_file_created_is_removed(tmp_path):
    directory = files.open_directory_for(str(tmp_path), os.geteuid())
    try:
        descriptor = files.create_exclusive(directory, "trigger")
        os.rename(tmp_path / "trigger", tmp_path / "moved")
        (tmp_path / "trigger").write_text("put in its place")
        assert not files.remove_if_same(directory, "trigger", descriptor)
        assert (tmp_path / "trigger").read_text() == "put in its place"
        os.rename(tmp_path / "moved", tmp_path / "trigger2")
        assert files.remove_if_same(directory, "trigger2", descriptor)
        assert not (tmp_path / "trigger2").exists()
        os.close(descriptor)
    finally:
        os.close(directory)


def test_attach_trigger_never_lands_in_a_directory_the_jvm_user_does_not_own():
    """A 'JVM' (it handles SIGQUIT) whose working directory is root's /usr:
    the trigger goes to its /tmp instead, and is gone afterwards."""
    user_args = {"user": 65534} if os.geteuid() == 0 else {}
    if os.stat("/usr").st_uid == (65534 if os.geteuid() == 0 else os.geteuid()):
        pytest.skip("/usr belongs to the test user here")
    # The system's python: the venv's may sit where the test user cannot reach.
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    jvm = subprocess.Popen(
        [
            python,
            "-c",
            "import signal, time; signal.signal(signal.SIGQUIT, lambda *a: None); print(1, flush=True); time.sleep(30)",
        ],
        cwd="/usr",
        stdout=subprocess.PIPE,
        **user_args,
    )
    try:
        assert jvm.stdout is not None and jvm.stdout.readline()  # the handler is installed
        name = f".attach_pid{jvm.pid}"
        seen = []
        attach._trigger(
            jvm.pid,
            jvm.pid,
            lambda: seen.append((os.path.exists(f"/usr/{name}"), os.path.exists(f"/tmp/{name}"))) or True,
            attach.Budget.of(5.0),
        )
        assert seen and seen[0] == (False, True)
        assert not os.path.exists(f"/usr/{name}") and not os.path.exists(f"/tmp/{name}")
    finally:
        jvm.kill()
        jvm.wait()


def test_a_fifo_in_place_of_an_elf_or_debug_file_never_blocks(tmp_path, chain_binary):
    import threading

    from profiler.native import elf

    fifo = tmp_path / "libplanted.so"
    os.mkfifo(fifo)
    outcome = {}

    def open_both():
        try:
            elf.open_elf([str(fifo)], str(fifo))
        except elf.UnreadableElf as error:
            outcome["elf"] = str(error)
        image = elf.open_elf([str(chain_binary)], str(chain_binary))
        image.debug_file = str(fifo)  # swapped in after it was found
        outcome["symbols"] = len(image.symbols())
        image.close()

    worker = threading.Thread(target=open_both, daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "blocked opening a FIFO"
    assert "not a regular file" in outcome["elf"] and outcome["symbols"] > 5


def test_paths_in_a_targets_root_cannot_reach_the_hosts_files(tmp_path):
    """Through /proc/PID/root an absolute symlink would resolve against
    root's (the host's) filesystem: inside the target's root it must not."""
    root = tmp_path / "container"
    (root / "usr" / "lib").mkdir(parents=True)
    (root / "usr" / "lib" / "real.so").write_bytes(b"inside")
    (root / "usr" / "lib" / "absolute.so").symlink_to("/etc/hostname")
    (root / "usr" / "lib" / "climbing.so").symlink_to("../../../../../../etc/hostname")
    (root / "usr" / "lib" / "inside.so").symlink_to("/usr/lib/real.so")  # absolute, meant for its own root
    assert Path("/etc/hostname").exists()
    with files.open_in_root(str(root), "/usr/lib/real.so", 100) as handle:
        assert handle.read() == b"inside"
    with files.open_in_root(str(root), "/usr/lib/inside.so", 100) as handle:
        assert handle.read() == b"inside"  # resolved in the target's root, as the target sees it
    for escaping in ("/usr/lib/absolute.so", "/usr/lib/climbing.so", "/../../etc/hostname"):
        with pytest.raises(OSError):
            files.open_in_root(str(root), escaping, 100)
    with pytest.raises(OSError):
        files.open_in_root(str(root), "/usr/lib/real.so", 3)  # over the size limit
