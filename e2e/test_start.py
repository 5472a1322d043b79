"""Starting as a new user does: set-up compiled the sampler for this kernel,
so a first run with an empty cache loads it instead of compiling, and two
runs at once share no state."""

import os
import subprocess
import sys

from e2e.conftest import jitprof_environment, read_folded, total
from profiler.kernel import bpf_object
from profiler.kernel.bpf_program import LoadOptions, bpf_source, compile_flags


def test_a_first_run_loads_the_sampler_set_up_compiled(jitprof, fixtures_built, tmp_path):
    key = bpf_object.object_key(bpf_source(), compile_flags(LoadOptions(99, False, True)))
    assert bpf_object.installed_path(key) is not None and bpf_object.installed_path(key).exists(), "make setup compiles it"
    empty = tmp_path / "empty-cache"
    run = jitprof(
        "--no-tui", "-o", "chain.folded", "--", str(fixtures_built / "chain"), "1", env={"JITPROF_CACHE_DIR": str(empty)}
    )
    assert run.returncode == 0, run.stderr
    assert not (empty / "bpf").exists(), "the run compiled the sampler instead of loading set-up's"
    lines = read_folded(tmp_path / "chain.folded")
    assert total([line for line in lines if line.frames[-3:] == ["a", "b", "c"]]) >= 0.8 * total(lines)


def test_two_runs_at_once_keep_their_own_samples(fixtures_built, tmp_path, symbol_cache):
    """Each run creates its own maps: neither sees the other's process."""

    environment = jitprof_environment(symbol_cache)
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "profiler", "--no-tui", "-o", f"{name}.folded", "--", str(fixtures_built / program), rounds],
            cwd=tmp_path,
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, program, rounds in (("first", "chain", "1"), ("second", "workload", "300"))
    ]
    for run in runs:
        _, errors = run.communicate(timeout=120)
        assert run.returncode == 0, errors
    first, second = read_folded(tmp_path / "first.folded"), read_folded(tmp_path / "second.folded")
    assert total(first) > 20 and total(second) > 20
    assert {line.frames[0] for line in first} == {"chain"}
    assert {line.frames[0] for line in second} == {"workload"}


def test_the_command_runs_as_jitprof_was_started_while_jitprof_yields_to_it(jitprof, tmp_path):
    """jitprof's threads are SCHED_BATCH (they do not preempt the program at
    each wake-up); the command gets back the policy, and keeps the nice
    value, that jitprof was started with."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os\n"
        "jitprof = os.getppid()\n"
        "policies = {open(f'/proc/{jitprof}/task/{task}/stat').read().rsplit(')', 1)[1].split()[38]\n"
        "            for task in os.listdir(f'/proc/{jitprof}/task')}\n"
        "print(os.sched_getscheduler(0), os.nice(0), ','.join(sorted(policies)))\n"
    )
    run = jitprof(
        "--no-tui", "-o", "probe.folded", "--", sys.executable, str(probe), prefix=["chrt", "--other", "0", "nice", "-n", "5"]
    )
    assert run.returncode == 0, run.stderr
    policy, nice, jitprof_policies = run.stdout.split()
    assert (int(policy), int(nice)) == (os.SCHED_OTHER, 5)
    assert jitprof_policies == str(os.SCHED_BATCH), jitprof_policies
