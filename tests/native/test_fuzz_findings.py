"""The inputs `make fuzz` found (tests/data/fuzz/), replayed: jitprof's own
readers take each without a crash, an undeclared error or a hang, and
blazesym's helper either names it or fails alone, the next file named."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.native.locator_process import CodeLocator, LocatorFailed
from tests.fuzz_symbolizing import FINDINGS, run_in_child
from tests.hostile_elf import symbol_address

KEPT = sorted(FINDINGS.glob("*.elf"))
NODE = Path("/usr/bin/node")


def test_findings_are_kept():
    assert KEPT, f"no inputs in {FINDINGS}"


@pytest.mark.parametrize("path", KEPT, ids=[path.stem for path in KEPT])
def test_a_kept_finding_costs_its_own_names_only(path, tmp_path, monkeypatch):
    monkeypatch.setenv("JITPROF_CACHE_DIR", str(tmp_path / "cache"))
    addresses = [0x1000 + step * 0x40 for step in range(64)]
    assert run_in_child(path, addresses) == ""
    locator = CodeLocator()
    try:
        with path.open("rb") as handle:
            try:
                locator.locate(handle, addresses, str(path))
            except LocatorFailed:
                pass  # refused, or the helper failed on it: contained either way
        with NODE.open("rb") as handle:
            (symbol,) = locator.locate(handle, [symbol_address(NODE, "uv_run") + 4], str(NODE))
        assert symbol is not None and symbol.name == "uv_run"
    finally:
        locator.close()
