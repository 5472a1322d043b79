import os
import signal
import subprocess

import pytest

from profiler.errors import JitprofError
from profiler.kernel.proc_status import process_alive, thread_group_id
from profiler.run.targets import (
    exit_status_code,
    spawn_stopped,
    validate_attach_pids,
)
from profiler.safety.users import output_owner, resolve_run_as


def test_sudo_caller_is_the_default_user():
    run_as = resolve_run_as(None, False, {"SUDO_UID": "65534", "SUDO_GID": "65534"})
    assert run_as.uid == 65534 and run_as.gid == 65534 and run_as.name == "nobody"
    assert resolve_run_as(None, True, {"SUDO_UID": "65534"}).uid == os.geteuid()
    assert resolve_run_as("nobody", False, {}).uid == 65534
    with pytest.raises(JitprofError):
        resolve_run_as("no-such-user-here", False, {})


def test_output_owner_only_under_sudo():
    assert output_owner({}) is None
    assert output_owner({"SUDO_UID": "0"}) is None
    assert output_owner({"SUDO_UID": "1000", "SUDO_GID": "100"}).gid == 100


def test_exit_status_codes():
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    assert exit_status_code(os.waitpid(pid, 0)[1]) == 7
    pid = os.fork()
    if pid == 0:
        os.kill(os.getpid(), signal.SIGTERM)
        os._exit(0)
    assert exit_status_code(os.waitpid(pid, 0)[1]) == 128 + signal.SIGTERM


def test_spawned_command_waits_for_release(tmp_path):
    marker = tmp_path / "ran"
    me = resolve_run_as(None, True, {})
    child = spawn_stopped(["sh", "-c", f"touch {marker}; exit 3"], me, dict(os.environ))
    try:
        os.waitpid(child.pid, os.WNOHANG)
        __import__("time").sleep(0.2)
        assert not marker.exists()  # held before exec
        child.release()
        _, status = os.waitpid(child.pid, 0)
    finally:
        child.abandon()
    assert marker.exists() and exit_status_code(status) == 3


def test_command_not_found_is_127():
    me = resolve_run_as(None, True, {})
    with pytest.raises(JitprofError) as error:
        spawn_stopped(["no-such-command-jitprof"], me, dict(os.environ))
    assert error.value.exit_code == 127 and "command not found" in error.value.message


def test_exec_failure_reported_after_release(tmp_path):
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    me = resolve_run_as(None, True, {})
    child = spawn_stopped([str(script)], me, dict(os.environ))
    with pytest.raises(JitprofError) as error:
        child.release()
    assert error.value.exit_code == 126


def test_attach_validation():
    with pytest.raises(JitprofError, match="no process with pid"):
        validate_attach_pids([2**22 + 777])
    other = subprocess.Popen(["sleep", "30"])
    try:
        validate_attach_pids([other.pid])
    finally:
        other.kill()
        other.wait()
    with pytest.raises(JitprofError, match="jitprof itself"):
        validate_attach_pids([os.getpid()])
    with pytest.raises(JitprofError, match="kernel thread"):
        validate_attach_pids([2])  # kthreadd
    assert thread_group_id(os.getpid()) == os.getpid()
    assert process_alive(os.getpid()) and not process_alive(2**22 + 777)
