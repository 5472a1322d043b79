"""cffi declarations parsed once by set-up (native/'s and blazesym's C
API's): the written module describes the library as parsing them does, is
taken only for exactly these declarations, and set-up's next write removes
the last one's."""

from __future__ import annotations

from pathlib import Path

import cffi
import pytest

from profiler.native import blazesym, cffi_declarations, library

HEADERS = {
    "native": (
        library._declarations,
        ("struct unwind_row", "struct jp_walk_stack", "struct jp_ring_batch", "struct jp_sample_columns"),
    ),
    "blazesym": (blazesym._all_declarations, ("blaze_sym", "blaze_symbolize_src_elf", "blaze_symbolize_code_info")),
}


@pytest.mark.parametrize("header", HEADERS)
def test_the_written_declarations_describe_what_parsing_does(tmp_path: Path, header: str) -> None:
    declarations_of, type_names = HEADERS[header]
    declarations = declarations_of()
    assert cffi_declarations.written_ffi(tmp_path, header, declarations) is None  # nothing written: parsed at load
    path = cffi_declarations.write_parsed(tmp_path, header, declarations)
    assert path.parent == tmp_path
    written = cffi_declarations.written_ffi(tmp_path, header, declarations)
    assert written is not None
    assert type(cffi_declarations.parsed_ffi(tmp_path, header, declarations)) is type(written)  # loaded, not parsed
    parsed = cffi.FFI()
    parsed.cdef(declarations)
    for type_name in type_names:
        assert written.sizeof(type_name) == parsed.sizeof(type_name), type_name
        assert written.alignof(type_name) == parsed.alignof(type_name), type_name
        fields = [(name, field.offset, written.sizeof(field.type)) for name, field in written.typeof(type_name).fields]
        assert fields == [(name, field.offset, parsed.sizeof(field.type)) for name, field in parsed.typeof(type_name).fields]


def test_other_declarations_are_parsed_not_taken_and_the_old_module_goes(tmp_path: Path) -> None:
    declarations = library._declarations()
    first = cffi_declarations.write_parsed(tmp_path, "native", declarations)
    changed = declarations + "\ntypedef int jp_changed;"
    assert cffi_declarations.written_ffi(tmp_path, "native", changed) is None
    assert cffi_declarations.parsed_ffi(tmp_path, "native", changed).sizeof("jp_changed") == 4  # parsed now
    stale = tmp_path / "native_0000000000000000.py"
    stale.write_text("raise SystemExit('never imported')\n")
    again = cffi_declarations.write_parsed(tmp_path, "native", declarations)
    assert again == first and again.is_file() and not stale.exists()
