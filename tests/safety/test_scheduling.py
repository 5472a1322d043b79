"""jitprof's own threads run as SCHED_BATCH; the command it spawns runs as
jitprof was started. Each case in a process of its own: the test runner's
scheduling is not changed."""

import os
import subprocess
import sys

ORDINARY = ("chrt", "--other", "0")
CASE = """
import os, sys, threading
from profiler.safety import scheduling
scheduling.yield_to_programs()
seen = []
thread = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))
thread.start(); thread.join()
child = os.fork()
if child == 0:
    scheduling.restore_for_command()
    os._exit(os.sched_getscheduler(0))
_, status = os.waitpid(child, 0)
print(os.sched_getscheduler(0), seen[0], os.waitstatus_to_exitcode(status))
"""


def _policies(*prefix: str) -> list[int]:
    """The policies of a case started as prefix says (the ordinary policy
    when it says nothing, whatever the test runner's own is)."""
    done = subprocess.run([*(prefix or ORDINARY), sys.executable, "-c", CASE], capture_output=True, text=True, check=True)
    return [int(word) for word in done.stdout.split()]


def test_own_threads_yield_and_the_command_runs_as_jitprof_was_started():
    own, later_thread, command = _policies()
    assert (own, later_thread, command) == (os.SCHED_BATCH, os.SCHED_BATCH, os.SCHED_OTHER)


def test_a_policy_the_user_chose_is_kept():
    """`chrt --idle 0 jitprof ...`: jitprof and its command stay as chosen."""
    assert _policies("chrt", "--idle", "0") == [os.SCHED_IDLE] * 3


def test_the_spawned_command_is_given_the_policy_back():
    probe = f"{sys.executable} -c 'import os, sys; sys.exit(os.sched_getscheduler(0))'"
    case = (
        "import os, sys\n"
        "from profiler.safety import scheduling\n"
        "from profiler.run.targets import exit_status_code, spawn_stopped\n"
        "from profiler.safety.users import resolve_run_as\n"
        "scheduling.yield_to_programs()\n"
        f"child = spawn_stopped(['sh', '-c', {probe!r}], resolve_run_as(None, True, {{}}), dict(os.environ))\n"
        "child.release()\n"
        "print(os.sched_getscheduler(0), exit_status_code(os.waitpid(child.pid, 0)[1]))\n"
    )
    done = subprocess.run([*ORDINARY, sys.executable, "-c", case], capture_output=True, text=True, check=True)
    assert [int(word) for word in done.stdout.split()] == [os.SCHED_BATCH, os.SCHED_OTHER]
