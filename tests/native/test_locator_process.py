"""blazesym in its confined helper: files that crash, hang or blow it up
cost their own names (and their owner's further files), never the run."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from profiler.native import locator_process
from profiler.native.locator_process import DEADLINE_S, CodeLocator, LocatorFailed
from profiler.safety import sandbox
from tests.hostile_elf import (
    build,
    compressed_size_bomb,
    deep_inlines,
    fifo_debuglink,
    line_string_bomb,
    load_end,
    many_rows,
    many_units,
    sparse_debug_link,
    symbol_address,
)

NODE = Path("/usr/bin/node")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="dropping privileges needs root")


@pytest.fixture
def locator():
    located = CodeLocator()
    yield located
    located.close()


def named_node(locator: CodeLocator) -> str:
    with NODE.open("rb") as handle:
        symbol = locator.locate(handle, [symbol_address(NODE, "uv_run") + 4], str(NODE))[0]
    assert symbol is not None
    return symbol.name


def test_names_lines_and_inlines_as_blazesym_does(tmp_path, locator):
    binary = build(tmp_path, "hot", "-g")
    with binary.open("rb") as handle:
        (symbol,) = locator.locate(handle, [symbol_address(binary, "hot") + 8], str(binary))
    assert symbol is not None and symbol.name == "hot"
    assert symbol.place is not None and symbol.place.file.endswith("hot.c") and symbol.place.line in (5, 6)


@as_root
def test_helper_runs_as_no_one_with_one_capability_and_a_filter(locator):
    named_node(locator)
    assert locator._helper is not None
    status = Path(f"/proc/{locator._helper.process.pid}/status").read_text()
    fields = dict(re.findall(r"^(\w+):[ \t]*(.*)$", status, re.M))
    assert fields["Uid"].split() == [str(sandbox.HELPER_UID)] * 4
    assert fields["Gid"].split() == [str(sandbox.HELPER_GID)] * 4
    assert fields["Groups"].strip() == ""
    assert int(fields["CapEff"], 16) == int(fields["CapPrm"], 16) == 1 << sandbox.CAP_DAC_READ_SEARCH
    assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2"


def test_a_compression_header_claiming_2_64_bytes_costs_that_file_only(tmp_path, locator):
    binary = compressed_size_bomb(tmp_path)
    with binary.open("rb") as handle, pytest.raises(LocatorFailed, match="SIGABRT"):
        locator.locate(handle, [symbol_address(binary, "hot")], str(binary))
    assert "SIGABRT" in locator.failures[str(binary)]
    assert named_node(locator)  # a fresh helper
    with binary.open("rb") as handle, pytest.raises(LocatorFailed):  # not tried again
        locator.locate(handle, [symbol_address(binary, "hot")], str(binary))
    assert locator.helpers_started == 2


def test_a_file_truncated_under_the_helper_s_mapping_costs_that_file_only(tmp_path, locator):
    """The target truncates its library past the loaded segments once
    blazesym has mapped it: the next read of its symbols is a SIGBUS."""
    binary = build(tmp_path, "shrinking", "-g")
    address = symbol_address(binary, "hot")
    with binary.open("rb") as handle:
        assert locator.locate(handle, [address], str(binary))[0] is not None
        os.truncate(binary, load_end(binary))
        with pytest.raises(LocatorFailed, match="SIGBUS"):
            locator.locate(handle, [address + 1], str(binary))
    assert named_node(locator)


@as_root
@pytest.mark.parametrize("make", [fifo_debuglink, sparse_debug_link], ids=["fifo", "200-GB-sparse"])
def test_a_debug_link_is_not_followed_by_the_helper(tmp_path, locator, make):
    """A debug link names a FIFO (opening it blocked for ever) or a 200 GB
    sparse file (13.6 GB RSS): the helper sees an empty root, so blazesym
    cannot open what the link names; the file is named by its symbol table."""
    binary = make(tmp_path)
    started = time.monotonic()
    with binary.open("rb") as handle:
        (symbol,) = locator.locate(handle, [symbol_address(binary, "hot") + 4], str(binary))
    assert time.monotonic() - started < 2
    assert symbol is not None and symbol.name == "hot" and symbol.place is None
    assert locator.failures == {}
    assert locator._helper is not None and os.listdir(f"/proc/{locator._helper.process.pid}/root") == ["proc"]


def test_a_request_over_its_deadline_costs_that_file_only(tmp_path):
    """50 M line rows (50 MB) take blazesym a quarter of a second or more."""
    binary = many_rows(tmp_path)
    locator = CodeLocator()
    try:
        named_node(locator)  # the helper is up, and node parsed, before the short deadline
        locator._deadline_s = 0.02
        started = time.monotonic()
        with binary.open("rb") as handle, pytest.raises(LocatorFailed, match="deadline"):
            locator.locate(handle, [symbol_address(binary, "hot")], str(binary))
        assert time.monotonic() - started < 1
        assert "overran its deadline" in locator.failures[str(binary)]
        locator._deadline_s = DEADLINE_S
        assert named_node(locator)
    finally:
        locator.close()


@pytest.mark.parametrize(
    ("make", "death"),
    [(deep_inlines, "SIGSEGV"), (many_units, "SIGABRT"), (line_string_bomb, "SIGABRT")],
    ids=["100k-nested-inlines", "2M-units", "8-GiB-line-strings"],
)
def test_dwarf_that_overflows_or_exhausts_the_helper_costs_that_file_only(tmp_path, locator, make, death):
    """100,000 nested inlined calls overflow blazesym's stack; 2 M compile
    units (1.8 GiB of its records) and a .debug_line_str that inflates to
    8 GiB pass the helper's heap limit. Each killed or blew up root's
    jitprof; now the helper dies, jitprof's own memory does not move, and
    the next file is named by a fresh helper."""
    binary = make(tmp_path)
    named_node(locator)
    before = resident_kib()
    started = time.monotonic()
    with binary.open("rb") as handle, pytest.raises(LocatorFailed, match=death):
        locator.locate(handle, [symbol_address(binary, "hot") + 4], str(binary))
    assert time.monotonic() - started < DEADLINE_S
    assert resident_kib() - before < 16 << 10
    assert named_node(locator) == "uv_run" and locator.helpers_started == 2


def test_fifty_million_line_rows_are_read_within_the_helper_s_limits(tmp_path, locator):
    binary = many_rows(tmp_path)
    with binary.open("rb") as handle:
        (symbol,) = locator.locate(handle, [symbol_address(binary, "hot") + 4], str(binary))
    assert symbol is not None and symbol.name == "hot"
    assert locator._helper is not None
    status = Path(f"/proc/{locator._helper.process.pid}/status").read_text()
    assert int(re.search(r"RssAnon:\s+(\d+) kB", status).group(1)) < locator_process.DATA_BYTES >> 10


def resident_kib() -> int:
    return int(re.search(r"VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1))


@as_root
def test_a_user_whose_file_failed_costs_the_others_nothing_more(tmp_path, locator):
    attacker = 65534
    bomb = compressed_size_bomb(tmp_path)
    other = tmp_path / "other"
    shutil.copy(NODE, other)
    for path in (bomb, other):
        os.chown(path, attacker, attacker)
    with bomb.open("rb") as handle, pytest.raises(LocatorFailed):
        locator.locate(handle, [symbol_address(bomb, "hot")], str(bomb))
    started = locator.helpers_started
    with other.open("rb") as handle, pytest.raises(LocatorFailed, match="another file of its owner"):
        locator.locate(handle, [0x2000000], str(other))
    assert named_node(locator) and locator.helpers_started == started + 1  # root's files: a fresh helper


@pytest.mark.parametrize(
    "answer",
    [
        [],
        {"symbols": [None, None]},
        {"symbols": [["name", -1, None, []]]},
        {"symbols": [["name", 1, ["file", "line", 0], []]]},
        {"symbols": [[7, 1, None, []]]},
        {"symbols": [["name", 1, None, [["inlined"]]]]},
        {"symbols": [["name", 1, None, [["inlined", None, -4]]]]},
        {"symbols": [["name", 1, None, [["inlined", None, "7"]]]]},
        {"symbols": [["name", 1, None, [["inlined", None, 7, 8]]]]},
    ],
)
def test_an_answer_of_the_wrong_shape_is_refused(answer):
    with pytest.raises((TypeError, ValueError, KeyError)):
        locator_process._symbols_from(answer, 1)


def test_an_inlined_function_s_declared_line_is_read_when_sent_and_bounded():
    (symbol,) = locator_process._symbols_from({"symbols": [["outer", 16, None, [["a", None, 12], ["b", None]]]]}, 1)
    assert symbol is not None and [call.start_line for call in symbol.inlined] == [12, 0]
    (symbol,) = locator_process._symbols_from({"symbols": [["outer", 16, None, [["a", None, 1 << 40]]]]}, 1)
    assert symbol is not None and symbol.inlined[0].start_line == 0


def test_thousands_of_nested_inlined_functions_keep_the_outermost_and_the_innermost():
    nested = [[f"level_{depth}", ["a.c", depth + 1, 0]] for depth in range(5000)]
    (symbol,) = locator_process._symbols_from({"symbols": [["outer", 16, None, nested]]}, 1)
    assert symbol is not None and len(symbol.inlined) == locator_process.MAX_INLINED_CALLS
    assert symbol.inlined[0].name == "level_0" and symbol.inlined[-1].name == "level_4999"


def test_a_line_table_whose_rows_name_files_it_does_not_list(tmp_path, locator):
    """Every row's file index past the table (as DW_LNS_set_file 99 makes it):
    the function is named, its line is not made up, and the helper goes on."""
    from tests.hostile_elf import line_table_without_files  # noqa: PLC0415

    binary = line_table_without_files(tmp_path)
    try:
        with binary.open("rb") as handle:
            (symbol,) = locator.locate(handle, [symbol_address(binary, "hot") + 4], str(binary))
    except LocatorFailed as failure:  # contained: the file's lines are lost, nothing else
        assert str(binary) in locator.failures, failure
    else:
        assert symbol is not None and symbol.name == "hot"
        assert symbol.place is None or not symbol.place.file.endswith("nofiles.c") or symbol.place.line > 0
    assert named_node(locator) == "uv_run"


def test_the_helper_starts_at_the_first_request_and_no_sooner():
    """A run whose addresses are all named from what earlier runs kept never
    asks: its helper (~0.1 s of CPU beside the program) is not started."""
    unused = CodeLocator()
    unused.close()
    assert unused.helpers_started == 0 and unused._helper is None
    asked = CodeLocator()
    try:
        assert asked.helpers_started == 0
        assert named_node(asked) == "uv_run" and named_node(asked) == "uv_run"
        assert asked.helpers_started == 1 and asked._helper is not None
        process = asked._helper.process
    finally:
        asked.close()
    assert process.poll() is not None and asked._helper is None  # no helper left behind
