"""Text on its way to root's terminal, made printable in one place.

Names in perf maps, symbol tables and jitdumps, a process's comm, paths,
and what servers and JVMs answer are chosen by others. Written raw, an
escape sequence in them sets the clipboard (OSC 52), the window title or
clears the screen, and a newline forges a line of jitprof's own. Every
control character is shown escaped instead (`\\x1b`), and so are the
invisible ones that reorder text (bidirectional overrides).
"""

from __future__ import annotations

import re
import sys

# C0 and C1 controls, DEL, and the Unicode format characters that reorder
# or hide text, plus line and paragraph separators (str.splitlines splits on them).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_UNPRINTABLE_KEEP_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """One line of text with every control character shown escaped."""
    return _UNPRINTABLE.sub(_escaped, text)


def printable_lines(text: str) -> str:
    """The same, keeping newlines (a program's output in the live view)."""
    return _UNPRINTABLE_KEEP_LINES.sub(_escaped, text)


def say(message: str) -> None:
    """One line of jitprof's on stderr."""
    print(printable(message), file=sys.stderr, flush=True)
