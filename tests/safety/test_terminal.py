"""Text others chose (names, comm, paths, servers' answers) reaches root's
terminal and the line formats only with its controls shown escaped."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from profiler.kernel.events import WalkEnd
from profiler.model.profile import Frame, FrameKind, Profile, RunInfo, Sample
from profiler.output import render
from profiler.safety.terminal import printable, say
from profiler.tui.child_output import CapturedOutput

ATTACKS = [
    "\x1b]52;c;cHduZWQ=\x07",  # OSC 52: write the clipboard
    "\x1b]0;title\x07",  # OSC 0: the window title
    "\x1b]2;title\x1b\\",
    "\x1b[2J",  # clear the screen
    "line\nforged",
    "a 99999999\r",
    "\x9b2J",  # C1 CSI
    "\u202eevil",  # right-to-left override
    "x\u2028y",
]


@pytest.mark.parametrize("attack", ATTACKS)
def test_no_control_character_survives(attack):
    shown = printable(attack)
    assert shown.isprintable() and len(shown.splitlines()) == 1
    assert "\\x" in shown or "\\u" in shown


def test_ordinary_names_are_unchanged():
    for name in ["main", "Builtins_JSEntry", "(anonymous) /srv/app.js:3", "std::vector<int>::push_back", "λ → ünïcode"]:
        assert printable(name) == name


def test_say_writes_one_line(capsys):
    say("jitprof: warning: pid 7 (\x1b]52;c;AAAA\x07) says\nhi")
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "\x1b" not in error and "\\x1b]52" in error


def test_the_program_pane_drops_an_escape_split_across_writes():
    output = CapturedOutput()
    for chunk in [b"a\x1b]52;c;QUFB", b"QQ==\x07b\n", b"c\x1b", b"[2Jd\n", b"e\x07f\tg\n"]:
        output._keep(chunk)
    assert output.last_lines(3) == ["ab", "cd", "e\\x07f\tg"]
    for descriptor in (output.master, output.slave):
        os.close(descriptor)


def forged_profile(name: str, comm: str, file: str = "/src/app.js") -> Profile:
    profile = Profile(RunInfo(["app"], [100], 99, started_ns=1, ended_ns=2))
    main = profile.intern(Frame("main", "/usr/bin/app", FrameKind.NATIVE, "/src/app.c", 3, function_line=1))
    forged = profile.intern(Frame(name, "[jit]", FrameKind.JIT, file, 5, function_line=4, line_exact=True))
    for number in range(10):
        profile.add(Sample(number, 100, 100, comm, (main, forged), WalkEnd.COMPLETE))
    return profile


def test_folded_carries_no_forged_stack():
    """A comm of `a 99999999\\r` gave a reader splitting on \\r a fake stack of 99,999,999 samples."""
    text = render(forged_profile("f\r;x 5\nz", "a 99999999\r"), "folded").decode()
    for separator in ("\n", "\r"):
        lines = [line for line in text.split(separator) if line]
        assert len(lines) == 1, lines
    assert text.endswith(" 10\n")


def test_callgrind_annotate_sees_no_forged_function(tmp_path):
    """A name of `\\nfl=(1) INJFILE\\nfn=(1) INJFN\\n0 888888` made callgrind_annotate
    show 888,888 samples of a function that does not exist."""
    if shutil.which("callgrind_annotate") is None:
        pytest.skip("callgrind_annotate (valgrind) is installed by make setup")
    path = tmp_path / "callgrind.out.forged"
    injection = "\nfl=(1) INJFILE\nfn=(1) INJFN\n0 888888"
    path.write_bytes(render(forged_profile("js" + injection, "app", "/src/app.js" + injection), "callgrind"))
    shown = subprocess.run(["callgrind_annotate", str(path)], capture_output=True, text=True, check=True).stdout
    assert "888,888" not in shown and "INJFILE:" not in shown
    assert "10 (100.0%)" in shown or "10 (100%)" in shown, shown
