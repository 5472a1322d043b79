"""Build and cache the unwind table of an ELF file, as a run would the first
time it sees it: `python -m e2e.warm_cache FILE` (JITPROF_CACHE_DIR decides where)."""

from __future__ import annotations

import sys

from profiler.native import cache, elf, unwind_compiler


def main(path: str) -> int:
    image = elf.open_elf([path], path)
    if cache.load_cached(image.cache_key) is None:
        with open(path, "rb") as handle:
            cache.store_cached(image.cache_key, unwind_compiler.compile_table(handle).pack())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
