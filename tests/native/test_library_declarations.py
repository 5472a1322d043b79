"""native/'s cffi declarations, parsed once by set-up: the written module
describes the library as parsing them does, is taken only for exactly these
declarations, and set-up's next write removes the last one's."""

from __future__ import annotations

from pathlib import Path

import cffi
import pytest

from profiler.native import library


@pytest.fixture
def build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(library, "LIBRARY_PATH", tmp_path / "libjitprof_native.so")
    return tmp_path


def test_the_written_declarations_describe_what_parsing_does(build: Path) -> None:
    declarations = library._declarations()
    assert library._parsed(declarations) is None  # nothing written: parsed at load, as before
    path = library.write_parsed_declarations()
    assert path.parent == build
    written = library._parsed(declarations)
    assert written is not None
    parsed = cffi.FFI()
    parsed.cdef(declarations)
    for type_name in ("struct unwind_row", "struct jp_walk_stack", "struct jp_ring_batch", "struct jp_sample_columns"):
        assert written.sizeof(type_name) == parsed.sizeof(type_name), type_name
        assert written.alignof(type_name) == parsed.alignof(type_name), type_name
        fields = [(name, field.offset, written.sizeof(field.type)) for name, field in written.typeof(type_name).fields]
        assert fields == [(name, field.offset, parsed.sizeof(field.type)) for name, field in parsed.typeof(type_name).fields]


def test_other_declarations_are_parsed_not_taken_and_the_old_module_goes(build: Path) -> None:
    first = library.write_parsed_declarations()
    assert library._parsed(library._declarations() + "\ntypedef int jp_changed;") is None
    stale = build / f"{library.DECLARATIONS_MODULE}_0000000000000000.py"
    stale.write_text("raise SystemExit('never imported')\n")
    again = library.write_parsed_declarations()
    assert again == first and again.is_file() and not stale.exists()
