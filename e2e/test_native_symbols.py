"""Native frames as `perf report --inline` and `addr2line -i` show them:
inlined functions as frames of their own with their lines, in every format
and in the tools that read them; C++ and Rust names demangled. (PLT stubs:
tests/native/test_blazesym.py and tests/symbolize; a stripped program's
entry: e2e/test_dwarf.py's compressors.)"""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter

import pytest

from e2e.conftest import ROOT, children_cpu_seconds, has_chain, read_folded, total
from profiler.output.report import load
from tests.output.test_formats import TOOLS

SOURCE = ROOT / "fixtures" / "inlined.c"
CHAIN = ["main", "crunch", "mix_[i]", "rotate_[i]"]


def marker_line(marker: str) -> int:
    for number, text in enumerate(SOURCE.read_text().splitlines(), 1):
        if marker in text:
            return number
    raise AssertionError(marker)


def share(lines, predicate) -> float:
    return sum(line.count for line in lines if predicate(line.frames)) / max(total(lines), 1)


def addr2line_rotate_lines(binary) -> set[int]:
    """The lines addr2line -i gives rotate for every address of crunch."""
    symbols = subprocess.run(["nm", "-S", str(binary)], capture_output=True, text=True, check=True).stdout
    start, size = next(
        (int(fields[0], 16), int(fields[1], 16)) for fields in map(str.split, symbols.splitlines()) if fields[-1] == "crunch"
    )
    addresses = [f"{address:#x}" for address in range(start, start + size)]
    text = subprocess.run(
        ["addr2line", "-f", "-i", "-e", str(binary), *addresses], capture_output=True, text=True, check=True
    ).stdout
    found = set()
    lines = text.splitlines()
    for name, place in zip(lines[::2], lines[1::2], strict=True):
        if name == "rotate":
            found.add(int(place.split(":")[1].split()[0]))
    return found


def test_inlined_functions_are_frames_with_their_lines(jitprof, fixtures_built, tmp_path):
    binary = fixtures_built / "inlined"
    outputs = ["out.folded", "out.jitprof", "callgrind.out.inlined", "out.pb.gz", "out.speedscope.json"]
    arguments = ["-F", "499"]
    for name in outputs:
        arguments += ["-o", name]
    run = jitprof(*arguments, "--", str(binary), "2")
    assert run.returncode == 0, run.stderr
    lines = read_folded(tmp_path / "out.folded")
    assert total(lines) >= 500
    assert share(lines, lambda frames: has_chain(frames, CHAIN) and frames[-1] == "rotate_[i]") >= 0.95, lines

    # The leaf's line: where rotate spends its time, as addr2line -i says.
    profile = load(tmp_path / "out.jitprof")
    rotate_lines: Counter[int] = Counter()
    for sample in profile.samples:
        leaf = profile.frames[sample.frame_ids[-1]]
        if leaf.name == "rotate" and leaf.inlined:
            rotate_lines[leaf.line] += 1
            assert leaf.file == str(SOURCE) and leaf.line_exact
    assert set(rotate_lines) <= addr2line_rotate_lines(binary)
    assert rotate_lines.most_common(1)[0][0] == marker_line("ROTATE_LINE")
    crunch = {profile.frames[sample.frame_ids[-3]].line for sample in profile.samples if len(sample.frame_ids) >= 3}
    assert marker_line("CRUNCH_LINE") in crunch  # crunch's frame is at the call of mix

    # callgrind_annotate: the inlined function by name and file, its line annotated.
    annotated = subprocess.run(
        ["callgrind_annotate", str(tmp_path / "callgrind.out.inlined")], capture_output=True, text=True, check=True
    ).stdout
    # Nearly all samples are rotate's: 90 % and up (100.0 % when no sample fell outside it).
    function_row = re.search(r"\(\s*(\d+\.\d+)%\)\s+\S*fixtures/inlined\.c:rotate \[inlined\]", annotated)
    assert function_row and float(function_row.group(1)) >= 90, annotated
    hot = next(line for line in annotated.splitlines() if "ROTATE_LINE" in line)
    hot_row = re.match(r"\s*[\d,]+ \(\s*(\d+\.\d+)%\)", hot)
    assert hot_row and float(hot_row.group(1)) >= 90, hot

    # pprof: one location with three lines, innermost first.
    reader = ROOT / "tests" / "readers" / "read_pprof.js"
    decoded = json.loads(
        subprocess.run(
            ["node", str(reader), str(TOOLS / "pprof-format"), str(tmp_path / "out.pb.gz")], capture_output=True, check=True
        ).stdout
    )
    heaviest = max(decoded["samples"], key=lambda sample: sample["values"][0])
    location = heaviest["stack"][0]
    assert [line["name"] for line in location] == ["rotate", "mix", "crunch"]
    assert all(line["file"] == str(SOURCE) for line in location)
    assert location[0]["line"] == marker_line("ROTATE_LINE") and location[1]["line"] == marker_line("MIX_LINE")

    # speedscope: file and the function's line, where it is declared for an inlined one.
    frames = json.loads((tmp_path / "out.speedscope.json").read_text())["shared"]["frames"]
    by_name = {frame["name"]: frame for frame in frames}
    assert by_name["rotate [inlined]"]["file"] == str(SOURCE)
    assert by_name["crunch"]["file"] == str(SOURCE) and by_name["crunch"]["line"] > 0
    source = SOURCE.read_text().splitlines()
    for name in ("rotate", "mix"):
        declared = next(number for number, text in enumerate(source, 1) if f" {name}(uint64_t" in text)
        assert by_name[f"{name} [inlined]"]["line"] == declared, by_name[f"{name} [inlined]"]


