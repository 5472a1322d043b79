"""V8 layouts kept across runs, in jitprof's cache.

Reading a node binary's layout scans its symbol table (over 100,000 symbols):
40-100 ms, 300 ms from disk, on the loop that reads new processes' maps,
at every run's first node. A short process that exec'd meanwhile was gone
before its maps were read. From the cache it takes about a millisecond.

An entry is JSON of the layout's records (only the classes it is made of),
keyed by the file's identity (device, inode, size, times: its owner cannot
make it another file's) and by the source of the code that reads layouts: a
jitprof that reads them otherwise never takes an older jitprof's entry. A
damaged or foreign entry is a miss, never an error.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Any

from profiler.native import cache

KIND = "v8-layouts"
MAX_ENTRY_BYTES = 1 << 20  # a layout is a few KiB


class LayoutCache:
    """Entries of records of the given classes (dataclasses, and exceptions
    kept by their message), read by the code in sources."""

    def __init__(self, records: tuple[type, ...], sources: tuple[str, ...]) -> None:
        self._classes = {record.__name__: record for record in records}
        self._sources = sources
        self._fingerprint: str | None = None

    def key_of(self, info: os.stat_result) -> str:
        if self._fingerprint is None:
            digest = hashlib.sha256()
            for source in (*self._sources, __file__):
                digest.update(Path(source).read_bytes())
            self._fingerprint = digest.hexdigest()
        identity = f"{info.st_dev}\0{info.st_ino}\0{info.st_size}\0{info.st_mtime_ns}\0{info.st_ctime_ns}\0{self._fingerprint}"
        return "f-" + hashlib.sha256(identity.encode()).hexdigest()[:40]

    def load(self, info: os.stat_result) -> object | None:
        """What is cached for the file (a layout, or the error saying why it has none); None: nothing."""
        kept = cache.read_json(KIND, self.key_of(info), MAX_ENTRY_BYTES)
        if kept is None:
            return None
        try:
            return self.decode(kept)
        except (ValueError, TypeError, RecursionError):
            return None

    def store(self, info: os.stat_result, known: object) -> None:
        cache.write_json(KIND, self.key_of(info), self.encode(known))

    def encode(self, value: object) -> Any:
        """JSON for a layout (or the error that says why a file has none)."""
        if isinstance(value, bool | int | str) or value is None:
            return value
        if isinstance(value, tuple):
            return {"$tuple": [self.encode(item) for item in value]}
        if isinstance(value, frozenset):
            return {"$frozenset": sorted(self.encode(item) for item in value)}
        if type(value).__name__ not in self._classes:
            raise TypeError(f"a layout holds a {type(value).__name__}")
        if isinstance(value, Exception):
            return {"$error": type(value).__name__, "message": str(value)}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {field.name: self.encode(getattr(value, field.name)) for field in dataclasses.fields(value)}
            return {"$record": type(value).__name__, "fields": fields}
        raise TypeError(f"a layout holds a {type(value).__name__}")

    def decode(self, data: Any) -> object:
        """The layout again; ValueError for anything encode does not make."""
        if isinstance(data, bool | int | str) or data is None:
            return data
        if not isinstance(data, dict):
            raise ValueError("not a layout entry")
        if set(data) == {"$tuple"} and isinstance(data["$tuple"], list):
            return tuple(self.decode(item) for item in data["$tuple"])
        if set(data) == {"$frozenset"} and isinstance(data["$frozenset"], list):
            return frozenset(self.decode(item) for item in data["$frozenset"])
        if set(data) == {"$error", "message"} and isinstance(data["message"], str):
            kind = self._classes.get(data["$error"])
            if kind is None or not issubclass(kind, Exception):
                raise ValueError("not a layout entry")
            return kind(data["message"])
        if set(data) == {"$record", "fields"} and isinstance(data["fields"], dict):
            kind = self._classes.get(data["$record"])
            if kind is None or not dataclasses.is_dataclass(kind):
                raise ValueError("not a layout entry")
            if set(data["fields"]) != {field.name for field in dataclasses.fields(kind)}:
                raise ValueError("not a layout entry")
            return kind(**{name: self.decode(value) for name, value in data["fields"].items()})
        raise ValueError("not a layout entry")
