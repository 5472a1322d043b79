"""Build and cache the unwind table of an ELF file, as a run would the first
time it sees it: `python -m e2e.warm_cache FILE` (JITPROF_CACHE_DIR decides where)."""

from __future__ import annotations

import sys

from profiler import elf, unwind


def main(path: str) -> int:
    image = elf.open_elf([path], path)
    if unwind.load_cached(image.cache_key) is None:
        with open(path, "rb") as handle:
            unwind.store_cached(image.cache_key, unwind.compile_table(handle).pack())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
