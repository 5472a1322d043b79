"""--all: every process on the machine, as perf record -a. Processes that
start while it runs are followed from their exec, and their files' unwind
tables are attached when a walk first needs them."""

from __future__ import annotations

import signal

from e2e.conftest import FIXTURES, has_chain, jitprof_sampling, read_folded, total


def test_short_native_processes_started_later_are_whole(symbol_cache, tmp_path, background, fixtures_built):
    """Programs built -O2 -fomit-frame-pointer that live 0.2 s, one after
    another, none running when jitprof starts: stacks reach main. jitprof's
    own process is left out."""
    jitprof = jitprof_sampling(symbol_cache, tmp_path, "--all", "-F", "499", "--by-pid", "-o", "all.folded")
    loop = background("sh", "-c", f"for i in 1 2 3 4 5 6 7 8 9 10; do {FIXTURES / 'dwarf_cases'} recursion 0.2 now; done")
    loop.wait(timeout=120)
    jitprof.send_signal(signal.SIGINT)
    _, stderr = jitprof.communicate(timeout=120)
    assert jitprof.returncode == 0, stderr
    lines = [line for line in read_folded(tmp_path / "all.folded") if line.frames[0].startswith("dwarf_cases-")]
    assert len({line.frames[0] for line in lines}) >= 8  # every one of them, as its own process
    whole = [line for line in lines if has_chain(line.frames, ["main", "run_recursion", "recurse"])]
    assert total(lines) >= 300 and total(whole) >= 0.9 * total(lines), (total(whole), total(lines))
    roots = {line.frames[0] for line in read_folded(tmp_path / "all.folded")}
    assert not [root for root in roots if root.endswith(f"-{jitprof.pid}")], roots


def test_default_output_name_and_kernel_threads(jitprof, tmp_path):
    run = jitprof("--all", "-d", "1")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "jitprof-all.svg").exists()
    assert "no user regs" not in run.stderr  # a kernel thread's stack is not "cut short"
