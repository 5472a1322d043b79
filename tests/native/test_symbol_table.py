"""Symbol tables held as arrays and one block of names."""

import array

import pytest

from profiler.native import cache
from profiler.native.symbol_table import SymbolTable


def test_lookups_names_and_the_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("JITPROF_CACHE_DIR", str(tmp_path))
    table = SymbolTable.of([0x100, 0x200, 0x300], [0x10, 0, 0x20], ["_Z3fooi", "späť", "bar\0baz"])
    assert table.lookup(0x104).name == "foo(int)" and table.lookup(0x104).offset == 4
    assert table.lookup(0x110) is None  # past its size
    assert table.lookup(0x2F0).name == "späť"  # no size: up to the next symbol
    assert table.lookup(0x300).name == "barbaz"  # a NUL cannot end a name early
    assert table.lookup(0x50) is None
    cache.store("b-1234", table)
    loaded = cache.load("b-1234")
    assert loaded is not None and loaded.names == ["_Z3fooi", "späť", "barbaz"]
    assert loaded.starts == table.starts and loaded.sizes == table.sizes
    empty = SymbolTable.of([], [], [])
    cache.store("b-5678", empty)
    assert len(cache.load("b-5678")) == 0 and empty.lookup(0x100) is None


def test_as_many_names_as_symbols():
    with pytest.raises(ValueError):
        SymbolTable(array.array("Q", [1, 2]), array.array("Q", [1, 1]), b"one\0")
