"""The V8 name formatter, on perf-map lines recorded from each Node major."""

import pytest

from profiler.jit.registry import native_symbol_frame
from profiler.jit.v8.names import Tier, embedded_builtin_name, parse_v8_name
from tests.helpers import DATA

DATA = DATA


def recorded(major: int) -> list[str]:
    lines = (DATA / f"perfmap-node{major}.txt").read_text().splitlines()
    return [line.split(" ", 2)[2] for line in lines if line and not line.startswith("#")]


@pytest.mark.parametrize("major", [18, 20, 22, 24, 26])
def test_every_recorded_name_parses(major):
    for name in recorded(major):
        parsed = parse_v8_name(name)
        assert parsed is not None, name
        if "names.js" in name:
            assert parsed.script.endswith("/fixtures/js/names.js") and parsed.line > 0, name
            assert "names.js:" in parsed.display


@pytest.mark.parametrize("major", [20, 22, 24, 26])
def test_current_forms(major):
    names = {parse_v8_name(name).display: parse_v8_name(name) for name in recorded(major)}
    assert "get area names.js:7" in names
    assert "method with spaces names.js:10" in names
    assert names["method with spaces names.js:10"].function == "method with spaces"
    assert "(anonymous) names.js:14" in names
    assert any(display.startswith("[builtin] ") for display in names)
    assert any(display.startswith("[bytecode] ") for display in names)
    if any(name.startswith("RegExp:") for name in recorded(major)):  # 24+ interpret this one
        assert any(display.startswith("[regexp] ab+c") for display in names)
    assert any(parsed.script.startswith("node:internal/") for parsed in names.values())


def test_on_stack_replacement_recorded_from_node26():
    osr = [parse_v8_name(name) for name in recorded(26) if name.startswith("JS:o")]
    assert osr and all(item.on_stack_replacement and item.script.endswith("names.js") for item in osr)


def test_pre_node19_forms():
    parsed = [parse_v8_name(name) for name in recorded(18)]
    make = next(item for item in parsed if item.function == "make")
    assert make.display == "make names.js:8" and make.tier is Tier.INTERPRETED and make.column == 0
    assert parse_v8_name("LazyCompile:*render /srv/app/view.js:42").tier is Tier.TURBOFAN
    assert parse_v8_name("Function:~ /srv/app/main.js:1").display == "(anonymous) main.js:1"


@pytest.mark.parametrize(
    "raw,display,script,line,column,tier",
    [
        ("JS:*render /srv/app/lib/view.js:42:7", "render view.js:42", "/srv/app/lib/view.js", 42, 7, Tier.TURBOFAN),
        ("JS:^render /srv/app/lib/view.js:42:7", "render view.js:42", "/srv/app/lib/view.js", 42, 7, Tier.BASELINE),
        ("JS:+'get area /x/names.js:7:11", "get area names.js:7", "/x/names.js", 7, 11, Tier.MAGLEV),
        (
            "JS:~ node:internal/main/run_main_module:1:1",
            "(anonymous) node:internal/main/run_main_module:1",
            "node:internal/main/run_main_module",
            1,
            1,
            Tier.INTERPRETED,
        ),
        (
            "JS:*Module._compile node:internal/modules/cjs/loader:1554:14",
            "Module._compile node:internal/modules/cjs/loader:1554",
            "node:internal/modules/cjs/loader",
            1554,
            14,
            Tier.TURBOFAN,
        ),
        ("JS:*handler C:\\srv\\app\\x.js:3:4", "handler x.js:3", "C:\\srv\\app\\x.js", 3, 4, Tier.TURBOFAN),
        ("JS:*handler file:///srv/my app/x.js:3:4", "handler x.js:3", "file:///srv/my app/x.js", 3, 4, Tier.TURBOFAN),
        ("JS:*fetch https://cdn.example/lib.mjs:10:2", "fetch lib.mjs:10", "https://cdn.example/lib.mjs", 10, 2, Tier.TURBOFAN),
        ("JS:o*loop /x.js:1:2", "loop x.js:1", "/x.js", 1, 2, Tier.TURBOFAN),
        ("JS:main", "main", "", 0, 0, Tier.UNOPTIMIZED),
    ],
)
def test_forms(raw, display, script, line, column, tier):
    parsed = parse_v8_name(raw)
    assert (parsed.display, parsed.script, parsed.line, parsed.column, parsed.tier) == (display, script, line, column, tier)


def test_labels_and_non_v8_names():
    assert parse_v8_name("Builtin:ArrayPrototypePush").display == "[builtin] ArrayPrototypePush"
    assert parse_v8_name("BytecodeHandler:LdaZero").tier is Tier.BYTECODE_HANDLER
    assert parse_v8_name("Stub:CEntry").display == "[stub] CEntry"
    assert parse_v8_name("RegExp:^a,b$").display == "[regexp] ^a,b$"
    assert parse_v8_name("Interpreter") is None
    assert parse_v8_name("java.lang.String::hashCode") is None


def test_embedded_builtins_named_as_the_code_log_names_them():
    """Node 20 runs its interpreter from node's own text: its bytecode
    handlers' symbols read as Node 22's code log names the same code."""
    assert embedded_builtin_name("Builtins_ReturnHandler") == ("[bytecode] Return", Tier.BYTECODE_HANDLER)
    assert embedded_builtin_name("Builtins_AddWideHandler")[0] == "[bytecode] Add.Wide"
    assert embedded_builtin_name("Builtins_AddSmiExtraWideHandler")[0] == "[bytecode] AddSmi.ExtraWide"
    # The prefix bytecodes are named Wide and ExtraWide themselves.
    assert embedded_builtin_name("Builtins_WideHandler")[0] == "[bytecode] Wide"
    assert embedded_builtin_name("Builtins_DebugBreakExtraWideHandler")[0] == "[bytecode] DebugBreakExtraWide"
    assert embedded_builtin_name("Builtins_ArrayPrototypePush") == ("[builtin] ArrayPrototypePush", Tier.BUILTIN)
    assert embedded_builtin_name("Builtins_Handler")[0] == "[builtin] Handler"
    assert native_symbol_frame("Builtins_LdaZeroHandler", "node").name == "[bytecode] LdaZero"
    assert native_symbol_frame("Builtins_JSEntry", "node").name == "[builtin] JSEntry"


def test_code_without_a_script_name():
    """`new Function` code: V8 writes an empty script name; V8's own stack
    traces say <anonymous>, so does the frame (not `anonymous :3`)."""
    name = parse_v8_name("JS:~anonymous :3:10")
    assert (name.display, name.function, name.script, name.line) == ("anonymous <anonymous>:3", "anonymous", "", 3)
    assert parse_v8_name("JS:~ :1:1").display == "(anonymous) <anonymous>:1"
