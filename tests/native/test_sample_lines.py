"""The sample-line splitter (native/sample_lines.c): write_raw's form only,
each text handed over once, numbers bounded; fuzzed under ASan."""

from __future__ import annotations

import subprocess

from profiler.native.sample_lines import COMM, STACK, WALK_END, SampleLineSplitter
from tests.helpers import ROOT

LIMIT = 1 << 63


def test_lines_in_write_raws_form_are_split_and_texts_handed_over_once():
    splitter = SampleLineSplitter()
    first = splitter.split(b'[5,7,8,"a\\"b",[0,1],"COMPLETE"]\n[6,7,9,"a\\"b",[0,1],"COMPLETE",250]', 2, LIMIT)
    assert first.parsed == [1, 1]
    assert (first.time_ns, first.pid, first.tid, first.waited_ns) == ([5, 6], [7, 7], [8, 9], [0, 250])
    assert (first.comm, first.stack, first.walk_end) == ([0, 0], [0, 0], [0, 0])
    assert first.news == [(COMM, 0, 0, b'"a\\"b"'), (STACK, 0, 0, b"[0,1]"), (WALK_END, 0, 0, b"COMPLETE")]
    second = splitter.split(b'[7,7,8,"c",[0,1],"COMPLETE"]', 1, LIMIT)
    assert (second.comm, second.stack, second.walk_end) == ([1], [0], [0])
    assert second.news == [(COMM, 1, 0, b'"c"')]  # only the text not seen before


def test_lines_in_any_other_form_are_left_to_json():
    splitter = SampleLineSplitter()
    lines = [
        b'[1, 1,1,"x",[0],"COMPLETE"]',  # a space
        b'[01,1,1,"x",[0],"COMPLETE"]',  # a leading zero
        b'[9223372036854775808,1,1,"x",[0],"COMPLETE"]',  # 2^63
        b'[1,1,1,"x",[0],"COMPLETE",0]',  # waited 0
        b'[1,1,1,"x\x01",[0],"COMPLETE"]',  # a control character in a string
        b'[1,1,1,"x",[a],"COMPLETE"]',
        b'[1,1,1,"x",[0],"complete"]',
        b'[1,1,1,"x",[0],"COMPLETE"]]',
        b'[1,1,1,"x",[0],"COMPLETE"',
        b"",
        b'[9223372036854775807,1,1,"x",[0],"COMPLETE"]',  # 2^63 - 1: split
    ]
    split = splitter.split(b"\n".join(lines), len(lines), LIMIT)
    assert split.parsed == [0] * (len(lines) - 1) + [1]
    assert split.time_ns[-1] == LIMIT - 1


def test_the_splitter_survives_fuzzing_under_address_sanitizer():
    fuzzer = ROOT / "native" / "build" / "fuzz_sample_lines"
    assert fuzzer.exists(), "native/build/fuzz_sample_lines missing: run make setup"
    run = subprocess.run([str(fuzzer), "200000"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    split, left = (int(word) for word in run.stdout.split()[1::2])
    assert split > 50_000 and left > 50_000  # both ways: lines split, lines left to JSON
