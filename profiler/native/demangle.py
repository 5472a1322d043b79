"""C++ and Rust symbol demangling for names jitprof reads from a file itself
(its symbol-table reader): blazesym's demanglers, the ones that name what
blazesym symbolizes, exported beside its C API by native/blazesym."""

from __future__ import annotations

from profiler.native import blazesym
from profiler.native.library import NativeUnavailable

PLT_SUFFIX = "@plt"
# Itanium (C++, legacy Rust) and Rust v0. Any other name is a C name, which
# the demangler would read as a mangled type: `a` is "signed char".
_MANGLED_PREFIXES = ("_Z", "_R")
MAX_MANGLED_BYTES = 16384  # a target's text: longer names are left as they are


def demangle(name: str) -> str:
    """Readable form of a mangled C++ or Rust name; others unchanged (and
    every name unchanged when the native library is not built)."""
    if not name.startswith(_MANGLED_PREFIXES) or len(name) > MAX_MANGLED_BYTES:
        return name
    if name.endswith(PLT_SUFFIX):  # a PLT stub of a C++ function
        return demangle(name[: -len(PLT_SUFFIX)]) + PLT_SUFFIX
    try:
        return blazesym.demangle(name) or name
    except NativeUnavailable:
        return name
