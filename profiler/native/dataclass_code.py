"""The methods @dataclass writes for each record class (__init__, __eq__,
__repr__, __hash__, a frozen class's __setattr__ and __delattr__), compiled
once by set-up instead of at every start.

dataclasses makes each method from source text it passes to exec: compiling
those texts was 40 % of the imports on a run's path to the program's start
(127 records, 616 texts: 70 ms of 185 on an Intel Xeon). Set-up imports all
of jitprof and keeps each text's code, keyed by a hash of the text, in
native/build; at a start dataclasses' exec is handed the kept code for a
text it knows, and compiles any other as it would have. The table is code
that runs: it is read only where root alone can change it, as the BPF
objects set-up keeps beside it are.
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import importlib.util
import marshal
import os
import stat
import sys
from pathlib import Path
from types import CodeType
from typing import Any

TABLE = Path(__file__).resolve().parents[2] / "native" / "build" / f"dataclass-code.{sys.implementation.cache_tag}.marshal"
MAX_TABLE_BYTES = 16 << 20
# Bytecode changes with this; marshal's format of code with it.
_HEADER = b"jitprof dataclass code\0" + importlib.util.MAGIC_NUMBER

_kept: dict[bytes, CodeType] = {}
_recording: dict[bytes, CodeType] | None = None  # set-up's: every text compiled
compiled_here = 0  # texts the table did not hold, compiled by this process


def _key(source: str) -> bytes:
    return hashlib.blake2b(source.encode(), digest_size=16).digest()


def _exec(source: Any, namespace: dict[str, Any] | None = None, local_names: Any = None, /) -> None:
    """exec as dataclasses calls it: a text's code from the table where it is kept."""
    if namespace is None:
        namespace = vars(dataclasses)  # what exec in dataclasses' own frame would use
    if isinstance(source, str):
        key = _key(source)
        code = _kept.get(key)
        if code is None:
            global compiled_here
            compiled_here += 1
            # What exec compiles a text as: dataclasses has no __future__ imports to inherit.
            code = compile(source, "<string>", "exec", dont_inherit=True)
            if _recording is not None:
                _recording[key] = code
        source = code
    builtins.exec(source, namespace, local_names)  # noqa: S102


def _read_table(path: Path) -> dict[bytes, CodeType]:
    """The kept code, or nothing: a table someone but its reader (or root) could change is not run."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return {}
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_TABLE_BYTES:
            return {}
        if info.st_uid not in {0, os.geteuid()} or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return {}
        data = handle.read(MAX_TABLE_BYTES + 1)
    if not data.startswith(_HEADER):
        return {}  # another Python's
    try:
        table = marshal.loads(data[len(_HEADER) :])
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(table, dict):
        return {}
    return {key: code for key, code in table.items() if isinstance(key, bytes) and isinstance(code, CodeType)}


def install(path: Path = TABLE) -> int:
    """Route dataclasses' exec through the table (root's only where root
    alone can change its directory; any other is only slower); how many
    texts it holds."""
    global _kept
    if os.geteuid() == 0:
        from profiler.safety.files import root_only  # noqa: PLC0415

        trusted = root_only(path.parent)
    else:
        trusted = True  # the file's own owner and mode are checked as it is read
    _kept = _read_table(path) if trusted else {}
    dataclasses.exec = _exec  # type: ignore[attr-defined]  # a module global is found before the builtin
    return len(_kept)


def stale(path: Path = TABLE) -> bool:
    """Is a module newer than the table (or is there none)?"""
    try:
        written = path.stat().st_mtime_ns
    except OSError:
        return True
    return any(module.stat().st_mtime_ns > written for module in Path(__file__).parents[1].rglob("*.py"))


def write_table(path: Path = TABLE) -> int:
    """(Set-up.) Every jitprof module imported, the texts their records'
    methods are made from compiled and written; how many."""
    import importlib  # noqa: PLC0415
    import pkgutil  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    global _recording, _kept
    _recording, _kept = {}, {}  # every text compiled afresh (dataclasses' exec is ours: profiler/__init__)
    import profiler  # noqa: PLC0415

    for module in pkgutil.walk_packages(profiler.__path__, "profiler."):
        if module.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(module.name)
        except Exception:  # an optional part that cannot load here (its texts are compiled at run time)  # noqa: BLE001, S112
            continue
    texts = _recording  # (none is made before: profiler/__init__ installs this first)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-dataclass-code-")
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(_HEADER + marshal.dumps(texts))
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)
    return len(texts)
