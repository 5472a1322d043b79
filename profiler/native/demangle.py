"""C++ and Rust symbol demangling through libstdc++'s __cxa_demangle."""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import threading
from typing import Any

_RUST_HASH = re.compile(r"::h[0-9a-f]{16}$")
PLT_SUFFIX = "@plt"
_RUST_ESCAPES = {"SP": "@", "BP": "*", "RF": "&", "LT": "<", "GT": ">", "LP": "(", "RP": ")", "C": ","}
_RUST_ESCAPE = re.compile(r"\$(SP|BP|RF|LT|GT|LP|RP|C|u[0-9a-f]{1,6})\$")


def _rust_legacy(text: str) -> str:
    """A legacy Rust path's escapes ($LT$, $u20$, ..) as Rust writes them."""
    parts = []
    for part in text.split("::"):
        if part.startswith("_$"):
            part = part[1:]
        part = part.replace("..", "::")
        part = _RUST_ESCAPE.sub(lambda match: _RUST_ESCAPES.get(match.group(1)) or chr(int(match.group(1)[1:], 16)), part)
        parts.append(part)
    return "::".join(parts)


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
    if name.endswith(PLT_SUFFIX):  # a PLT stub of a C++ function
        return demangle(name[: -len(PLT_SUFFIX)]) + PLT_SUFFIX
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
    if _RUST_HASH.search(text):
        return _rust_legacy(_RUST_HASH.sub("", text))
    return text
