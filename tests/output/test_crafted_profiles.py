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
from profiler.model.raw import read_raw, write_raw
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


def with_sample_line(line: bytes) -> bytes:
    """The good profile with one more sample line."""
    return b"".join(good_lines()) + line + b"\n"


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
    "sample time with a leading zero": with_sample_line(b'[01,1,1,"x",[0],"COMPLETE"]'),
    "sample time past 2^63": with_sample_line(b'[9223372036854775808,1,1,"x",[0],"COMPLETE"]'),
    "sample pid of 5000 digits": with_sample_line(b"[1," + b"9" * 5000 + b',1,"x",[0],"COMPLETE"]'),
    "sample stack ,,": with_sample_line(b'[1,1,1,"x",[0,,0],"COMPLETE"]'),
    "sample frame id out of range": with_sample_line(b'[1,1,1,"x",[0,99999],"COMPLETE"]'),
    "sample walk end unknown": with_sample_line(b'[1,1,1,"x",[0],"NOWHERE"]'),
    "sample comm bad escape": with_sample_line(b'[1,1,1,"\\q",[0],"COMPLETE"]'),
    "sample waited without --off-cpu": with_sample_line(b'[1,1,1,"x",[0],"COMPLETE",5]'),
    "sample negative time": with_sample_line(b'[-1,1,1,"x",[0],"COMPLETE"]'),
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


def test_sample_lines_read_as_json_reads_them(tmp_path):
    """Sample lines in write_raw's own form are split without a JSON parser:
    what comes out is what JSON makes of them, escapes and all."""
    lines = [
        b'[5,7,8,"node \\"main\\" \\u00e9\\ud83d\\ude00",[0,1],"COMPLETE"]',
        b'[6,7,9,"plain",[],"COMPLETE"]',
        b'[7, 7, 9, "spaced", [0], "COMPLETE"]',  # valid JSON, not write_raw's form: decoded as JSON
    ]
    path = tmp_path / "escapes.jitprof"
    path.write_bytes(gzip.compress(b"".join(good_lines()) + b"\n".join(lines) + b"\n"))
    samples = read_raw(path).samples[-3:]
    for sample, line in zip(samples, lines):
        time_ns, pid, tid, comm, frame_ids, walk_end = json.loads(line)
        assert (sample.time_ns, sample.pid, sample.tid, sample.comm, sample.frame_ids, sample.walk_end.name) == (
            time_ns,
            pid,
            tid,
            comm,
            tuple(frame_ids),
            walk_end,
        )


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


def test_the_first_bad_sample_line_is_the_one_named(tmp_path, capsys):
    """Texts are checked when first seen, but the error is the first bad line's, in file order."""
    good = good_lines()
    first_sample = next(number for number, line in enumerate(good, 1) if line.startswith(b"["))
    lines = [
        *good[: first_sample - 1],
        b'[1,1,1,"x",[0], "COMPLETE"]\n',  # JSON, not write_raw's form: read as JSON, and good
        b'[2,1,1,"x",[0],"NOWHERE"]\n',  # bad: the one to name
        b'[3,1,1,"x",[0,99999],"COMPLETE"]\n',  # bad too, with a text new before the first one's
        *good[first_sample - 1 :],
    ]
    path = tmp_path / "crafted.jitprof"
    path.write_bytes(gzip.compress(b"".join(lines)))
    assert cli.main(["report", str(path), "-o", str(tmp_path / "out.folded")]) == 1
    assert f"crafted.jitprof:{first_sample + 1}: bad record (no walk end 'NOWHERE')" in capsys.readouterr().err


def test_sample_lines_between_frame_lines_keep_their_order(tmp_path):
    """Runs of sample lines are split apart by frame lines (a profile written as it goes interleaves them)."""
    good = good_lines()
    samples = [line for line in good if line.startswith(b"[")]
    others = [line for line in good if not line.startswith(b"[")]
    header, frames = others[0], others[1:]
    interleaved = [header, *frames[:1]]
    written = []
    for time_ns in range(1, 200):
        line = b'[%d,1,%d,"x",[0],"COMPLETE"]\n' % (time_ns, time_ns % 3)
        if time_ns % 7 == 0:
            line = b'[%d, 1, %d, "x", [0], "COMPLETE"]\n' % (time_ns, time_ns % 3)  # read as JSON
        interleaved.append(line)
        written.append(time_ns)
        if time_ns % 50 == 0:
            interleaved.append(b"\n")  # blank lines are skipped
    interleaved += frames[1:] + samples
    path = tmp_path / "interleaved.jitprof"
    path.write_bytes(gzip.compress(b"".join(interleaved)))
    profile = read_raw(path)
    assert [sample.time_ns for sample in profile.samples[: len(written)]] == written
    assert [sample.tid for sample in profile.samples[: len(written)]] == [time_ns % 3 for time_ns in written]
    assert len(profile.samples) == len(written) + len(samples)
