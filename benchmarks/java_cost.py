"""The JVM under jitprof, and one perf-map request against jcmd."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks.harness import JAVA_COMMAND, JITPROF, Setup, runtime_runs, slowdown_table
from profiler.jit.jvm.attach import run_jcmd
from profiler.jit.jvm.runtime import JAVA_FLAGS


def java_cost(repeats: int, perf: str | None, workdir: Path) -> list[str]:
    if shutil.which("java") is None:
        return ["## Cost of profiling a Java program", "", "Skipped: no `java` on this machine.", ""]
    plain = {key: value for key, value in os.environ.items() if key != "JAVA_TOOL_OPTIONS"}
    flagged = dict(plain, JAVA_TOOL_OPTIONS=" ".join(JAVA_FLAGS))
    setups = {
        "java alone": Setup([], plain),
        "java with the injected flags": Setup([], flagged),
        "jitprof -F 99 (frame pointers given; frames named from the JVM's structures)": Setup(
            [*JITPROF, "-F", "99", "-o", "bench.folded", "--"], plain
        ),
    }
    if perf:
        setups["perf record -F 99 -g, with the flags"] = Setup(
            [perf, "record", "-q", "-F", "99", "-g", "-o", "perf.data", "--"], flagged
        )
    results = runtime_runs(
        setups,
        "jitprof -F 99 (frame pointers given; frames named from the JVM's structures)",
        JAVA_COMMAND,
        repeats,
        workdir,
        "java cost",
    )
    return [
        "## Cost of profiling a Java program",
        "",
        f"`{' '.join(JAVA_COMMAND[:1] + JAVA_COMMAND[-3:])}` (fixtures/java/Hot.java, "
        f"{subprocess.run(['java', '-version'], capture_output=True, text=True).stderr.splitlines()[0]}). "
        f"Medians of {repeats} interleaved runs.",
        "",
        *slowdown_table(results, "java alone"),
        "",
        *perf_map_request_cost(workdir, plain),
        "",
    ]


def perf_map_request_cost(workdir: Path, environment: dict[str, str]) -> list[str]:
    """One `Compiler.perfmap` request to a running JVM: jcmd against jitprof's own attach client."""
    jvm = subprocess.Popen([*JAVA_COMMAND[:-2], "30"], cwd=workdir, env=environment, stdout=subprocess.DEVNULL)
    try:
        time.sleep(2.0)
        run_jcmd(jvm.pid, "Compiler.perfmap")  # the attach listener starts on the first request
        ours = []
        for _ in range(20):
            started = time.perf_counter()
            run_jcmd(jvm.pid, "Compiler.perfmap")
            ours.append(time.perf_counter() - started)
        jcmd_wall, jcmd_cpu = [], []
        for _ in range(5):
            before = os.times()
            started = time.perf_counter()
            subprocess.run(["jcmd", str(jvm.pid), "Compiler.perfmap"], check=True, capture_output=True)
            jcmd_wall.append(time.perf_counter() - started)
            after = os.times()
            jcmd_cpu.append(after.children_user + after.children_system - before.children_user - before.children_system)
    finally:
        jvm.terminate()  # not SIGKILL: the JVM removes its attach socket as it exits
        jvm.wait()
        Path(f"/tmp/perf-{jvm.pid}.map").unlink(missing_ok=True)
    return [
        "Asking a running JVM for its perf map (`Compiler.perfmap`, this fixture): "
        f"jitprof's attach client {1000 * statistics.median(ours):.1f} ms (median of 20, including writing the map); "
        f"`jcmd` {1000 * statistics.median(jcmd_wall):.0f} ms wall and {1000 * statistics.median(jcmd_cpu):.0f} ms of CPU "
        "(median of 5; it starts a JVM each time).",
    ]
