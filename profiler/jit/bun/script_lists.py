"""The scripts a bun command runs, kept across runs in jitprof's cache.

Finding them takes jitprof's bun about 0.2 s of CPU for tsc (its start, a
scan of every import, 6 MB of JSON back), beside the program, at every run.
A command's list is kept by what chooses it (the working directory, the
arguments, the user, the transpiler) and taken again only while every
script on it is unchanged: each is read again as the target's user
(open_in_root_as: no link, no `..`, each directory searchable by that
user), its text must hash as it did, and the directory holding it must not
have changed (a `util.ts` added beside the `util.js` an import found); a
list is not kept at all when a directory of it changed while bun searched.
A list that does not hold is a miss, and jitprof's bun finds the scripts
again; one that holds while an import would now resolve elsewhere (a
package's directory changed, not a listed script's) leaves that script's
functions unplaced, never misplaced: copies are keyed by their own text.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path

from profiler.jit.bun.runtime_copies import transpiler_fingerprint
from profiler.jit.v8.source_map_files import TargetUser
from profiler.native import cache
from profiler.safety.files import open_in_root_as

KIND = "bun-script-lists"
MAX_LIST_BYTES = 1 << 20  # 256 paths of at most 4 KiB, with their hashes
# A directory's time is the kernel's coarse clock (a tick behind at most):
# one changed this near the search's start may have changed during it.
MTIME_SLACK_NS = 50_000_000


@dataclass(frozen=True)
class ListedScript:
    path: str
    text_sha256: str
    directory_mtime_ns: int


def key_of(directory: str, arguments: list[str], user: tuple[int, int], transpiler: Path, bun_version: str) -> str:
    digest = hashlib.sha256(transpiler_fingerprint(transpiler, bun_version))
    for part in (directory, *arguments, str(user[0]), str(user[1])):
        digest.update(part.encode("utf-8", "surrogateescape") + b"\0")
    return "k-" + digest.hexdigest()[:40]


def listed(path: str, original: str) -> ListedScript | None:
    """A found script as kept: its text's hash and its directory's change
    time now (None when its directory cannot be seen)."""
    try:
        directory_mtime_ns = _directory_mtime_ns(path)
    except OSError:
        return None
    return ListedScript(path, hashlib.sha256(original.encode("utf-8", "surrogatepass")).hexdigest(), directory_mtime_ns)


def _directory_mtime_ns(path: str) -> int:
    """When the directory holding path last changed (a stat only: nothing in it is read)."""
    return os.stat(posixpath.dirname(path) or "/", follow_symlinks=False).st_mtime_ns


def store(key: str, scripts: list[ListedScript], searched_since_ns: int) -> bool:
    """Keep the list found by a search begun at searched_since_ns (the wall
    clock), unless a directory of it changed since then (or about then): a
    file added while bun searched may not be in it, and the next run must
    search again rather than take it. Whether it was kept."""
    if any(script.directory_mtime_ns >= searched_since_ns - MTIME_SLACK_NS for script in scripts):
        return False
    cache.write_json(KIND, key, [[script.path, script.text_sha256, script.directory_mtime_ns] for script in scripts])
    return True


def load(key: str, user: TargetUser, max_scripts: int, max_bytes: int) -> list[tuple[str, str]] | None:
    """The kept list's scripts and their texts, read again now, or None
    when no list is kept or any script on it changed or cannot be read."""
    entries = cache.read_json(KIND, key, MAX_LIST_BYTES)
    if not isinstance(entries, list) or not entries or len(entries) > max_scripts:
        return None
    scripts: list[tuple[str, str]] = []
    total = 0
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 3):
            return None
        path, text_sha256, directory_mtime_ns = entry
        if not (
            isinstance(path, str)
            and path.startswith("/")
            and isinstance(text_sha256, str)
            and isinstance(directory_mtime_ns, int)
        ):
            return None
        try:
            with open_in_root_as("/", path, max_bytes - total, user.may_search, user.may_read) as handle:
                data = handle.read(max_bytes - total + 1)
            changed = _directory_mtime_ns(path) != directory_mtime_ns
        except (OSError, ValueError):
            return None
        total += len(data)
        if total > max_bytes or changed or hashlib.sha256(data).hexdigest() != text_sha256:
            return None
        try:
            scripts.append((path, data.decode("utf-8")))
        except UnicodeDecodeError:
            return None
    return scripts
