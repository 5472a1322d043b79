"""Bun's copy of a script, indexed to place the functions JavaScriptCore
names by their source hash (`leaf#BiF1ZL`): the hash, a one-pass scan of
the copy's functions, and the file's definitions paired with the copy's.

The hash (CodeBlockHash) is the low 32 bits of the SHA-1 of a function's
source text, from its parameters' `(` to its closing `}`, xor 1 for a
constructor's code, in base 62. The text is bun's runtime copy of the
script (types stripped, code reprinted, constants inlined), a CommonJS
module's copy indented inside its wrapper, whose own code (the module's
top-level code) is hashed whole. Every function of the copy is hashed; a
line is given only where the file's definitions of a name pair one to one
with the copy's, and an anonymous function is paired by its order among the
unnamed ones between two paired definitions.
"""

from __future__ import annotations

import bisect
import hashlib
import re
import threading
from array import array
from dataclasses import dataclass

MAX_BRACKET_PAIRS = 1 << 20  # paired per script (TypeScript's compiler: 118,000); functions past them are not placed
HASHED_PER_BYTE = 16  # how many times its size a script's functions may hash to, together
COMMONJS_PARAMETERS = "(exports, require, module, __filename, __dirname)"
MODULE_CODE = -1  # where a script's top-level code "begins", among its functions
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_NOT_FUNCTIONS = frozenset({"if", "for", "while", "switch", "catch", "with", "return", "typeof", "await", "yield"})


def code_block_hash(text: str, constructor: bool = False) -> str:
    """JavaScriptCore's CodeBlockHash of a function's source text, as it prints it."""
    digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).digest()
    value = int.from_bytes(digest[:4], "little")
    if value in (0, 1):
        value += 0x2D5A93D0
    value ^= int(constructor)
    characters = []
    for _ in range(6):
        characters.append(_ALPHABET[value % 62])
        value //= 62
    return "".join(reversed(characters))


_CODE_MARK = re.compile(r"""[(){}\[\]"'`]|//|/\*""")
_TEMPLATE_MARK = re.compile(r"\\.|`|\$\{", re.DOTALL)
_STRING_REST = {quote: re.compile(rf"(?:[^{quote}\\\n]|\\.)*", re.DOTALL) for quote in "\"'"}


@dataclass(frozen=True)
class ScannedScript:
    """A transpiled script's functions, from their parameters' `(` to just
    past their body's `}`, and the literal text of its template literals
    (which a CommonJS wrapper does not indent)."""

    spans: list[tuple[int, int]]
    template_text: list[tuple[int, int]]


def scan_functions(text: str) -> ScannedScript:
    """One pass matching brackets, strings, template literals and comments.
    A regular expression holding a bracket or a quote may pair some wrongly,
    which only leaves those functions unplaced: their hashes are not found."""
    closing: dict[int, int] = {}  # an opening bracket's index: its partner's
    stack: list[int] = []
    templates: list[int] = []  # depth of the bracket stack at each open `${`
    literal: list[tuple[int, int]] = []
    index, length = 0, len(text)
    in_template, literal_start = False, 0
    while index < length and len(closing) < MAX_BRACKET_PAIRS:
        if in_template:
            mark = _TEMPLATE_MARK.search(text, index)
            if mark is None:
                literal.append((literal_start, length))
                break
            index = mark.end()
            if mark.group(0) == "`":
                literal.append((literal_start, mark.start()))
                in_template = False
            elif mark.group(0) == "${":
                literal.append((literal_start, mark.start()))
                templates.append(len(stack))
                stack.append(mark.start() + 1)
                in_template = False
            continue
        mark = _CODE_MARK.search(text, index)
        if mark is None:
            break
        token, at = mark.group(0), mark.start()
        index = mark.end()
        if token in "({[":
            stack.append(at)
        elif token in ")}]":
            if stack:
                closing[stack.pop()] = at
                if templates and templates[-1] == len(stack):
                    templates.pop()
                    in_template, literal_start = True, at + 1  # the `}` of a `${...}`: back in the template
        elif token in "\"'":
            rest = _STRING_REST[token].match(text, index)
            index = (rest.end() if rest else index) + 1
        elif token == "`":
            in_template, literal_start = True, index
        elif token == "//":
            newline = text.find("\n", index)
            index = length if newline < 0 else newline
        elif token == "/*":
            end = text.find("*/", index)
            index = length if end < 0 else end + 2
    spans = []
    for opened, closed in closing.items():
        if text[opened] != "(" or _keyword_before(text, opened):
            continue
        body = _body_start(text, closed + 1)
        if body is not None and body in closing:
            spans.append((opened, closing[body] + 1))
    spans.sort()
    return ScannedScript(spans, literal)