def test_cpp_and_rust_names_demangled(jitprof, fixtures_built, tmp_path):
    run = jitprof("-F", "499", "-o", "cpp.folded", "--", str(fixtures_built / "templates"), "1")
    assert run.returncode == 0, run.stderr
    cpp = read_folded(tmp_path / "cpp.folded")
    wanted = "shapes::Accumulator<unsigned long>::fold(std::vector<unsigned long, std::allocator<unsigned long> > const&) [clone .isra.0]"
    assert (
        share(cpp, lambda frames: has_chain(frames, ["main", "unsigned long shapes::run_fold<unsigned long>(int)", wanted]))
        >= 0.9
    ), cpp

    run = jitprof("-F", "499", "-o", "rust.folded", "--", str(fixtures_built / "rust_work"), "1")
    assert run.returncode == 0, run.stderr
    rust = read_folded(tmp_path / "rust.folded")
    # rustc's executables start their text segment in the page the one before
    # ends in: the walk needs the right load bias to get past the leaf.
    chain = ["_start", "__libc_start_main_impl", "__libc_start_call_main", "main", "std::rt::lang_start_internal"]
    assert share(rust, lambda frames: has_chain(frames, chain)) >= 0.95, rust
    chain = ["rust_work::main", "rust_work::engine::drive", "<rust_work::engine::Mixer as rust_work::engine::Stepper>::step"]
    assert share(rust, lambda frames: has_chain(frames, chain)) >= 0.9, rust
    # std is built with v0 mangling, the program with the legacy one: both read as Rust.
    assert not any(re.search(r"\$LT\$|::h[0-9a-f]{16}$|^_R", frame) for line in rust for frame in line.frames)


ESBUILD = ROOT / ".nodes" / "apps" / "node_modules" / "@esbuild" / "linux-x64" / "bin" / "esbuild"
TYPESCRIPT = ROOT / ".nodes" / "apps" / "node_modules" / "typescript" / "lib" / "typescript.js"


@pytest.mark.skipif(not ESBUILD.exists() or not TYPESCRIPT.exists(), reason="esbuild and typescript are installed by make setup")
def test_stripped_go_program_named_from_gopclntab(jitprof, tmp_path):
    """esbuild from npm: a stripped Go binary, minifying TypeScript's compiler."""
    assert ".symtab" not in subprocess.run(["readelf", "-S", str(ESBUILD)], capture_output=True, text=True).stdout
    loop = f'end=$(($(date +%s) + 3)); while [ "$(date +%s)" -lt "$end" ]; do "{ESBUILD}" --minify --log-level=error --outfile=/dev/null "{TYPESCRIPT}" || exit 1; done; times'
    run = jitprof("-F", "499", "-o", "go.folded", "-o", "go.speedscope.json", "--", "sh", "-c", loop)
    assert run.returncode == 0, run.stderr
    lines = [line for line in read_folded(tmp_path / "go.folded") if line.frames[0] == "esbuild"]
    cpu_s = children_cpu_seconds(run.stdout)  # esbuild's threads (and date's moments)
    assert total(lines) >= 0.5 * 499 * cpu_s, (total(lines), cpu_s)
    unnamed = share(lines, lambda frames: any(frame.startswith(("esbuild+0x", "[unknown]")) for frame in frames[1:]))
    assert unnamed <= 0.10, lines
    assert share(lines, lambda frames: "github.com/evanw/esbuild/internal/js_parser.Parse" in frames) >= 0.2
    assert share(lines, lambda frames: frames[1] == "runtime.goexit" or frames[1] == "_rt0_amd64_linux") >= 0.9
    # The calls Go inlined, from the table's inline tree, marked as inlined.
    assert share(lines, lambda frames: any(frame.endswith("_[i]") for frame in frames)) >= 0.3
    # Every esbuild function at its file and line.
    frames = json.loads((tmp_path / "go.speedscope.json").read_text())["shared"]["frames"]
    esbuild_frames = [frame for frame in frames if frame["name"].startswith("github.com/evanw/esbuild/")]
    assert len(esbuild_frames) >= 50
    with_lines = [frame for frame in esbuild_frames if frame.get("file", "").endswith(".go") and frame.get("line", 0) > 0]
    assert len(with_lines) / len(esbuild_frames) >= 0.95
