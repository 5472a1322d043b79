"""`jitprof report` and `jitprof diff` on crafted .jitprof files: one line
naming what is wrong, never a traceback, and bounded time and memory."""

from __future__ import annotations

import gzip
import io
import json
import resource
import time

import pytest

from profiler import cli
from profiler.model.raw import write_raw
from tests.output.test_formats import sample_profile


def good_lines() -> list[bytes]:
    buffer = io.BytesIO()
    write_raw(sample_profile(), buffer)
    return gzip.decompress(buffer.getvalue()).splitlines(keepends=True)


def with_header(**changes) -> bytes:
    lines = good_lines()
    header = json.loads(lines[0])
    for key, value in changes.items():
        if key in header["info"]:
            header["info"][key] = value
        else:
            header[key] = value
    return json.dumps(header).encode() + b"\n" + b"".join(lines[1:])


def with_frame_line(value: str) -> bytes:
    lines = good_lines()
    lines[1] = lines[1].replace(b'"line":0', b'"line":' + value.encode())
    assert value.encode() in lines[1]
    return b"".join(lines)


CRAFTED = {
    "deep nesting": b'{"format":"jitprof","version":1,"info":' + b"[" * 200_000 + b"]" * 200_000 + b"}\n",
    "frequency Infinity": with_header(frequency_hz=float("inf")),
    "frequency 0": with_header(frequency_hz=0),
    "line Infinity": with_frame_line("Infinity"),
    "line 1e400": with_frame_line("1e400"),
    "losses as a list": with_header(losses=[1, 2]),
    "walk_ends as a list": with_header(walk_ends=["COMPLETE"]),
    "modules as a list": with_header(modules=["x"]),
    "version as a string": with_header(version="1"),
}


@pytest.mark.parametrize("name", list(CRAFTED))
@pytest.mark.parametrize("command", ["report", "diff"])
def test_a_crafted_file_is_one_line_of_error(tmp_path, capsys, name, command):
    path = tmp_path / "crafted.jitprof"
    path.write_bytes(gzip.compress(CRAFTED[name]))
    good = tmp_path / "good.jitprof"
    good.write_bytes(gzip.compress(b"".join(good_lines())))
    arguments = [command, str(path), "-o", str(tmp_path / "out.speedscope.json")]
    if command == "diff":
        arguments = ["diff", str(good), str(path), "-o", str(tmp_path / "out.svg")]
    assert cli.main(arguments) == 1
    error = capsys.readouterr().err
    lines = error.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jitprof: error: ") and "crafted.jitprof" in lines[0], error
    if name == "version as a string":
        assert "newer" not in lines[0]


def test_a_small_file_of_ten_million_samples_is_refused_quickly(tmp_path, capsys):
    """655 KB of gzip that unpacks to 10 M samples took 51 s and 973 MB."""
    lines = good_lines()
    header_and_frames = b"".join(line for line in lines if not line.startswith(b"["))
    sample = next(line for line in lines if line.startswith(b"["))
    compressor = gzip.GzipFile(tmp_path / "bomb.jitprof", "wb", compresslevel=9)
    compressor.write(header_and_frames)
    for _ in range(100):
        compressor.write(sample * 100_000)
    compressor.close()
    assert (tmp_path / "bomb.jitprof").stat().st_size < 2 << 20
    started, peak_before = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert cli.main(["report", str(tmp_path / "bomb.jitprof"), "-o", str(tmp_path / "out.folded")]) == 1
    assert "not a profile jitprof wrote" in capsys.readouterr().err
    assert time.monotonic() - started < 10
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before < 200 << 10
