"""A busy, compiling JVM with jitprof attached: javac compiling generated
classes (its own code JIT-compiled as it goes, its compiler threads deep in
C2), alone and with `jitprof --pid` attached from its start; the compile's
wall time against alone, and jitprof's own CPU (with its naming helper)
as a share of a core."""

from __future__ import annotations

import os
import random
import resource
import shutil
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import goals
from benchmarks.harness import JITPROF

CLASSES = 400
WALL_GOAL = 1.03
SHARE_GOAL = 0.03  # of a core
METHODS_PER_CLASS = 40


@dataclass(frozen=True)
class CompileRun:
    wall_s: float
    jitprof_cpu_s: float = 0.0
    samples: int = 0


def _write_sources(directory: Path) -> list[Path]:
    """CLASSES classes of METHODS_PER_CLASS generic methods each (the same every time)."""
    directory.mkdir(parents=True, exist_ok=True)
    chooser = random.Random(7)
    paths = []
    for index in range(CLASSES):
        methods = []
        for method in range(METHODS_PER_CLASS):
            other = chooser.randrange(CLASSES)
            methods.append(
                f"""    public static <T extends Comparable<T>> List<String> m{method}(List<T> items, Map<String, Integer> counts, int n) {{
        List<String> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {{
            T item = items.get(i % items.size());
            String key = item.toString() + "-{index}-{method}-" + i;
            counts.merge(key, 1, Integer::sum);
            if (counts.get(key) > {method % 5 + 1}) {{ out.add(key.toUpperCase()); }} else {{ out.add(String.valueOf(key.hashCode() ^ {other})); }}
        }}
        Function<String, Integer> f = s -> s.length() * {method + 1};
        out.sort(Comparator.comparing(f).thenComparing(Comparator.naturalOrder()));
        return out;
    }}"""
            )
        path = directory / f"C{index}.java"
        path.write_text(
            "\n".join(
                [
                    "package gen;",
                    "import java.util.*;",
                    "import java.util.function.*;",
                    f"public class C{index} {{",
                    *methods,
                    "}",
                ]
            )
        )
        paths.append(path)
    return paths


def _compile(sources: list[Path], workdir: Path, attached: bool) -> CompileRun:
    out = workdir / "classes"
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    javac = subprocess.Popen(["javac", "-d", str(out), *map(str, sources)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ended: list[tuple[float, resource.struct_rusage]] = []

    def reap() -> None:
        _pid, _status, usage = os.wait4(javac.pid, 0)
        ended.append((time.monotonic(), usage))

    waiter = threading.Thread(target=reap)
    waiter.start()
    jitprof = None
    if attached:
        jitprof = subprocess.run(
            [*JITPROF, "--no-tui", "--pid", str(javac.pid), "-F", "99", "-o", "jvm.folded"], cwd=workdir, capture_output=True
        )
    waiter.join()
    javac.returncode = 0  # reaped above
    end, javac_usage = ended[0]
    if jitprof is None:
        return CompileRun(end - started)
    if jitprof.returncode != 0:
        raise RuntimeError(f"jitprof failed: {jitprof.stderr.decode(errors='replace')[-400:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # The children's CPU is jitprof's, its helpers' and javac's: javac's own taken away.
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) - (javac_usage.ru_utime + javac_usage.ru_stime)
    samples = sum(int(line.rsplit(" ", 1)[1]) for line in (workdir / "jvm.folded").read_text().splitlines() if line)
    return CompileRun(end - started, cpu, samples)


def jvm_compiling_cost(repeats: int, workdir: Path) -> list[str]:
    title = "## A compiling JVM: javac with jitprof attached"
    if shutil.which("javac") is None:
        return [title, "", "Skipped: no `javac` on this machine.", ""]
    sources = _write_sources(workdir / "javac-sources")
    _compile(sources, workdir, attached=False)  # the page cache and the JDK's class data, warm
    alone: list[CompileRun] = []
    attached: list[CompileRun] = []
    for _round in range(repeats):
        alone.append(_compile(sources, workdir, attached=False))
        attached.append(_compile(sources, workdir, attached=True))
    ratios = [run.wall_s / base.wall_s for run, base in zip(attached, alone, strict=True)]
    shares = [run.jitprof_cpu_s / run.wall_s for run in attached]
    details = "A compiling JVM: javac with jitprof attached"
    goals.record(
        goals.ratio_row("a compiling JVM's wall (javac, `--pid` attached)", WALL_GOAL, statistics.median(ratios), details)
    )
    share = statistics.median(shares)
    goals.record(
        goals.GoalRow(
            "jitprof's own CPU beside that compiling JVM",
            f"≤ {100 * SHARE_GOAL:.0f} % of a core",
            f"{100 * share:.1f} % of a core",
            "",
            share <= SHARE_GOAL,
            details,
        )
    )
    version = subprocess.run(["javac", "-version"], capture_output=True, text=True).stdout.strip()
    return [
        title,
        "",
        f"`javac -d classes` ({version}) compiling {CLASSES} generated classes of {METHODS_PER_CLASS} generic methods "
        "(benchmarks/jvm_compiling_cost.py writes them), alone and with `jitprof --pid PID -F 99` attached from its start "
        f"(no JVM flags: its compiled frames are stepped by their sizes); {repeats} interleaved rounds, medians. "
        "jitprof's CPU is its process's and its naming helper's.",
        "",
        "| setup | compile wall (s) | vs alone | jitprof's CPU (s) | share of a core | samples |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| javac alone | {statistics.median(run.wall_s for run in alone):.2f} | +0.0 % | | | |",
        f"| jitprof --pid attached | {statistics.median(run.wall_s for run in attached):.2f} | "
        f"{100 * (statistics.median(ratios) - 1):+.1f} % | {statistics.median(run.jitprof_cpu_s for run in attached):.2f} | "
        f"{100 * statistics.median(shares):.1f} % | {statistics.median(run.samples for run in attached):.0f} |",
        "",
        "Targets: ≤ +3 % wall, jitprof ≤ 3 % of a core.",
        "",
    ]