def indented(text: str, start: int, end: int, template_text: list[tuple[int, int]]) -> str:
    """text[start:end] as a CommonJS module's copy has it: each line after the
    first indented two more spaces, but not inside a template literal's text."""
    pieces, at = [], start
    first = bisect.bisect_left(template_text, (start, start)) - 1
    for literal_start, literal_end in template_text[max(first, 0) :]:
        if literal_start >= end:
            break
        if literal_end <= at:
            continue
        pieces.append(text[at : max(literal_start, at)].replace("\n", "\n  "))
        upto = min(literal_end, end)
        pieces.append(text[max(literal_start, at) : upto])
        at = upto
    pieces.append(text[at:end].replace("\n", "\n  "))
    return "".join(pieces)


def _keyword_before(text: str, opened: int) -> bool:
    """Is this `(` a statement's (`if (`, `for (`), not a function's?"""
    before = text[max(0, opened - 16) : opened].rstrip()
    word = re.search(r"[A-Za-z_$][\w$]*$", before)
    return word is not None and word.group(0) in _NOT_FUNCTIONS


def _body_start(text: str, index: int) -> int | None:
    """After a `)`: the index of a function body's `{` (`) {`, `) => {`)."""
    rest = text[index : index + 8]
    stripped = rest.lstrip()
    offset = index + len(rest) - len(stripped)
    if stripped.startswith("=>"):
        after = text[offset + 2 : offset + 10]
        offset += 2 + len(after) - len(after.lstrip())
        stripped = text[offset : offset + 1]
    return offset if stripped.startswith("{") else None


# Linear in the text, whatever it holds (a target writes it): an identifier
# starts only where none goes on (`(?<![\w$])`) and is taken whole (atomic),
# every run of spaces or of anything up to a bracket is possessive, and the
# keywords before a method are at most four; a backtracking pattern once
# took 82 s over 72 kB of `a$a$…`.
_IDENTIFIER = r"(?<![\w$])(?>[A-Za-z_$][\w$]*+)"
_TYPE_PARAMETERS = r"(?:<[^<>()]*+>\s*+)?"
# Where functions are defined, by name (group 1) and their parameters' `(`
# (group 2): `function name(`, a method `name(...) {`, `name = function(`,
# `name: (...) =>`. The same patterns read the file and its copy, so that
# their lists of a name line up.
_DEFINITIONS = (
    re.compile(rf"(?<![\w$])function\s*+\*?\s*+({_IDENTIFIER})\s*+{_TYPE_PARAMETERS}(\()"),
    re.compile(
        rf"(?:^|[{{;,}}\s])(?:(?:static|async|get|set)\s++|\*\s*+){{0,4}}+({_IDENTIFIER})\s*+{_TYPE_PARAMETERS}(\()[^()]*+\)\s*+(?::[^{{;=()]*+)?\{{",
        re.MULTILINE,
    ),
    re.compile(
        rf"({_IDENTIFIER})\s*+[:=]\s*+(?:async\s++)?+(?:function(?![\w$])\s*+\*?\s*+(?:{_IDENTIFIER})?\s*+)?+(\()(?=[^()]*+\)\s*+(?::[^=;{{()]*+)?(?:=>|\{{))"
    ),
)
_FIRST_PARAMETER = re.compile(rf"\(\s*+(?:\.\.\.)?({_IDENTIFIER})?")
MAX_DEFINITIONS = 1 << 18  # per script and pattern (TypeScript's compiler: about 9,000)
_WINDOW = 1 << 18  # searched at once; a definition is at most _OVERLAP long
_OVERLAP = 1 << 12


