"""The confined helper's filter, on the real kernel: reading works, writing
a file, running a program, opening a socket or signalling does not."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import ROOT

PROBE = textwrap.dedent(
    """
    import os, socket, sys
    from profiler.safety.sandbox import confine
    confine(1 << 30, 60, 64)
    results = []
    def attempt(name, action):
        try:
            action()
            results.append(name + "=ok")
        except OSError as error:
            results.append(name + "=" + (os.strerror(error.errno) if error.errno else str(error)))
    attempt("read", lambda: open("/etc/hostname", "rb").read())
    attempt("write", lambda: open(sys.argv[1], "wb"))
    attempt("append", lambda: os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND))
    attempt("unlink", lambda: os.unlink(sys.argv[2]))
    attempt("exec", lambda: os.execv("/bin/true", ["true"]))
    attempt("socket", lambda: socket.socket())
    attempt("kill", lambda: os.kill(1, 0))
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
    assert all(outcome == "Operation not permitted" for outcome in results.values()), results
    assert kept.exists() and not (tmp_path / "new").exists()
