"""Build one unwind table in a separate process: `python -m profiler.native.unwind_worker FD KEY`.

pyelftools needs ~25 s for node's .eh_frame; in a child process that work
runs beside the daemon instead of contending for its interpreter lock, and
can be stopped at once when the run ends. The table reaches the parent
through the on-disk cache; progress goes to stdout as `DONE TOTAL` lines.
"""

from __future__ import annotations

import os
import sys

from profiler.native import cache, unwind_compiler


def main(argv: list[str]) -> int:
    descriptor, key = int(argv[0]), argv[1]

    def progress(done: int, total: int) -> None:
        sys.stdout.write(f"{done} {total}\n")
        sys.stdout.flush()

    with os.fdopen(descriptor, "rb") as handle:
        expected = unwind_compiler.fde_count_hint(handle)
        if expected:
            progress(0, expected)  # before the slow parse: a bar shows at once
        table = unwind_compiler.compile_table(handle, progress)
    cache.store_cached(key, table.pack())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
