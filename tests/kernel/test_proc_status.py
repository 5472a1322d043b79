"""What /proc says of a process, checked against processes this test starts."""

import subprocess
import sys
import time

from profiler.kernel.proc_status import started_at


def test_started_at_is_when_the_process_started_to_within_a_second():
    before = time.time()
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        started = started_at(child.pid)
        after = time.time()
        assert started is not None and before - 1.0 <= started <= after + 1.0, (before, started, after)
    finally:
        child.communicate()
    assert started_at(child.pid) is None  # gone, reaped
