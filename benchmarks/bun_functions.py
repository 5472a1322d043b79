"""Bun's functions placed from the hash in their jitdump names, on a real
program: TypeScript's compiler (lib/tsc.js, 6 MiB) run by bun. How many of
the functions JavaScriptCore compiled get a script and a line, whether any
is misplaced, and what it costs jitprof: the first name of a process (its
scripts transpiled by jitprof's own bun, every function hashed), the rest, and the
first name of a second process of the same command (the transpiling shared)."""

from __future__ import annotations

import re
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.harness import JITPROF, ROOT
from profiler.jit.bun.functions import _JSC_JS_NAME, NAME_NOT_MATERIALIZED, BunFunctions

BUN = ROOT / ".nodes" / "runtimes" / "node_modules" / "@oven" / "bun-linux-x64" / "bin" / "bun"
TSC = ROOT / ".nodes" / "apps" / "node_modules" / "typescript" / "lib" / "tsc.js"
PROJECT = ROOT / "fixtures" / "ts"
_DUMPED_NAME = re.compile(rb"(JSC-(?:Baseline|DFG|FTL): [^\x00]{0,2000}#[0-9A-Za-z]{6})\x00")


def bun_functions(workdir: Path, repeats: int) -> list[str]:
    title = ["## Bun: functions placed by their source hash", ""]
    if not BUN.exists() or not TSC.exists():
        return [*title, "Not measured: bun or typescript is not installed (`make setup-tests`).", ""]
    names = _compiled_names(workdir)
    first, helper, rest, shared = [], [], [], []
    outcome: dict[str, int] = {}
    for _ in range(repeats):
        functions = BunFunctions()
        with _watching_tsc() as pid:
            started, children = time.process_time(), _children_cpu()
            functions.place(pid, names[0])
            first.append(time.process_time() - started)
            helper.append(_children_cpu() - children)
            started = time.process_time()
            places = [functions.place(pid, name) for name in names]
            rest.append(time.process_time() - started)
        with _watching_tsc() as pid:
            started = time.process_time()
            functions.place(pid, names[0])
            shared.append(time.process_time() - started)
        outcome = _outcome(names, places)
    run = _profile(workdir)
    count = len(names)
    return [
        *title,
        f"`bun tsc.js -p fixtures/ts --noEmit` (TypeScript {_typescript_version()}, bun {_bun_version()}): "
        f"{count:,} distinct JS functions in its jitdumps. Each placed as the symbolizer does (a live `tsc --watch` of the "
        f"same command); jitprof's CPU time, medians of {repeats} (a new process each time, the page cache warm after the first):",
        "",
        "| | jitprof CPU |",
        "| --- | --- |",
        f"| first name of a process: its scripts transpiled by jitprof's own bun, every function hashed, both texts' "
        f"definitions indexed (done on a thread of its own as the process is followed) | "
        f"{statistics.median(first) * 1000:.0f} ms, and the transpiling bun's {statistics.median(helper) * 1000:.0f} ms |",
        f"| all {count:,} names then | {statistics.median(rest) * 1000:.0f} ms |",
        f"| first name of a second process of the same command (transpiling shared) | {statistics.median(shared) * 1000:.1f} ms |",
        "",
        f"Placed with script and line: {outcome['line']:,} ({outcome['line'] / count:.1%}); script only (the same text "
        f"twice in a script, or definitions that do not pair): {outcome['script']:,} ({outcome['script'] / count:.1%}); "
        f"not placed: {outcome['none']:,} (JavaScriptCore's own built-ins among them: `forEach`, `generatorResume`). "
        f"Misplaced (the line does not name the function, or its column is not the parameters' `(`): "
        f"{outcome['wrong']}. JavaScriptCore named "
        f"{outcome['unnamed']:,} of them `{NAME_NOT_MATERIALIZED}` (compiled off its main thread); "
        f"{outcome['named']:,} of those are named from bun's copy.",
        "",
        f"`jitprof -F 499 -- bun tsc.js -p fixtures/ts --noEmit`: {run}",
        "",
    ]


def _compiled_names(workdir: Path) -> list[str]:
    with tempfile.TemporaryDirectory(dir=workdir) as dumps:
        environment = {"PATH": "/usr/bin:/bin", "BUN_JSC_useJITDump": "1", "BUN_JSC_jitDumpDirectory": dumps}
        subprocess.run([str(BUN), str(TSC), "-p", str(PROJECT), "--noEmit"], env=environment, capture_output=True, check=False)
        found = {match.decode() for path in Path(dumps).glob("jit-*.dump") for match in _DUMPED_NAME.findall(path.read_bytes())}
    return sorted(found)


class _watching_tsc:
    """A bun running tsc --watch on the project, alive while names are placed."""

    def __enter__(self) -> int:
        self.process = subprocess.Popen(
            [str(BUN), str(TSC), "-p", str(PROJECT), "--noEmit", "--watch", "--preserveWatchOutput"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={"PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert self.process.stdout is not None
        for line in self.process.stdout:  # "Watching for file changes."
            if "Watching" in line:
                break
        return self.process.pid

    def __exit__(self, *exception: object) -> None:
        self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def _outcome(names: list[str], places: list) -> dict[str, int]:
    texts: dict[str, list[str]] = {}
    outcome = {"line": 0, "script": 0, "none": 0, "wrong": 0, "unnamed": 0, "named": 0}
    for name, place in zip(names, places, strict=True):
        unnamed = NAME_NOT_MATERIALIZED in name
        outcome["unnamed"] += unnamed
        outcome["named"] += bool(unnamed and place is not None and place.name)
        if place is None:
            outcome["none"] += 1
            continue
        if place.line == 0:
            outcome["script"] += 1
            continue
        outcome["line"] += 1
        lines = texts.setdefault(place.script, Path(place.script).read_text().splitlines())
        matched = _JSC_JS_NAME.match(name)
        function = matched.group(1).strip() if matched else ""
        function = place.name or function
        text = lines[place.line - 1]
        if place.module_code:
            continue
        # A named function's line names it; an anonymous one's column is its parameters' `(`.
        if (function and function not in text) or text[place.column - 1 : place.column] != "(":
            outcome["wrong"] += 1
    return outcome


def _profile(workdir: Path) -> str:
    output = workdir / "bun-tsc.folded"
    started = time.perf_counter()
    result = subprocess.run(
        [*JITPROF, "-F", "499", "-o", str(output), "--", str(BUN), str(TSC), "-p", str(PROJECT), "--noEmit"],
        capture_output=True, text=True, cwd=workdir, check=False,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        return f"failed: {result.stderr.strip().splitlines()[-1:]}"
    named = placed = 0
    for line in output.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        leaf = next((frame for frame in reversed(stack.split(";")) if frame.endswith("_[j]")), None)
        if leaf is None or leaf.startswith("["):
            continue
        named += int(count)
        placed += int(count) if re.search(r" [\w.-]+\.js:\d+_\[j\]$", leaf) else 0
    return (
        f"of the samples whose innermost JS frame is a named function, {placed / max(named, 1):.1%} show its script and "
        f"line ({named:,} samples); the run took {elapsed:.2f} s."
    )


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _typescript_version() -> str:
    match = re.search(r'"version":\s*"([^"]+)"', (TSC.parent.parent / "package.json").read_text())
    return match.group(1) if match else "?"


def _bun_version() -> str:
    return subprocess.run([str(BUN), "--version"], capture_output=True, text=True, check=False).stdout.strip()
