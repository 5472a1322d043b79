"""cffi declarations parsed once, by set-up, into a module of their own
(cffi's out-of-line ABI mode): parsing a header at every start took 20 ms
of jitprof's (holding the GIL the BPF load needs) and 30 ms of blazesym's
helper's, which a short program's names wait for. Each parsed module is
named by a hash of exactly the declarations it holds: a header that changed
is parsed again at run time until set-up writes it anew.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
from pathlib import Path
from typing import Any


def _path(directory: Path, prefix: str, declarations: str) -> Path:
    key = hashlib.sha256(declarations.encode()).hexdigest()[:16]
    return directory / f"{prefix}_{key}.py"


def written_ffi(directory: Path, prefix: str, declarations: str) -> Any:
    """The FFI set-up wrote for exactly these declarations, or None."""
    path = _path(directory, prefix, declarations)
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ffi


def parsed_ffi(directory: Path, prefix: str, declarations: str) -> Any:
    """An FFI that knows these declarations: the written module's, else parsed now."""
    written = written_ffi(directory, prefix, declarations)
    if written is not None:
        return written
    import cffi  # noqa: PLC0415

    ffi = cffi.FFI()
    ffi.cdef(declarations)
    return ffi


def write_parsed(directory: Path, prefix: str, declarations: str) -> Path:
    """(Set-up.) The declarations parsed, as a module cffi loads without
    parsing; those of earlier headers removed."""
    import cffi  # noqa: PLC0415

    path = _path(directory, prefix, declarations)
    for old in directory.glob(f"{prefix}_*.py"):
        if old != path:
            old.unlink()
    builder = cffi.FFI()
    builder.cdef(declarations)
    builder.set_source(path.stem, None)
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # cffi says "generating ..."
        builder.emit_python_code(str(path))
    return path