def definitions(text: str) -> dict[str, list[int]]:
    """Each name's definitions in a script: where their parameters' `(` are, in order."""
    found: dict[str, set[int]] = {}
    for pattern in _DEFINITIONS:
        count = 0
        # Window by window: one search holds the GIL while it runs, and a
        # 16 MiB script searched whole would stop every thread for seconds.
        for window in range(0, len(text), _WINDOW):
            for match in pattern.finditer(text, window, min(window + _WINDOW + _OVERLAP, len(text))):
                if match.start() >= window + _WINDOW:
                    break  # the next window's
                name = match.group(1)
                if name not in _NOT_FUNCTIONS and name != "function":
                    found.setdefault(name, set()).add(match.start(2))
                count += 1
            if count >= MAX_DEFINITIONS:
                break
    return {name: sorted(starts) for name, starts in found.items()}


def _first_parameter(text: str, opened: int) -> str:
    matched = _FIRST_PARAMETER.match(text, opened)
    return (matched.group(1) or "") if matched else ""


class BunScript:
    """One script as bun has it: the file's text and bun's copy, indexed once
    (the copy's functions by hash, both texts' definitions by name), under
    a lock: processes of one command share their scripts."""

    def __init__(self, path: str, original: str, runtime: str) -> None:
        self.path, self.original, self.runtime = path, original, runtime
        self._lock = threading.Lock()
        self._index: BunScriptIndex | None = None

    def index(self) -> BunScriptIndex:
        with self._lock:
            if self._index is None:
                self._index = _index_script(self.original, self.runtime)
            return self._index

    def is_indexed(self) -> bool:
        return self._index is not None

    def take_index(self, index: BunScriptIndex) -> None:
        """An index made before of these very texts (jitprof's cache)."""
        with self._lock:
            if self._index is None:
                self._index = index

    def functions_hashed(self) -> dict[str, list[int]]:
        return self.index().hashes

    def name_at(self, start: int) -> str:
        """The name the copy defines the function beginning at start with ("": none, or several)."""
        names = self.index().names_at.get(start, [])
        return names[0] if len(names) == 1 else ""

    def line_of(self, name: str, start: int) -> tuple[int, int]:
        """The file's line and column (1-based) of the function whose copy
        begins at start, or (0, 0) when its definitions do not line up."""
        index = self.index()
        return self._paired(start, index.runtime_definitions.get(name, []), index.original_definitions.get(name, []))

    def unnamed_line_of(self, start: int) -> tuple[int, int]:
        """The file's line and column of a function no pattern names (an arrow
        passed as an argument, `obj.key = function`), paired by its order
        among such functions between the two paired definitions around it,
        when as many lie there in the file as in the copy and they begin alike;
        else (0, 0)."""
        index = self.index()
        copy_starts = [anchor[0] for anchor in index.anchors]
        after = bisect.bisect_left(copy_starts, start)
        copy_low, file_low = index.anchors[after - 1] if after > 0 else (-1, -1)
        copy_high, file_high = index.anchors[after] if after < len(index.anchors) else (len(self.runtime), len(self.original))
        in_copy = _between(index.runtime_unnamed, copy_low, copy_high)
        return self._paired(start, in_copy, _between(index.original_unnamed, file_low, file_high))

    def _paired(self, start: int, in_copy: list[int], in_file: list[int]) -> tuple[int, int]:
        """The file's line and column of the function at start in the copy,
        paired by order between two lists of starts that must be as long and
        begin alike (a definition the patterns missed in one and another they
        took for one would shift the pairs); else (0, 0)."""
        if start not in in_copy or len(in_copy) != len(in_file):
            return (0, 0)
        at = in_file[in_copy.index(start)]
        if _first_parameter(self.runtime, start) != _first_parameter(self.original, at):
            return (0, 0)
        return self.index().lines.line_and_column(at)


