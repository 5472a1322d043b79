"""Freed memory handed back to the system. glibc keeps what a burst of
small allocations left free (reading a large file's symbols, cutting an
interval) for reuse, and a service's RSS would show its highest point ever
instead of what it holds."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def give_back_freed_memory() -> None:
    """(Any thread: glibc locks each arena as it trims it.)"""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
