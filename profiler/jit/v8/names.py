"""Readable names for the code V8 describes in perf maps (and jitdump).

V8 writes `<Tag>:<tier marker><function name> <script>:<line>:<column>` for
JavaScript (Node >= 19: tag JS; before: LazyCompile, Function, Script, Eval)
and `<Tag>:<name>` for builtins, bytecode handlers, stubs and regular
expressions. The display form is `name file.js:42`; the full path, line,
column and tier stay in the record.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class Tier(str, enum.Enum):
    INTERPRETED = "interpreted"  # Ignition (~)
    BASELINE = "baseline"  # Sparkplug (^)
    MAGLEV = "maglev"  # (+)
    TURBOFAN = "turbofan"  # (*)
    UNOPTIMIZED = "unoptimized"  # no marker: optimisation disabled, or pre-tiering Node
    BUILTIN = "builtin"
    BYTECODE_HANDLER = "bytecode handler"
    STUB = "stub"
    REGEXP = "regexp"
    CALLBACK = "callback"


@dataclass(frozen=True)
class V8Name:
    """A V8 code name taken apart: function, script, position and tier."""

    display: str  # "render view.js:42", "[builtin] ArrayPrototypePush"
    function: str  # "" for an anonymous function
    script: str  # full script path or URL; "" for non-JS code
    line: int  # 1-based, 0 when unknown
    column: int
    tier: Tier
    context_specialized: bool = False
    on_stack_replacement: bool = False


JS_TAGS = {"JS", "LazyCompile", "Function", "Script", "Eval"}
_LABELLED_TAGS = {
    "Builtin": Tier.BUILTIN,
    "BytecodeHandler": Tier.BYTECODE_HANDLER,
    "Stub": Tier.STUB,
    "Handler": Tier.STUB,
    "RegExp": Tier.REGEXP,
    "Callback": Tier.CALLBACK,
}
_TIER_MARKERS = {"~": Tier.INTERPRETED, "^": Tier.BASELINE, "+": Tier.MAGLEV, "*": Tier.TURBOFAN}
_POSITION = re.compile(r":(\d+)(?::(\d+))?$")
# Where a script begins after the function name: a path, a URL, node: builtins.
_SCRIPT_START = re.compile(r" (?=/|\\|[A-Za-z]:[\\/]|node:|file:|https?:|data:|evalmachine|<anonymous>|\[eval|wasm)")


def parse_v8_name(raw: str) -> V8Name | None:
    """None when the text is not in any of V8's forms."""
    tag, separator, rest = raw.partition(":")
    if not separator:
        return None
    if tag in _LABELLED_TAGS:
        tier = _LABELLED_TAGS[tag]
        label = tier.value if tier is not Tier.BYTECODE_HANDLER else "bytecode"
        return V8Name(f"[{label}] {rest.strip()}", rest.strip(), "", 0, 0, tier)
    if tag not in JS_TAGS:
        return None
    tier = Tier.UNOPTIMIZED
    on_stack_replacement = context_specialized = False
    if rest[:1] == "o" and rest[1:2] in _TIER_MARKERS:  # OSR code (V8 2025+)
        on_stack_replacement, rest = True, rest[1:]
    if rest[:1] in _TIER_MARKERS:
        tier, rest = _TIER_MARKERS[rest[0]], rest[1:]
        if rest[:1] == "'":
            context_specialized, rest = True, rest[1:]
    function, script, line, column = _split_function_and_script(rest)
    return V8Name(
        js_display(function, script, line), function, script, line, column, tier, context_specialized, on_stack_replacement
    )


def _split_function_and_script(text: str) -> tuple[str, str, int, int]:
    line = column = 0
    position = _POSITION.search(text)
    if position:
        line = int(position.group(1))
        column = int(position.group(2) or 0)
        text = text[: position.start()]
    if text.startswith(" "):  # empty function name
        return "", text[1:], line, column
    start = _SCRIPT_START.search(text)
    if start:
        return text[: start.start()], text[start.end() :], line, column
    if not position:
        return text, "", 0, 0  # no script at all
    function, _, script = text.rpartition(" ")
    return (function, script, line, column) if function else ("", script, line, column)


# V8's builtins embedded in node's own text are named Builtins_<name>; its
# bytecode handlers among them <bytecode>Handler, <bytecode>WideHandler and
# <bytecode>ExtraWideHandler (node's own symbols carry no other builtin so
# named). The prefix bytecodes are named Wide and ExtraWide themselves.
EMBEDDED_BUILTIN_PREFIX = "Builtins_"
_HANDLER_SUFFIX = "Handler"
_OPERAND_SCALES = ("ExtraWide", "Wide")
_PREFIX_BYTECODES = {"Wide", "ExtraWide", "DebugBreakWide", "DebugBreakExtraWide"}


def embedded_builtin_name(symbol: str) -> tuple[str, Tier]:
    """How V8's code log names an embedded builtin, from its symbol:
    `[builtin] ArrayPrototypePush`, and a bytecode handler as
    `[bytecode] Add.Wide` (as Node 22 on name the same code)."""
    name = symbol.removeprefix(EMBEDDED_BUILTIN_PREFIX)
    if not name.endswith(_HANDLER_SUFFIX) or len(name) == len(_HANDLER_SUFFIX):
        return f"[builtin] {name}", Tier.BUILTIN
    bytecode = name[: -len(_HANDLER_SUFFIX)]
    if bytecode not in _PREFIX_BYTECODES:
        for scale in _OPERAND_SCALES:
            if bytecode.endswith(scale) and len(bytecode) > len(scale):
                bytecode = f"{bytecode[: -len(scale)]}.{scale}"
                break
    return f"[bytecode] {bytecode}", Tier.BYTECODE_HANDLER


# A script without a name (code made by `new Function`, or eval): V8's own
# stack traces call it <anonymous>.
UNNAMED_SCRIPT = "<anonymous>"
ASYNC_PREFIX = "[async] "  # an async function awaiting the frames below it (FrameKind.ASYNC)


def js_display(function: str, script: str, line: int) -> str:
    """A JS frame as it is shown: `render view.js:42`, `(anonymous) view.js:12`,
    and `anonymous <anonymous>:3` for a `new Function`'s code."""
    place = short_script(script) or (UNNAMED_SCRIPT if line else "")
    display = f"{function or '(anonymous)'} {place}"
    if line:
        display += f":{line}"
    return display.strip()


def short_script(script: str) -> str:
    """view.js for a path or URL; node: builtins keep their module name."""
    if not script or script.startswith("node:"):
        return script
    base = re.split(r"[\\/]", script.rstrip("/\\"))[-1]
    return base or script
