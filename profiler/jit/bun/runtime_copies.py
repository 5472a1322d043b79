"""Bun's runtime copies of scripts kept across runs, in jitprof's cache.

Making TypeScript's compiler's copy takes jitprof's bun 0.15-0.22 s of CPU
at every run, beside the program. A copy depends only on the script's text,
its loader (by its name's extension) and the transpiler (bun's version, transpile.js): an entry is
keyed by all of them, so a script whose text changed is a miss, never a
wrong copy. The entry holds the copy's text alone (UTF-8, read back within
the cap that bounds what transpile.js may answer).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from profiler.native import cache

KIND = "bun-copies"
SUFFIX = ".js"


def key_of(path: str, original: str, transpiler: Path, bun_version: str) -> str:
    """The key of a script's copy: its text, and its name's extension (which
    chooses the loader: a .ts and a .js of one text are copied apart)."""
    digest = hashlib.sha256(transpiler_fingerprint(transpiler, bun_version))
    extension = path.rsplit("/", 1)[-1].rpartition(".")[2]
    digest.update(extension.encode("utf-8", "surrogatepass") + b"\0")
    digest.update(original.encode("utf-8", "surrogatepass"))
    return "k-" + digest.hexdigest()[:40]


@functools.cache
def transpiler_fingerprint(transpiler: Path, bun_version: str) -> bytes:
    """What makes a transpiler's answers differ: transpile.js and bun's version (read once a run)."""
    return hashlib.sha256(transpiler.read_bytes() + bun_version.encode()).digest()


def load(key: str, max_bytes: int) -> str | None:
    """The copy kept under key, or None (none kept, too large, not text)."""
    path = cache.entry_path(KIND, key, SUFFIX)
    data = cache.read_entry(path) if path is not None else None
    if data is None or len(data) > max_bytes:
        return None
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


def store(key: str, runtime: str) -> None:
    path = cache.entry_path(KIND, key, SUFFIX)
    if path is not None:
        cache.write_entry(path, [runtime.encode("utf-8", "surrogatepass")])
