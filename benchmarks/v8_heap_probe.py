"""jitprof, run in this process with a meter on the V8 heap source: CPU per
JS frame named from V8's objects, and the reads it took. The statistics go
to stderr as one JSON line. Usage: python -m benchmarks.v8_heap_probe ARGS..."""

from __future__ import annotations

import json
import sys
import time

from profiler.cli import main
from profiler.jit.v8 import heap_source

_meter = {"frames": 0, "cpu_ns": 0}
_frames = heap_source.V8HeapSymbols._frames


def _metered(self, process, address, record, leaf):  # noqa: ANN001, ANN202
    started = time.thread_time_ns()  # runs on the process's memory thread
    try:
        return _frames(self, process, address, record, leaf)
    finally:
        _meter["frames"] += 1
        _meter["cpu_ns"] += time.thread_time_ns() - started


heap_source.V8HeapSymbols._frames = _metered  # type: ignore[method-assign]

if __name__ == "__main__":
    code = main(sys.argv[1:])
    print("v8-heap-probe " + json.dumps(_meter), file=sys.stderr)
    sys.exit(code)
