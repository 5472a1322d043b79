"""Bun scripts' indexes kept in jitprof's cache: read back as made, for
these texts and this code only, and a damaged entry a miss."""

from __future__ import annotations

import json

import pytest

from profiler.jit.bun import index_cache
from profiler.jit.bun.scripts import BunScript, _index_script
from profiler.native import cache
from tests.jit.test_bun_functions import FIB_COPY, FIB_TEST, MAIN_CJS, MAIN_COPY


def fields(index):
    return (index.hashes, index.runtime_definitions, index.original_definitions, index.names_at, index.anchors,
            index.runtime_unnamed, index.original_unnamed, index.lines.line_and_column(len(FIB_TEST) // 2))  # fmt: skip


@pytest.mark.parametrize(("original", "runtime"), [(FIB_TEST, FIB_COPY), (MAIN_CJS, MAIN_COPY)])
def test_an_index_is_read_back_as_it_was_made_without_indexing_again(original, runtime, monkeypatch):
    made = index_cache.indexed(BunScript("/app/a.ts", original, runtime))
    assert fields(index_cache.load(index_cache.key_of(original, runtime), original, runtime)) == fields(made)
    from profiler.jit.bun import scripts  # noqa: PLC0415

    monkeypatch.setattr(scripts, "_index_script", lambda *_: pytest.fail("indexed again"))
    assert fields(index_cache.indexed(BunScript("/app/b.ts", original, runtime))) == fields(made)


def test_other_texts_or_other_code_are_other_entries(monkeypatch):
    key = index_cache.key_of(FIB_TEST, FIB_COPY)
    assert index_cache.key_of(FIB_TEST + " ", FIB_COPY) != key and index_cache.key_of(FIB_TEST, FIB_COPY + " ") != key
    assert index_cache.key_of(FIB_COPY, FIB_TEST) != key and cache.valid_key(key)
    monkeypatch.setattr(index_cache, "_fingerprint", [b"another jitprof's indexing code"])
    assert index_cache.key_of(FIB_TEST, FIB_COPY) != key


def damaged(entry: dict) -> list[dict]:
    return [
        {**entry, "hashes": {"x": [len(FIB_COPY) + 1]}},  # past its text
        {**entry, "hashes": {"x": [-2]}},
        {**entry, "hashes": {"x": [-1, 2, -2]}},  # top-level code's -1 with one outside
        {**entry, "runtime_definitions": {"fib": [-1]}},  # -1 only where top-level code is
        {**entry, "hashes": {"x": [1.5]}},
        {**entry, "original_definitions": {"fib": ["12"]}},
        {**entry, "names_at": [[3, [7]]]},
        {**entry, "names_at": {"3": ["fib"]}},
        {**entry, "anchors": [[5, 9], [6, 9]]},  # the file's order not kept
        {**entry, "anchors": [[5, 9, 1]]},
        {**entry, "runtime_unnamed": [9, 3]},  # searched: must be sorted
        {**entry, "original_unnamed": [True]},
        {key: value for key, value in entry.items() if key != "anchors"},
        [entry],
    ]


def test_a_damaged_entry_is_a_miss():
    key = index_cache.key_of(FIB_TEST, FIB_COPY)
    index_cache.store(key, _index_script(FIB_TEST, FIB_COPY))
    path = cache.entry_path(index_cache.KIND, key, cache.JSON_SUFFIX)
    entry = json.loads(path.read_bytes())
    assert index_cache.load(key, FIB_TEST, FIB_COPY) is not None
    for bad in damaged(entry):
        path.write_text(json.dumps(bad))
        assert index_cache.load(key, FIB_TEST, FIB_COPY) is None, bad
    path.write_text("[" * 100_000)
    assert index_cache.load(key, FIB_TEST, FIB_COPY) is None
