"""The confined helper's filter, on the real kernel: reading what it was
handed works; as root, a path names nothing (its root is empty); writing
a file, running a program, opening a socket, signalling or a heap past its
limit does not."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.conftest import ROOT

PROBE = textwrap.dedent(
    """
    import os, socket, sys
    from profiler.safety.sandbox import confine
    handed = os.open("/etc/hostname", os.O_RDONLY)  # as jitprof hands the helper a file
    confine(1 << 30, 256 << 20, 60, 64)
    results = []
    def attempt(name, action):
        try:
            action()
            results.append(name + "=ok")
        except OSError as error:
            results.append(name + "=" + (os.strerror(error.errno) if error.errno else str(error)))
    attempt("read", lambda: open(f"/proc/self/fd/{handed}", "rb").read())
    attempt("by name", lambda: open("/etc/hostname", "rb").read())
    attempt("write", lambda: open(sys.argv[1], "wb"))
    attempt("append", lambda: os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND))
    attempt("unlink", lambda: os.unlink(sys.argv[2]))
    attempt("exec", lambda: os.execv("/bin/true", ["true"]))
    attempt("socket", lambda: socket.socket())
    attempt("kill", lambda: os.kill(1, 0))
    try:
        heap = bytearray(300 << 20)
        results.append("heap=ok")
    except MemoryError:
        results.append("heap=refused")
    print(";".join(results))
    """
)


def test_confined_process_reads_but_writes_runs_connects_and_signals_nothing(tmp_path):
    kept = tmp_path / "kept"
    kept.write_text("x")
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "new"), str(kept)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    results = dict(item.split("=", 1) for item in done.stdout.strip().split(";"))
    assert results.pop("read") == "ok"
    assert results.pop("by name") == ("No such file or directory" if os.geteuid() == 0 else "ok")  # root: an empty root
    assert results.pop("heap") == "refused"  # 300 MiB of heap past its 256 MiB
    assert all(outcome == "Operation not permitted" for outcome in results.values()), results
    assert kept.exists() and not (tmp_path / "new").exists()
