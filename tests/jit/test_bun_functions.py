"""Bun's functions placed from the hash JavaScriptCore names them with: the
hash, the scan of a transpiled script, the pairing of its definitions with
the file's (jit/bun/scripts.py), and a live bun's scripts transpiled by its
own bun (jit/bun/functions.py).

The texts and hashes are Bun 1.4.4's: the runtime copies as its transpiler
prints them, the hashes from its jitdumps of these very scripts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import tracemalloc
from pathlib import Path

import pytest

from profiler.jit.bun.functions import BunFunctions, FunctionPlace, _place_in, _ProcessScripts, placed_frame
from profiler.jit.bun.scripts import MODULE_CODE, BunScript, code_block_hash, definitions, indented, scan_functions
from profiler.jit.bun.transpiler import OWN_BUN, TRANSPILER, checked_answer, transpiled_scripts, trusted_program
from profiler.kernel.address_spaces import JIT_MODULE
from profiler.model.profile import Frame, FrameKind
from profiler.safety.processes import run_as_user

ROOT = Path(__file__).resolve().parents[2]
BUN = ROOT / ".nodes" / "runtimes" / "node_modules" / "@oven" / "bun-linux-x64" / "bin" / "bun"
APP = ROOT / "fixtures" / "js" / "bun_app"

SPIN_TS = (APP / "spin.ts").read_text()
SPIN_COPY = (
    "const banner = `spin:\n  a line the wrapper does not indent`;\n"
    "export function spin(count, label) {\n"
    "  const tally = { value: label.length };\n"
    "  for (let i = 0;i < count; i++)\n"
    "    tally.value = (tally.value * 17 + i) % 65521;\n"
    "  return tally.value + 42;\n"
    "}\n"
)
MAIN_CJS = (APP / "main.cjs").read_text()
MAIN_COPY = (
    'const { spin } = require("./spin.ts");\n'
    "function round(count) {\n"
    "  let total = 0;\n"
    "  for (let i = 0;i < 5; i++)\n"
    "    total += spin(count, `round ${i}`);\n"
    "  return total;\n"
    "}\n"
    "const end = Date.now() + Number(process.argv[2] || 3) * 1000;\n"
    'console.log("ready");\n'
    "let sink = 0;\n"
    "while (Date.now() < end)\n"
    "  sink += round(3000);\n"
    'console.log(sink !== 0 ? "done" : "");\n'
)
FIB_TEST = (APP / "fib.test.ts").read_text()
FIB_COPY = (
    'import { expect, test } from "bun:test";\n'
    "function fib(n) {\n"
    "  return n < 2 ? n : fib(n - 1) + fib(n - 2);\n"
    "}\n"
    'test("fib for two seconds", () => {\n'
    "  let total = 0;\n"
    "  const end = Date.now() + 2000;\n"
    "  while (Date.now() < end)\n"
    "    total += fib(20);\n"
    "  expect(total).toBeGreaterThan(0);\n"
    "});\n"
)
# From the jitdump of `bun main.cjs`: spin#Bts0Fq, round#BtfhRm, and the
# CommonJS wrapper's top-level code, #BsP6Ir; of `bun test`: the test's
# arrow function, #Cy3qZx.
SPIN_HASH, ROUND_HASH, MAIN_HASH, ARROW_HASH = "Bts0Fq", "BtfhRm", "BsP6Ir", "Cy3qZx"


def scripts() -> list[BunScript]:
    return [BunScript("/app/spin.ts", SPIN_TS, SPIN_COPY), BunScript("/app/main.cjs", MAIN_CJS, MAIN_COPY)]


def test_the_hash_is_javascriptcores():
    # `(0, eval)("function hotx(n){...}")`: bun's jitdump named it hotx#AxlRGa.
    text = "(n){let v=0;for(let i=0;i<n;i++)v=(v*31+i)|0;return v}"
    assert code_block_hash(text) == "AxlRGa"
    assert code_block_hash(text, constructor=True) == "AxlRGb"  # the low bit flipped


def test_a_typescript_module_s_function_is_placed_at_its_line_in_the_file():
    # The copy has no types and `banner.length` inlined: only bun's own transpiler gives that text.
    place = _place_in(scripts(), "spin", SPIN_HASH)
    line = SPIN_TS.splitlines().index("export function spin(count: number, label: string): number {") + 1
    assert place == FunctionPlace("/app/spin.ts", line, len("export function spin("))


def test_a_function_javascriptcore_did_not_name_is_named_by_the_copy():
    # Compiled off the main thread, a function can be `<name not materialized>#Bts0Fq`.
    place = _place_in(scripts(), "<name not materialized>", SPIN_HASH)
    assert place == FunctionPlace("/app/spin.ts", 9, len("export function spin("), name="spin")
    # A truly anonymous function stays anonymous: its script only.
    assert _place_in(scripts(), "", ROUND_HASH) == FunctionPlace("/app/main.cjs", 0, 0)


def test_an_anonymous_function_is_paired_by_its_order_between_named_ones():
    fib = BunScript("/app/fib.test.ts", FIB_TEST, FIB_COPY)
    line = FIB_TEST.splitlines().index('test("fib for two seconds", () => {') + 1
    assert _place_in([fib], "", ARROW_HASH) == FunctionPlace("/app/fib.test.ts", line, len('test("fib for two seconds", ('))
    # A comment's arrow is not a function: the pairs stay, the line moves with the file.
    commented = FIB_TEST.replace("test(", '// skipped: test("slow", () => { slow(); });\ntest(', 1)
    assert _place_in([BunScript("/app/fib.test.ts", commented, FIB_COPY)], "", ARROW_HASH).line == line + 1
    # A type that reads as one more arrow in the file than in the copy (which drops types): no line.
    typed = FIB_TEST.replace("test(", "const checks = new Map<string, (total: number) => { ok: boolean }>();\ntest(", 1)
    assert _place_in([BunScript("/app/fib.test.ts", typed, FIB_COPY)], "", ARROW_HASH) == FunctionPlace("/app/fib.test.ts", 0, 0)


def test_a_commonjs_script_s_copy_is_indented_in_its_wrapper():
    assert _place_in(scripts(), "round", ROUND_HASH) == FunctionPlace("/app/main.cjs", 7, len("function round("))
    # Its top-level code: the wrapper function around it all, template literals not indented.
    assert _place_in(scripts(), "", MAIN_HASH) == FunctionPlace("/app/main.cjs", 1, 1, module_code=True)
    assert MODULE_CODE in scripts()[1].functions_hashed()[MAIN_HASH]


def test_an_es_module_s_top_level_code_is_named_by_its_script():
    functions = BunFunctions()
    assert functions.place(os.getpid(), "JSC-FTL: /srv/app/main.mjs#AUpZ21") == FunctionPlace(
        "/srv/app/main.mjs", 1, 1, module_code=True
    )


def test_frames_read_as_node_s():
    functions = BunFunctions()
    jsc = Frame("spin", JIT_MODULE, FrameKind.JIT, tier="ftl")
    module = Frame("/srv/app/main.mjs", JIT_MODULE, FrameKind.JIT, tier="dfg")
    assert functions.place_frame(os.getpid(), "JSC-DFG: /srv/app/main.mjs#AUpZ21", module).name == "(anonymous) main.mjs:1"
    # An anonymous function keeps its hash until it has a line.
    arrow = Frame(f"(anonymous)#{ARROW_HASH}", JIT_MODULE, FrameKind.JIT, tier="dfg")
    fib = BunScript("/app/fib.test.ts", FIB_TEST, FIB_COPY)
    assert placed_frame(arrow, _place_in([fib], "", ARROW_HASH)).name == "(anonymous) fib.test.ts:8"
    assert placed_frame(arrow, FunctionPlace("/app/fib.test.ts", 0, 0)).name == f"(anonymous)#{ARROW_HASH} fib.test.ts"
    # Not a bun process: nothing transpiled, the frame as it was.
    assert functions.place_frame(os.getpid(), f"JSC-FTL: spin#{SPIN_HASH}", jsc) == jsc


def test_the_same_text_in_two_scripts_is_unplaced_and_twice_in_one_gives_its_script_only():
    twin = BunScript("/app/other.ts", SPIN_TS, SPIN_COPY)
    assert _place_in([*scripts(), twin], "spin", SPIN_HASH) is None
    doubled = BunScript("/app/spin.ts", SPIN_TS + "\n" + SPIN_TS, SPIN_COPY + SPIN_COPY)
    assert _place_in([doubled], "spin", SPIN_HASH) == FunctionPlace("/app/spin.ts", 0, 0)


def test_definitions_that_do_not_line_up_give_no_line():
    # A definition in a comment the copy dropped: the file has one more `round`.
    commented = "// was: function round(n) { return n; }\n" + MAIN_CJS
    assert _place_in([BunScript("/app/main.cjs", commented, MAIN_COPY)], "round", ROUND_HASH) == FunctionPlace(
        "/app/main.cjs", 0, 0
    )
    # Paired definitions that begin differently (one missed, another taken): no line either.
    renamed = MAIN_CJS.replace("function round(count)", "function round(total)")
    assert _place_in([BunScript("/app/main.cjs", renamed, MAIN_COPY)], "round", ROUND_HASH) == FunctionPlace(
        "/app/main.cjs", 0, 0
    )


def test_the_scan_finds_functions_and_skips_statements_strings_and_comments():
    text = (
        'function a(x) { if (x) { return "}"; } }\n'
        "const b = (y) => { return `${ {k: y}.k } }`; };\n"
        "class C { m(z) { for (;;) { break; } } }\n"
        "// function fake() { }\n"
        "/* (w) { } */\n"
        "const e = q => q;\n"
    )
    spans = [text[start:end] for start, end in scan_functions(text).spans]
    assert spans == [
        '(x) { if (x) { return "}"; } }',
        "(y) => { return `${ {k: y}.k } }`; }",
        "(z) { for (;;) { break; } }",
    ]


def test_a_template_literal_s_text_is_not_indented():
    text = "(a) {\n  return `x\ny${a}\nz`;\n}"
    scanned = scan_functions(text)
    assert indented(text, 0, len(text), scanned.template_text) == "(a) {\n    return `x\ny${a}\nz`;\n  }"


@pytest.mark.skipif(not BUN.exists(), reason="bun is installed by make test's set-up")
def test_a_live_bun_s_scripts_are_transpiled_by_its_own_bun(tmp_path):
    for name in ("main.cjs", "spin.ts"):
        shutil.copy(APP / name, tmp_path / name)
    process = subprocess.Popen([str(BUN), "main.cjs", "30"], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        functions = BunFunctions()
        spin = functions.place(process.pid, f"JSC-FTL: spin#{SPIN_HASH}")
        assert spin == FunctionPlace(str(tmp_path / "spin.ts"), 9, len("export function spin("))
        frame = functions.place_frame(process.pid, f"JSC-DFG: round#{ROUND_HASH}", Frame("round", JIT_MODULE, FrameKind.JIT))
        assert (frame.name, frame.file, frame.line) == ("round main.cjs:7", str(tmp_path / "main.cjs"), 7)
        assert functions.problems() == {}
    finally:
        process.kill()
        process.wait()
        process.stdout.close()


@pytest.mark.skipif(not BUN.exists(), reason="bun is installed by make test's set-up")
def test_a_scripts_copy_is_made_once_for_its_text_then_taken_from_the_cache(tmp_path):
    """Finding the scripts and making the copies took 0.3-0.4 s of CPU
    beside a bun running tsc at every run: a command seen before has its
    scripts' list and their copies from the cache (no run of jitprof's bun),
    while its scripts and their directories are as they were; a text
    changed since is found again and has a new copy."""
    app = tmp_path / "app"
    app.mkdir()
    for name in ("main.cjs", "spin.ts"):
        shutil.copy(APP / name, app / name)
    # Written a second ago, not while bun searches (a list found then is not kept).
    written = time.time_ns() - 10**9
    os.utime(app, ns=(written, written))
    process = subprocess.Popen([str(BUN), "main.cjs", "30"], cwd=app, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"

        def transpiled() -> tuple[dict[str, str], int]:
            runs: list[int] = []
            scripts, problem = transpiled_scripts(process.pid, lambda group: runs.append(group) if group is not None else None)
            assert problem == ""
            return {Path(script.path).name: script.runtime for script in scripts}, len(runs)

        made, runs = transpiled()
        assert runs == 2 and made["spin.ts"] == SPIN_COPY and set(made) == {"main.cjs", "spin.ts"}
        kept, runs = transpiled()
        assert runs == 0 and kept == made
        (app / "spin.ts").write_text(SPIN_TS.replace("17", "19"))
        changed, runs = transpiled()
        assert runs == 2 and changed["spin.ts"] == SPIN_COPY.replace("17", "19") and changed["main.cjs"] == made["main.cjs"]
        assert transpiled() == (changed, 0)
        # A file beside the scripts may change what an import resolves to: found again.
        (app / "spin.js").write_text("export function spin() {}\n")
        assert transpiled() == (changed, 1)
        # A listed script now a link (to what the user may not read) is not followed: found again by the user's bun.
        (app / "main.cjs").rename(app / "main-real.cjs")
        (app / "main.cjs").symlink_to(app / "main-real.cjs")
        assert transpiled()[1] >= 1
    finally:
        process.kill()
        process.wait()
        process.stdout.close()


def test_deeply_nested_functions_are_hashed_innermost_first_within_a_budget():
    """3,000 nested arrows would hash 40 MB for a 27 kB script: the innermost
    are hashed, the outer ones left unplaced once the budget is spent."""
    depth = 3000
    copy = "(a) => {" * depth + "}" * depth
    script = BunScript("/app/nested.js", copy, copy)
    hashed = script.functions_hashed()
    starts = {start for found in hashed.values() for start in found}
    innermost = (depth - 1) * len("(a) => {")
    assert innermost in starts and 0 not in starts and len(starts) < depth / 2


def test_a_process_called_bun_is_never_run_by_jitprof(tmp_path):
    """A program called bun that is not one (a shell renamed): jitprof once
    ran /proc/PID/exe to transpile, so any user had root run their program.
    Now jitprof's own bun reads its command line; the impostor runs nothing
    more, and its names stay as they were."""
    impostor = tmp_path / "bun"
    shutil.copy("/bin/sh", impostor)
    ran = tmp_path / "ran"
    # Run again with transpile.js's arguments, the impostor would leave a mark.
    script = f'case "$0 $*" in *transpile*) touch {ran};; esac; echo ready; sleep 30'
    process = subprocess.Popen([str(impostor), "-c", script, "app.js"], cwd=tmp_path, stdout=subprocess.PIPE, process_group=0)
    try:
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        functions = BunFunctions()
        assert functions.place(process.pid, f"JSC-FTL: spin#{SPIN_HASH}") is None
        assert not ran.exists()
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        process.stdout.close()


def test_only_a_bun_of_root_s_alone_is_run():
    """jitprof's own bun must be root's all the way down, with no link."""
    base = Path(tempfile.mkdtemp(dir=ROOT, prefix=".trusted-test-"))
    try:
        if trusted_program(base) != f"{base} is not a regular file":
            pytest.skip(f"the checkout is not root's alone: {trusted_program(base)}")
        program = base / "bun"
        shutil.copy("/bin/true", program)
        assert trusted_program(program) == ""
        program.chmod(0o757)
        assert trusted_program(program) == f"{program} is not root's alone"
        program.chmod(0o755)
        base.chmod(0o777)
        assert trusted_program(program) == f"{base} is not root's alone"
        base.chmod(0o755)
        (base / "link").symlink_to(program)
        assert trusted_program(base / "link") == f"{base / 'link'} is a symbolic link"
        os.chown(program, 65534, 65534)
        assert trusted_program(program) == f"{program} is not root's alone"
        os.chown(program, 0, 0)
        base.chmod(0o1777)  # sticky, like /tmp: root's entries stay root's
        assert trusted_program(program) == ""
        os.chown(base, 65534, 65534)
        assert trusted_program(program) == f"{base} is not root's alone"
    finally:
        shutil.rmtree(base)
    if OWN_BUN.exists():
        assert trusted_program(OWN_BUN) == ""


def test_the_transpiler_s_answer_is_held_to_its_caps_here():
    """Whatever wrote the answer, jitprof keeps at most 16 MiB of texts,
    absolute paths of sane length, and says what it left."""
    from profiler.jit.bun import transpiler

    big = "a" * (transpiler.MAX_SCRIPT_BYTES // 2 - 10)
    answer = {"scripts": [{"path": f"/s{index}.js", "original": big, "runtime": ""} for index in range(3)]}
    answer["scripts"].insert(0, {"path": "relative.js", "original": "", "runtime": ""})
    answer["scripts"].insert(0, {"path": "/x.js", "original": 1, "runtime": ""})
    scripts, problem = checked_answer(json.dumps(answer).encode())
    assert [script.path for script in scripts] == ["/s0.js", "/s1.js"] and "over 16 MiB" in problem
    assert checked_answer(b"[1, 2") == ([], "its scripts' transpiler answered nonsense")
    assert checked_answer(b'{"scripts": 3}') == ([], "its scripts' transpiler answered nonsense")


@pytest.mark.skipif(not BUN.exists(), reason="bun is installed by make test's set-up")
def test_the_transpiler_finds_what_bun_would_run(tmp_path):
    """An entry point without its extension (`bun run main`), what it imports,
    and `bun test`'s test files (not a package's), as bun finds them."""
    for name in ("main.cjs", "spin.ts", "fib.test.ts"):
        shutil.copy(APP / name, tmp_path / name)
    (tmp_path / "node_modules" / "lib").mkdir(parents=True)
    (tmp_path / "node_modules" / "lib" / "its.test.ts").write_text("export const x = 1;\n")

    def found(*arguments: str) -> list[str]:
        run = run_as_user(
            [str(BUN), str(TRANSPILER), "find", "10", str(1 << 20), str(tmp_path), *arguments],
            os.geteuid(),
            os.getegid(),
            1 << 24,
            30,
        )
        assert run.returncode == 0, run
        return sorted(Path(script["path"]).name for script in json.loads(run.output)["scripts"])

    assert found("run", "main", "3") == ["main.cjs", "spin.ts"]
    assert found("test") == ["fib.test.ts"]
    assert found("--smol", "./spin.ts", "data.json") == ["spin.ts"]


# Texts a target can write into a script (a comment is enough) that made the
# old patterns backtrack: each costs its length squared to a backtracking
# pattern (72 kB of `a$` took 82 s, the GIL held, every thread stopped).
CRAFTED = {
    "identifier characters": "a$" * 36_000,
    "type parameters never closed": "a <b " * 14_400,
    "method keywords": "static " * 10_000,
    "assignments never closed": "x=(" * 24_000,
    "the keyword alone": "function " * 8_000,
    "names and colons": "a:" * 36_000,
}


@pytest.mark.parametrize("crafted", list(CRAFTED))
def test_definitions_are_found_in_time_linear_in_the_text(crafted):
    """Each crafted text costs at most ten times what real code of the same
    size costs, measured here (a backtracking pattern: thousands of times)."""
    real = (APP / "spin.ts").read_text() + (APP / "main.cjs").read_text()
    text = CRAFTED[crafted]
    real = (real * (len(text) // len(real) + 1))[: len(text)]

    def cost(sample: str) -> float:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            definitions(sample)
            times.append(time.perf_counter() - started)
        return min(times)

    assert cost(text) < 10 * cost(real) + 0.005, crafted


def test_a_script_of_newlines_is_indexed_in_memory_far_under_its_size():
    """A script of newlines kept one Python int a line (39 times its size;
    over 600 MB for 16 MiB); its lines are now found from a count every
    64 KiB, and what indexing it takes at its peak is a few copies of it."""
    text = "\n" * (4 << 20) + "function f(a) {}\n"
    tracemalloc.start()
    try:
        script = BunScript("/app/lines.js", text, text)
        index = script.index()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * len(text), peak / len(text)
    assert index.lines.line_and_column(len(text) - len("(a) {}\n")) == (4 * 2**20 + 1, len("function f") + 1)
    assert script.line_of("f", len(text) - len("(a) {}\n")) == (4 * 2**20 + 1, len("function f") + 1)


def test_a_process_whose_functions_are_mostly_not_in_the_scripts_read_is_told():
    """prettier loads its code by paths made at run time: its functions are
    in none of the scripts its command line names, and the run says so."""
    scripts = _ProcessScripts()
    scripts.places = {f"f{index}#AAAAAA": None for index in range(30)}
    assert "0 of its 30 JavaScript functions" in scripts.unplaced_problem()
    place = FunctionPlace("/app/a.js", 3, 1)
    scripts.places = {f"f{index}#AAAAAA": place if index % 3 else None for index in range(30)}
    assert scripts.unplaced_problem() == ""  # most placed
    scripts.places = {"f#AAAAAA": None}
    assert scripts.unplaced_problem() == ""  # too few to judge
