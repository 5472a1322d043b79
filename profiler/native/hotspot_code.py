"""HotSpot's compiled code at a leaf, decoded as the kernel's walker decodes
it (bpf/hotspot_code.h, compiled into native/): where a leaf caught in a
compiled method's prologue or epilogue has its frame."""

from __future__ import annotations

from profiler.native.library import load

CODE_BYTES = 24  # read at a leaf: from pc - PROLOGUE_BEFORE for the prologue, from pc for the epilogue
PROLOGUE_BEFORE = 8
# bpf/hotspot_code.h's PROLOGUE_* (tests/native/test_hotspot_code.py checks them).
PROLOGUE_UNKNOWN = 0
PROLOGUE_RETURN_ONLY = 1
PROLOGUE_RBP_PUSHED = 2
PROLOGUE_RBP_UNSAVED = 3
PROLOGUE_FRAME_BUILT = 4


def prologue_state(code: bytes) -> int:
    """A leaf in a prologue: how much of its frame is built (PROLOGUE_*),
    from the CODE_BYTES at pc - PROLOGUE_BEFORE."""
    ffi, lib = load()
    return int(lib.jp_hotspot_prologue(ffi.from_buffer(_checked(code)), len(code)))


def epilogue_words(code: bytes) -> int:
    """A leaf in an epilogue: the words left above its return address (2:
    rbp too, 1: none), 0 where the frame is whole; from the CODE_BYTES at pc."""
    ffi, lib = load()
    return int(lib.jp_hotspot_epilogue(ffi.from_buffer(_checked(code)), len(code)))


def _checked(code: bytes) -> bytes:
    if len(code) < CODE_BYTES:
        raise ValueError(f"{CODE_BYTES} bytes of code are needed, not {len(code)}")
    return code
