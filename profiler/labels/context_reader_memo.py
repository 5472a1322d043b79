"""Which executables' processes need the kernel's context reader (V8's
async context frames, read at each sample: bpf/v8_context.bpf.h), as jitprof
last found, kept across runs.

The reader costs about 0.1 s of the verifier's time at every start. Node
20's V8 has no async context frames, nor has a program that is not node: a
run that starts or attaches only to such programs is better off loading the
reader the first time a process that needs it is found. Before the program
loads there is no time to read a node's layout (30-60 ms of imports alone),
so what an earlier run found is kept here, by the executable's identity.

A hint, never a truth: a wrong or missing entry costs time, not labels (the
reader is loaded when a process that needs it is found, whatever this says).
"""

from __future__ import annotations

import hashlib
import os
import threading

from profiler.native import cache

KIND = "context-reader"
MAX_ENTRY_BYTES = 64


def _key(info: os.stat_result) -> str:
    identity = f"{info.st_dev}\0{info.st_ino}\0{info.st_size}\0{info.st_mtime_ns}\0{info.st_ctime_ns}"
    return "f-" + hashlib.sha256(identity.encode()).hexdigest()[:40]


_told: dict[str, bool] = {}  # this run's: a process watched again and again costs a lookup
_told_lock = threading.Lock()
MAX_TOLD = 256
_needed_in_run = False  # has a process of this run needed the reader?


def remember(info: os.stat_result, needed: bool) -> None:
    """What watching a process of this executable found (written only when it changes)."""
    global _needed_in_run
    key = _key(info)
    with _told_lock:
        _needed_in_run = _needed_in_run or needed
        if _told.get(key) == needed:
            return
        if len(_told) >= MAX_TOLD:
            _told.clear()
        _told[key] = needed
    if _recalled(key) != needed:
        cache.write_json(KIND, key, {"needed": needed})


def remember_started(info: os.stat_result) -> None:
    """(At the end of a run.) A program the run started with, remembered by
    whether any process of the run needed the reader, unless a watch of its
    own process judged it (a node is judged by its own V8, not by what it
    started): a bun, a JVM or a native program needs none, and a wrapper
    (`time node app.js`) needs what its node needed."""
    with _told_lock:
        if _key(info) in _told:
            return
    remember(info, _needed_in_run)


def recalled(info: os.stat_result) -> bool | None:
    """What was found for this executable; None: never seen (or a damaged entry)."""
    return _recalled(_key(info))


def _recalled(key: str) -> bool | None:
    kept = cache.read_json(KIND, key, MAX_ENTRY_BYTES)
    if not isinstance(kept, dict) or not isinstance(kept.get("needed"), bool):
        return None
    return kept["needed"]


def may_need(path: str) -> bool:
    """Might a process of the executable at path need the reader? True
    unless an earlier run found it does not."""
    try:
        info = os.stat(path)
    except OSError:
        return True
    return recalled(info) is not False
