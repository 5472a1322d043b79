"""Debug files by build-id from the debuginfod servers in DEBUGINFOD_URLS,
as elfutils, gdb and perf get them: for a stripped file with no local debug
file, so its functions get their names.

Asked from the symbolizer thread, never the sampling path, once per
build-id per run: each server gets one deadline for the whole exchange
(redirects included, http and https only at every hop) and a size cap. The
answer is kept in the cache, a "not found" too (for an hour). What a server
sends is hostile input like any file: it must be an ELF file with the
build-id asked for, and is then read like any other.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from profiler.native import cache

KIND = "debuginfod"
DEADLINE_S = 10.0  # per server, for the whole exchange
MAX_BYTES = 1 << 30
MISSING_FOR_S = 3600.0  # a "not found" is believed this long
READ_CHUNK = 1 << 20

enabled = True  # --no-debuginfod
_asked: set[str] = set()  # build-ids asked for in this run, whatever came of it
_asked_lock = threading.Lock()


def configured() -> bool:
    return enabled and bool(os.environ.get("DEBUGINFOD_URLS", "").split())


def debug_file(build_id: str, build_id_of: Callable[[BinaryIO], str]) -> Path | None:
    """The debug file for build_id, from the cache or a server; None when
    turned off, no server is set, or none has it. build_id_of reads the
    build-id of a downloaded file (raising ValueError if it is not ELF)."""
    urls = os.environ.get("DEBUGINFOD_URLS", "").split()
    if not enabled or not urls or not re.fullmatch(r"[0-9a-f]{2,80}", build_id):
        return None
    key = f"b-{build_id}"
    found = cache.entry_path(KIND, key, ".debug")
    missing = cache.entry_path(KIND, key, ".missing")
    if found is None or missing is None:
        return None  # no usable cache: nowhere safe to keep a download
    if cache.usable_entry(found):
        return found
    try:
        if time.time() - os.stat(missing, follow_symlinks=False).st_mtime < MISSING_FOR_S:
            return None
    except OSError:
        pass
    with _asked_lock:
        if build_id in _asked:
            return None  # asked already in this run (and the cache could not say so)
        _asked.add(build_id)
    for url in urls:
        if _download(f"{url.rstrip('/')}/buildid/{build_id}/debuginfo", found, build_id, build_id_of):
            return found
    cache.write_entry(missing, [b""])
    return None


def _download(url: str, destination: Path, build_id: str, build_id_of: Callable[[BinaryIO], str]) -> bool:
    # Imported when first asked: HTTP and TLS cost every run's start some 40 ms.
    from profiler.safety.http_exchange import ExchangeFailed, exchange  # noqa: PLC0415

    try:
        destination.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        descriptor, temporary = tempfile.mkstemp(dir=destination.parent, prefix=".tmp-")
    except OSError:
        return False
    try:
        with os.fdopen(descriptor, "w+b") as handle:
            received = 0

            def keep(chunk: bytes) -> None:
                nonlocal received
                received += len(chunk)
                if received > MAX_BYTES:
                    raise ExchangeFailed(f"more than {MAX_BYTES} bytes")
                handle.write(chunk)

            reply = exchange(
                "GET", url, deadline_s=DEADLINE_S, headers={"User-Agent": "jitprof"}, sink=keep, follow_redirects=True
            )
            if reply.status != 200:
                return False
            handle.flush()
            handle.seek(0)
            if build_id_of(handle) != build_id:
                return False
        os.replace(temporary, destination)
        temporary = ""
        return True
    except (OSError, ValueError, ExchangeFailed):
        return False
    finally:
        if temporary:
            try:
                os.unlink(temporary)
            except OSError:
                pass