class LineIndex:
    """Line and column of a place in a text, from the count of newlines
    before every 64 KiB block: memory in the text's size over 64 Ki, not
    one entry a line (16 MiB of newlines once kept 16 M Python ints)."""

    BLOCK = 1 << 16

    def __init__(self, text: str) -> None:
        self._text = text
        self._newlines_before = array("Q", [0])  # newlines before each block's start
        self._last_newline_before = array("q", [-1])  # where the last of them is (-1: none)
        for start in range(self.BLOCK, len(text) + 1, self.BLOCK):
            block = start - self.BLOCK
            last = text.rfind("\n", block, start)
            self._newlines_before.append(self._newlines_before[-1] + text.count("\n", block, start))
            self._last_newline_before.append(last if last >= 0 else self._last_newline_before[-1])

    def line_and_column(self, at: int) -> tuple[int, int]:
        """1-based line and column of the character at `at`."""
        block = min(at // self.BLOCK, len(self._newlines_before) - 1)
        block_start = block * self.BLOCK
        line = self._newlines_before[block] + self._text.count("\n", block_start, at) + 1
        last = self._text.rfind("\n", block_start, at)
        if last < 0:
            last = self._last_newline_before[block]
        return line, at - last


@dataclass(frozen=True)
class BunScriptIndex:
    hashes: dict[str, list[int]]  # a hash: where the functions that have it begin in the copy
    runtime_definitions: dict[str, list[int]]
    original_definitions: dict[str, list[int]]
    names_at: dict[int, list[str]]  # the copy's definitions by where they begin
    lines: LineIndex  # the file's
    # Definitions paired between the copy and the file (copy's start, file's),
    # in order; and, in each, where the functions no pattern names begin.
    anchors: list[tuple[int, int]]
    runtime_unnamed: list[int]
    original_unnamed: list[int]


def _between(starts: list[int], low: int, high: int) -> list[int]:
    return starts[bisect.bisect_right(starts, low) : bisect.bisect_left(starts, high)]


def _index_script(original: str, runtime: str) -> BunScriptIndex:
    hashes: dict[str, list[int]] = {}
    scanned = scan_functions(runtime)
    # Nested functions are hashed with all they nest in: a script crafted as
    # 100,000 nested arrows would cost its size squared. Innermost first (the
    # hot code), within a budget real scripts stay far under (TypeScript's
    # compiler: 1.8 times its size).
    budget = HASHED_PER_BYTE * len(runtime) + (1 << 20)
    for start, end in sorted(scanned.spans, key=lambda span: span[1] - span[0]):
        budget -= 2 * (end - start)
        if budget < 0:
            break
        # A CommonJS module's copy is indented one level inside its wrapper.
        for variant in {runtime[start:end], indented(runtime, start, end, scanned.template_text)}:
            for constructor in (False, True):
                hashes.setdefault(code_block_hash(variant, constructor), []).append(start)
    # A CommonJS module's top-level code: the wrapper function around all of it.
    body = "  " + indented(runtime, 0, len(runtime), scanned.template_text)
    hashes.setdefault(code_block_hash(f"{COMMONJS_PARAMETERS} {{\n{body.removesuffix('  ')}}}"), []).append(MODULE_CODE)
    runtime_definitions = definitions(runtime)
    names_at: dict[int, list[str]] = {}
    for name, starts in runtime_definitions.items():
        for at in starts:
            names_at.setdefault(at, []).append(name)
    lines = LineIndex(original)
    original_definitions = definitions(original)
    anchors = _anchors(runtime, original, runtime_definitions, original_definitions)
    copy_named = set(names_at)
    file_named = {at for starts in original_definitions.values() for at in starts}
    return BunScriptIndex(
        hashes,
        runtime_definitions,
        original_definitions,
        names_at,
        lines,
        anchors,
        [start for start, _end in scanned.spans if start not in copy_named],
        [start for start, _end in scan_functions(original).spans if start not in file_named],
    )


def _anchors(
    runtime: str, original: str, runtime_definitions: dict[str, list[int]], original_definitions: dict[str, list[int]]
) -> list[tuple[int, int]]:
    """The named definitions that pair one to one (as many of the name in
    each text, beginning alike), in order; kept only while both texts' order
    agrees, so that between two of them the same functions lie."""
    pairs = sorted(
        (copy_at, file_at)
        for name, in_copy in runtime_definitions.items()
        if len(in_copy) == len(original_definitions.get(name, []))
        for copy_at, file_at in zip(in_copy, original_definitions[name], strict=True)
        if _first_parameter(runtime, copy_at) == _first_parameter(original, file_at)
    )
    anchors: list[tuple[int, int]] = []
    for copy_at, file_at in pairs:
        if not anchors or file_at > anchors[-1][1]:
            anchors.append((copy_at, file_at))
    return anchors
