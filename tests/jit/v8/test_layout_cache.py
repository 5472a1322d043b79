"""V8 layouts kept in the cache across runs: the same layout back, read
from the file only once, and any entry that is not one of ours a miss."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from profiler.jit.v8.heap import layout, layout_cache

CACHE = layout._cache
from tests.jit.v8.test_heap import NODES


def node_or_skip(major: str) -> str:
    if not NODES[major].exists():
        pytest.skip(f"node {major} is not installed here")
    return str(NODES[major])


@pytest.fixture(autouse=True)
def fresh_run():
    """Each test is a new run: nothing read in memory yet."""
    layout._layouts.clear()
    yield
    layout._layouts.clear()


@pytest.mark.parametrize("major", sorted(NODES))
def test_a_layout_comes_back_from_the_cache_whole(major, monkeypatch):
    path = node_or_skip(major)
    first = layout.layout_of_file(path)
    layout._layouts.clear()  # the next run

    def not_again(_handle):
        raise AssertionError("the file was read again")

    monkeypatch.setattr(layout, "read_layout", not_again)
    again = layout.layout_of_file(path)
    # Errors compare by identity: the records are compared as written.
    assert CACHE.encode(again) == CACHE.encode(first)
    assert again.builtins == first.builtins and again.async_config() == first.async_config()


def test_a_file_that_changed_is_read_again(tmp_path, monkeypatch):
    copy = tmp_path / "node"
    shutil.copy(node_or_skip("20"), copy)
    layout.layout_of_file(str(copy))
    layout._layouts.clear()
    os.utime(copy, ns=(1, 1))  # another file now, for all the cache knows
    reads = []
    original = layout.read_layout
    monkeypatch.setattr(layout, "read_layout", lambda handle: reads.append(1) or original(handle))
    layout.layout_of_file(str(copy))
    assert reads == [1]


def test_a_file_without_v8_is_remembered_as_such(tmp_path):
    path = tmp_path / "not-node"
    shutil.copy("/bin/true", path)
    with pytest.raises(layout.LayoutError) as first:
        layout.layout_of_file(str(path))
    layout._layouts.clear()
    with pytest.raises(layout.LayoutError) as again:
        layout.layout_of_file(str(path))
    assert str(again.value) == str(first.value)


def test_a_layout_read_past_an_io_error_is_not_kept(tmp_path, monkeypatch):
    copy = tmp_path / "node"
    shutil.copy(node_or_skip("20"), copy)
    pread = os.pread
    calls = []

    def failing_once(descriptor, length, offset):
        calls.append(offset)
        if len(calls) == 3:
            raise OSError(5, "Input/output error")
        return pread(descriptor, length, offset)

    monkeypatch.setattr(layout.elf_format.os, "pread", failing_once)
    with pytest.raises(layout.LayoutError, match="Input/output error"):
        layout.layout_of_file(str(copy))
    monkeypatch.setattr(layout.elf_format.os, "pread", pread)
    layout._layouts.clear()  # the next run reads the file, not the error
    assert layout.layout_of_file(str(copy)).builtins[0] > 0


@pytest.mark.parametrize(
    "entry",
    [
        b"not json",
        b"[]",
        json.dumps({"$record": "Popen", "fields": {}}).encode(),  # not a class of the layout's
        json.dumps({"$error": "SystemExit", "message": "x"}).encode(),
        json.dumps({"$record": "IsolateLocations", "fields": {"isolate_tls": 1}}).encode(),  # a field missing
        json.dumps({"$tuple": [1], "extra": 2}).encode(),
        json.dumps({"$frozenset": "ab"}).encode(),
        b"[" * 100_000 + b"]" * 100_000,
    ],
)
def test_an_entry_that_is_not_a_layout_is_a_miss(tmp_path, entry):
    copy = tmp_path / "node"
    shutil.copy(node_or_skip("20"), copy)
    truth = layout.layout_of_file(str(copy))
    info = os.stat(copy)
    path = layout_cache.cache.entry_path(layout_cache.KIND, CACHE.key_of(info), layout_cache.cache.JSON_SUFFIX)
    assert path is not None and path.exists()
    path.write_bytes(entry)
    assert CACHE.load(info) is None
    layout._layouts.clear()
    assert CACHE.encode(layout.layout_of_file(str(copy))) == CACHE.encode(truth)  # read again


def test_a_jitprof_that_reads_layouts_otherwise_takes_no_older_entry(tmp_path):
    reader = tmp_path / "reader.py"
    reader.write_text("the code that reads layouts")
    info = os.stat(node_or_skip("20"))
    before = layout_cache.LayoutCache((), (str(reader),)).key_of(info)
    reader.write_text("the code that reads layouts, changed")
    assert layout_cache.LayoutCache((), (str(reader),)).key_of(info) != before
