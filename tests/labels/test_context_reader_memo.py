"""What an earlier run found about an executable's need of the kernel's
context reader, kept in the cache: a hint read before the program loads."""

import os
from pathlib import Path

import pytest

from profiler.labels import context_reader_memo


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("JITPROF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(context_reader_memo, "_told", {})
    return tmp_path / "cache"


def an_executable(tmp_path: Path, name: str = "node") -> Path:
    path = tmp_path / name
    path.write_bytes(b"\x7fELF")
    return path


def test_an_executable_never_seen_may_need_the_reader(cache_dir, tmp_path):
    path = an_executable(tmp_path)
    assert context_reader_memo.recalled(os.stat(path)) is None
    assert context_reader_memo.may_need(str(path))


def test_what_was_found_is_recalled_by_the_files_identity(cache_dir, tmp_path):
    without, keeping = an_executable(tmp_path, "node20"), an_executable(tmp_path, "node24")
    context_reader_memo.remember(os.stat(without), False)
    context_reader_memo.remember(os.stat(keeping), True)
    assert not context_reader_memo.may_need(str(without))
    assert context_reader_memo.may_need(str(keeping))
    # Another run (nothing in memory) reads it from the cache.
    context_reader_memo._told.clear()
    assert context_reader_memo.recalled(os.stat(without)) is False
    assert context_reader_memo.recalled(os.stat(keeping)) is True


def test_a_file_replaced_at_the_same_path_is_not_taken_for_the_old_one(cache_dir, tmp_path):
    path = an_executable(tmp_path)
    context_reader_memo.remember(os.stat(path), False)
    path.unlink()
    an_executable(tmp_path).write_bytes(b"\x7fELF, another node")
    assert context_reader_memo.recalled(os.stat(path)) is None
    assert context_reader_memo.may_need(str(path))


def test_what_changes_is_written_again(cache_dir, tmp_path):
    path = an_executable(tmp_path)
    context_reader_memo.remember(os.stat(path), False)
    context_reader_memo.remember(os.stat(path), True)
    context_reader_memo._told.clear()
    assert context_reader_memo.recalled(os.stat(path)) is True


def test_a_damaged_entry_or_a_missing_file_is_a_miss(cache_dir, tmp_path):
    path = an_executable(tmp_path)
    context_reader_memo.remember(os.stat(path), False)
    for entry in (cache_dir / context_reader_memo.KIND).iterdir():
        entry.write_text('{"needed": "no"}')
    assert context_reader_memo.recalled(os.stat(path)) is None
    assert context_reader_memo.may_need(str(tmp_path / "gone"))
