"""Bun scripts' indexes kept across runs, in jitprof's cache.

Indexing a script (its copy's functions hashed, both texts' definitions
found and paired) takes 1.6 s of CPU for TypeScript's compiler, while the
program runs beside it; from the cache it takes about 50 ms. An entry is
keyed by both texts and the source of the code that indexes them (another
jitprof never takes this one's entries), and is checked as it is read
back: every position inside its text, the lists that are searched sorted.
A damaged or foreign entry is a miss, never an error.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from profiler.jit.bun import scripts
from profiler.jit.bun.scripts import MODULE_CODE, BunScript, BunScriptIndex, LineIndex
from profiler.native import cache

KIND = "bun-scripts"
MAX_ENTRY_BYTES = 64 << 20  # TypeScript's compiler's: 1.9 MiB
_SOURCES = (scripts.__file__, __file__)
_fingerprint: list[bytes] = []


def indexed(script: BunScript) -> BunScriptIndex:
    """The script's index: from the cache, else made and kept there."""
    if script.is_indexed():
        return script.index()
    key = key_of(script.original, script.runtime)
    kept = load(key, script.original, script.runtime)
    if kept is not None:
        script.take_index(kept)
        return script.index()
    index = script.index()
    store(key, index)
    return index


def key_of(original: str, runtime: str) -> str:
    if not _fingerprint:
        digest = hashlib.sha256()
        for source in _SOURCES:
            digest.update(Path(source).read_bytes())
        _fingerprint.append(digest.digest())
    digest = hashlib.sha256(_fingerprint[0])
    for text in (original, runtime):
        encoded = text.encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(8, "little"))
        digest.update(encoded)
    return "k-" + digest.hexdigest()[:40]


def store(key: str, index: BunScriptIndex) -> None:
    cache.write_json(
        KIND,
        key,
        {
            "hashes": index.hashes,
            "runtime_definitions": index.runtime_definitions,
            "original_definitions": index.original_definitions,
            "names_at": [[start, names] for start, names in index.names_at.items()],
            "anchors": index.anchors,
            "runtime_unnamed": index.runtime_unnamed,
            "original_unnamed": index.original_unnamed,
        },
    )


def load(key: str, original: str, runtime: str) -> BunScriptIndex | None:
    """The index kept for these texts, or None (none kept, or it does not check out)."""
    kept = cache.read_json(KIND, key, MAX_ENTRY_BYTES)
    if not isinstance(kept, dict):
        return None
    copy_end, file_end = len(runtime), len(original)
    hashes = _starts_by_name(kept.get("hashes"), copy_end, MODULE_CODE)
    runtime_definitions = _starts_by_name(kept.get("runtime_definitions"), copy_end)
    original_definitions = _starts_by_name(kept.get("original_definitions"), file_end)
    names_at = _names_at(kept.get("names_at"), copy_end)
    anchors = _anchors(kept.get("anchors"), copy_end, file_end)
    runtime_unnamed = _sorted_starts(kept.get("runtime_unnamed"), copy_end)
    original_unnamed = _sorted_starts(kept.get("original_unnamed"), file_end)
    if (
        hashes is None
        or runtime_definitions is None
        or original_definitions is None
        or names_at is None
        or anchors is None
        or runtime_unnamed is None
        or original_unnamed is None
    ):
        return None
    return BunScriptIndex(
        hashes,
        runtime_definitions,
        original_definitions,
        names_at,
        LineIndex(original),
        anchors,
        runtime_unnamed,
        original_unnamed,
    )


def _inside(value: object, end: int, also: int | None = None) -> bool:
    return type(value) is int and (0 <= value <= end or value == also)


def _starts_by_name(value: object, end: int, also: int | None = None) -> dict[str, list[int]] | None:
    if not isinstance(value, dict):
        return None
    for starts in value.values():
        if not isinstance(starts, list) or not all(_inside(start, end, also) for start in starts):
            return None
    return value


def _names_at(value: object, end: int) -> dict[int, list[str]] | None:
    if not isinstance(value, list):
        return None
    found: dict[int, list[str]] = {}
    for entry in value:
        if not (isinstance(entry, list) and len(entry) == 2 and _inside(entry[0], end) and isinstance(entry[1], list)):
            return None
        if not all(isinstance(name, str) for name in entry[1]):
            return None
        found[entry[0]] = entry[1]
    return found


def _anchors(value: object, copy_end: int, file_end: int) -> list[tuple[int, int]] | None:
    if not isinstance(value, list):
        return None
    anchors: list[tuple[int, int]] = []
    for entry in value:
        if not (isinstance(entry, list) and len(entry) == 2 and _inside(entry[0], copy_end) and _inside(entry[1], file_end)):
            return None
        if anchors and (entry[0] < anchors[-1][0] or entry[1] <= anchors[-1][1]):
            return None
        anchors.append((entry[0], entry[1]))
    return anchors


def _sorted_starts(value: object, end: int) -> list[int] | None:
    if not isinstance(value, list) or not all(_inside(start, end) for start in value):
        return None
    return value if all(earlier <= later for earlier, later in zip(value, value[1:])) else None
