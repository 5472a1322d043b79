"""Unwind tables as a new user meets them: a short run on an empty cache
builds node's table in the run, walks through it, and leaves it cached; the
native compiler agrees with the oracle on the largest binaries."""

import os
import shutil
from pathlib import Path

import pytest

from e2e.conftest import ROOT, read_folded, total
from profiler.native import cache, elf, library
from tests.native import unwind_oracle

NODE = Path("/usr/bin/node")


def test_short_cold_run_walks_node_and_leaves_its_table_cached(jitprof, tmp_path, monkeypatch):
    fresh_cache = tmp_path / "fresh-cache"
    result = jitprof(
        "--no-tui",
        "-o",
        "run.folded",
        "--",
        str(NODE),
        str(ROOT / "fixtures" / "js" / "workload.js"),
        "30",
        env={"JITPROF_CACHE_DIR": str(fresh_cache)},
    )
    assert result.returncode == 0, result.stderr
    assert "not finished in time" not in result.stderr
    monkeypatch.setenv("JITPROF_CACHE_DIR", str(fresh_cache))
    image = elf.open_elf([str(NODE)], str(NODE))
    try:
        cached = cache.load_cached(image.cache_key)
        assert cached is not None, "node's table did not reach the cache"
        assert cached == library.compile_unwind_rows(image.handle.fileno()).packed
    finally:
        image.close()
    lines = read_folded(tmp_path / "run.folded")
    node_lines = [line for line in lines if line.frames and line.frames[0].startswith("node")]
    assert total(node_lines) >= 20
    # Stacks that pass through node's own C++ are walked up to node::Start and
    # the libc start code above it: node's table was live in this cold run.
    through_cxx = [line for line in node_lines if any("node::" in frame or "v8::" in frame for frame in line.frames)]
    complete = [
        line
        for line in through_cxx
        if "node::Start(int, char**)" in line.frames
        and line.frames[line.frames.index("node::Start(int, char**)") - 1] in ("__libc_start_call_main", "[unknown] (libc.so.6)")
    ]
    assert total(through_cxx) >= 20
    # A new process's first samples, before its maps are read, may still end
    # early (the blind window): they are a few of the whole.
    assert total(complete) >= 0.85 * total(through_cxx), [line.frames[:4] for line in through_cxx if line not in complete][:5]


@pytest.mark.parametrize(
    "path",
    [NODE, Path(os.path.realpath(shutil.which("java") or "/nonexistent")).parents[1] / "lib" / "server" / "libjvm.so"],
    ids=["node", "libjvm"],
)
def test_native_compiler_equals_the_oracle_on_large_binaries(path):
    if not path.exists():
        pytest.skip(f"{path} is not installed")
    real = os.path.realpath(path)
    native = library.compile_unwind_rows_of(real).packed
    with open(real, "rb") as handle:
        expected = unwind_oracle.compile_table(handle).pack()
    assert len(native) > 100_000 * 16
    assert native == expected
