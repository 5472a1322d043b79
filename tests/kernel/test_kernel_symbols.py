"""Kernel function names from a kallsyms file."""

from __future__ import annotations

from profiler.kernel.kernel_symbols import KernelSymbols

KALLSYMS = b"""\
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81001000 t do_one_initcall
ffffffff81002000 D some_data
ffffffff81003000 T schedule
ffffffffc0100000 t nf_hook_slow\t[nf_tables]
garbage line
zzzz T not_hex
"""


def test_an_address_is_named_by_the_text_symbol_at_or_before_it(tmp_path):
    path = tmp_path / "kallsyms"
    path.write_bytes(KALLSYMS)
    symbols = KernelSymbols(str(path))
    assert symbols.name(0xFFFFFFFF81000000) == "_stext"  # of two at one address, the first listed
    assert symbols.name(0xFFFFFFFF81001234) == "do_one_initcall"
    assert symbols.name(0xFFFFFFFF81002010) == "do_one_initcall"  # data symbols do not name code
    assert symbols.name(0xFFFFFFFF81003004) == "schedule"
    assert symbols.name(0xFFFFFFFFC0100040) == "nf_hook_slow"
    assert symbols.name(0x1000) == ""


def test_hidden_addresses_and_a_missing_file_name_nothing(tmp_path):
    hidden = tmp_path / "kallsyms"
    hidden.write_bytes(b"0000000000000000 T _stext\n0000000000000000 T schedule\n")  # kptr_restrict
    assert KernelSymbols(str(hidden)).name(0xFFFFFFFF81000000) == ""
    assert KernelSymbols(str(tmp_path / "missing")).name(0xFFFFFFFF81000000) == ""
