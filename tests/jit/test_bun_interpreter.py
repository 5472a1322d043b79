"""Bun's interpreter handlers named from its JavaScriptCore's own tables
(jit/bun/interpreter.py): the names table found in .rodata, hand-built and in
jitprof's own bun's binary, and the opcode maps a live bun fills."""

from __future__ import annotations

import json
import struct

import pytest

from profiler.jit.bun.interpreter import (
    CACHE_KIND,
    OpcodeTables,
    cached_handlers,
    handlers_from,
    keep_handlers,
    names_table,
    opcode_tables,
    text_range,
)
from profiler.jit.bun.transpiler import OWN_BUN
from profiler.native import cache

BASE = 0x200000
NAMES = ["op_tail_call_varargs", "op_call_varargs", "op_enter", "op_ret", "llint_program_prologue"]


def rodata_with(names: list[str], lengths: list[int] | None = None) -> bytes:
    """Strings, then an 8-aligned table of (pointer, length with NUL) after a word that is no entry."""
    strings = bytearray(b"\0")
    pointers = []
    for name in names:
        pointers.append(BASE + len(strings))
        strings += name.encode() + b"\0"
    strings += bytes(-len(strings) % 8) + struct.pack("<QQ", 0x400000004, 0x100000001)
    for index, (pointer, name) in enumerate(zip(pointers, names)):
        length = lengths[index] if lengths else len(name) + 1
        strings += struct.pack("<QQ", pointer, length)
    return bytes(strings + struct.pack("<QQ", 0x800000007, 0x80000000A))


def test_the_names_table_around_op_enter():
    assert names_table(rodata_with(NAMES), BASE) == tuple(NAMES)


def test_a_table_ends_at_an_entry_that_is_not_a_name():
    # Lengths that do not end at their NULs (the first and the fourth), then a pointer outside .rodata.
    assert names_table(rodata_with(NAMES, [22, 16, 9, 3, 23]), BASE) == ("op_call_varargs", "op_enter")
    damaged = bytearray(rodata_with(NAMES))
    table = damaged.find(struct.pack("<Q", BASE + 1))
    struct.pack_into("<Q", damaged, table, 1 << 40)
    assert names_table(bytes(damaged), BASE) == ("op_call_varargs", "op_enter", "op_ret", "llint_program_prologue")
    assert names_table(b"\0op_enter\0" + bytes(64), BASE) == ()
    assert names_table(rodata_with(["op_enter", "Not A Name"]), BASE) == ("op_enter",)


TEXT = (0x1000000, 0x2000000)


def tables(names=tuple(NAMES)) -> OpcodeTables:
    return OpcodeTables(tuple(names), 0x6000000, 16384, *TEXT)


def maps_with(narrow: list[int], wide16: list[int], wide32: list[int], size: int = 16384) -> bytes:
    words = narrow + wide16 + wide32
    return struct.pack(f"<{len(words)}Q", *words) + bytes(size - 8 * len(words))


def test_handlers_are_named_from_the_three_maps():
    narrow = [0x1000100, 0x1000200, 0x1000300, 0x1000400, 0x1000500]
    wide16 = [0x1001100, 0x1001200, 0x1001300, 0x1001400, 0x1000500]  # a helper: the same code
    wide32 = [0x1002100, 0x1002200, 0x1002300, 0x1002400, 0]
    handlers = handlers_from(tables(), maps_with(narrow, wide16, wide32), load_bias=0)
    assert handlers is not None
    assert handlers.name_at(0x1000100) == handlers.name_at(0x10001FF) == "llint_op_tail_call_varargs"
    assert handlers.name_at(0x1000480) == "llint_op_ret"
    assert handlers.name_at(0x1000500) == "llint_program_prologue"
    assert handlers.name_at(0x1001210) == "llint_op_call_varargs_wide16"
    assert handlers.name_at(0x1002310) == "llint_op_enter_wide32"
    assert handlers.name_at(0x10000FF) is None  # before the first
    assert handlers.name_at(0x1002400) is None  # the last: where it ends is not known
    # Relocated by the load bias of a position-independent mapping.
    moved_maps = ([value + 0x10000 if value else 0 for value in map_] for map_ in (narrow, wide16, wide32))
    moved = handlers_from(tables(), maps_with(*moved_maps), 0x10000)
    assert moved is not None and moved.name_at(0x1000480) == "llint_op_ret"


def test_maps_not_filled_or_not_this_layout_name_nothing():
    assert handlers_from(tables(), bytes(16384), load_bias=0) is None  # before JavaScriptCore started
    outside = [0x1000100, 0x1000200, 0x3000000, 0x1000400, 0x1000500]
    assert handlers_from(tables(), maps_with(outside, outside, outside), load_bias=0) is None


@pytest.mark.skipif(not OWN_BUN.exists(), reason="jitprof's own bun is installed by make setup")
def test_bun_s_own_binary_has_the_tables():
    with OWN_BUN.open("rb") as handle:
        found = opcode_tables(handle)
    assert found is not None
    assert found.names[:2] == ("op_tail_call_varargs", "op_call_varargs") and "op_enter" in found.names
    assert len(found.names) >= 200 and 3 * 8 * len(found.names) <= found.maps_size
    assert found.text_start < found.text_end
    with OWN_BUN.open("rb") as handle:
        assert text_range(handle) == (found.text_start, found.text_end)  # what kept handlers are checked against


def test_other_files_have_none(chain_binary):
    with open(chain_binary, "rb") as handle:
        assert opcode_tables(handle) is None
        assert text_range(handle) is None  # not linked at fixed addresses


def test_handlers_a_live_bun_showed_are_kept_for_a_bun_gone_too_soon():
    narrow = [0x1000100, 0x1000200, 0x1000300, 0x1000400, 0x1000500]
    wide = [0x1001100, 0x1001200, 0x1001300, 0x1001400, 0x1001500]
    handlers = handlers_from(tables(), maps_with(narrow, wide, [0] * 5), load_bias=0)
    assert handlers is not None
    keep_handlers("f-b0a1", handlers)
    assert cached_handlers("f-b0a1", TEXT) == handlers
    assert cached_handlers("f-b0a2", TEXT) is None  # another binary's: none


@pytest.mark.parametrize(
    "kept",
    [
        {"starts": [0x1000100, 0x3000000], "names": ["llint_op_ret", "llint_op_enter"]},  # outside the text
        {"starts": [0x1000200, 0x1000100], "names": ["llint_op_ret", "llint_op_enter"]},  # out of order
        {"starts": [0x1000100], "names": ["llint_op_ret\x1b[31m"]},  # not a handler's name
        {"starts": [0x1000100, 0x1000200], "names": ["llint_op_ret"]},
        [1, 2],
    ],
)
def test_a_kept_entry_is_checked_as_a_live_read_is(kept):
    path = cache.entry_path(CACHE_KIND, "f-b0a3", ".json")
    assert path is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(kept))
    assert cached_handlers("f-b0a3", TEXT) is None
