"""C++ and Rust symbol demangling through libstdc++'s __cxa_demangle."""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import threading
from typing import Any

_RUST_HASH = re.compile(r"::h[0-9a-f]{16}$")
_lock = threading.Lock()
_demangler: Any = None  # the C function, or False when libstdc++ is absent
_free: Any = None


def _load() -> None:
    global _demangler, _free
    if _demangler is not None:
        return
    for name in ("libstdc++.so.6", ctypes.util.find_library("stdc++")):
        if not name:
            continue
        try:
            library = ctypes.CDLL(name)
        except OSError:
            continue
        function = library.__cxa_demangle
        function.restype = ctypes.c_void_p
        function.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_int)]
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.free.argtypes = [ctypes.c_void_p]
        _demangler, _free = function, libc.free
        return
    _demangler = False  # no libstdc++: names stay mangled


def demangle(name: str) -> str:
    """Readable form of a mangled C++ or legacy Rust name; others unchanged."""
    if not name.startswith("_Z"):
        return name
    with _lock:
        _load()
    if not _demangler:
        return name
    status = ctypes.c_int(0)
    pointer = _demangler(name.encode("utf-8", "surrogateescape"), None, None, ctypes.byref(status))
    if status.value != 0 or not pointer:
        return name
    try:
        text = ctypes.string_at(pointer).decode("utf-8", "replace")
    finally:
        _free(pointer)
    # Legacy Rust symbols are Itanium-mangled with a trailing hash segment.
    return _RUST_HASH.sub("", text)
