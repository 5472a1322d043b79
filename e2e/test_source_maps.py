"""Source maps on real builds: a TypeScript program compiled by tsc with
--sourceMap, and bundled and minified by esbuild with an external map and
with an inline one, profiled spawned and attached: its frames carry the
.ts files, lines and the names the author wrote; `report` shows a saved
run the same way, and --no-source-maps shows the code that ran."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from e2e.conftest import read_folded, wait_for_cpu
from e2e.test_node import node_binary
from e2e.test_v8_heap import flagless

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "fixtures" / "ts"
APPS = REPO / ".nodes" / "apps" / "node_modules"
TSC = APPS / "typescript" / "bin" / "tsc"
ESBUILD = APPS / "@esbuild" / "linux-x64" / "bin" / "esbuild"
GENERATED = ("main.js:", "shapes.js:", "main.min.js:")
FUNCTIONS = {
    "main.ts": ("measureShapes", "sortRecords", "runFor"),
    "shapes.ts": ("makeRegularPolygon", "perimeter", "distanceBetween"),
}


def function_lines() -> dict[str, str]:
    """Each function's shown name, `runFor main.ts:19`, from the sources."""
    shown = {}
    for file, functions in FUNCTIONS.items():
        lines = (SOURCE / "src" / file).read_text().splitlines()
        for function in functions:
            begins = re.compile(rf"(function {function}\(|const {function} =|^  {function}\()")
            number = next(index for index, text in enumerate(lines, 1) if begins.search(text))
            shown[function] = f"{function} {file}:{number}"
    return shown


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, Path]:  # noqa: ANN001
    if not TSC.exists() or not ESBUILD.exists():
        pytest.skip("typescript and esbuild are not installed (make setup installs them)")
    directory = tmp_path_factory.mktemp("ts")
    shutil.copytree(SOURCE / "src", directory / "src")
    shutil.copy(SOURCE / "tsconfig.json", directory)
    subprocess.run(["/usr/bin/node", str(TSC), "-p", str(directory)], check=True, timeout=120)
    entry = str(directory / "src" / "main.ts")
    common = ["--bundle", "--minify", "--platform=node"]
    external, inline = directory / "build" / "external" / "app.min.js", directory / "build" / "inline" / "main.min.js"
    subprocess.run([str(ESBUILD), entry, *common, "--sourcemap", f"--outfile={external}"], check=True, timeout=60)
    subprocess.run([str(ESBUILD), entry, *common, "--sourcemap=inline", f"--outfile={inline}"], check=True, timeout=60)
    assert "sourceMappingURL=data:" in inline.read_text()
    return {"tsc": directory / "build" / "tsc" / "main.js", "esbuild external": external, "esbuild inline": inline}


def app_frames(frames: list[str]) -> list[str]:
    return [frame for frame in frames if ".ts:" in frame or any(name in frame for name in GENERATED)]


def assert_as_written(folded: Path) -> None:
    lines = read_folded(folded)
    in_app = [line for line in lines if app_frames(line.frames)]
    written = sum(line.count for line in in_app if all(".ts:" in frame for frame in app_frames(line.frames)))
    total = sum(line.count for line in in_app)
    assert total > 200, total
    assert written / total >= 0.95, [line for line in in_app if not all(".ts:" in f for f in app_frames(line.frames))][:5]
    names = {frame.rsplit("_[", 1)[0] for line in in_app for frame in app_frames(line.frames)}
    expected = function_lines()
    hot = {expected["runFor"], expected["measureShapes"], expected["sortRecords"], expected["makeRegularPolygon"]}
    assert hot <= names, sorted(names)


def assert_cpuprofile_as_written(path: Path, sources: Path) -> None:
    nodes = json.loads(path.read_text())["nodes"]
    frames = {node["callFrame"]["functionName"]: node["callFrame"] for node in nodes}
    run_for = frames["runFor"]
    assert run_for["url"] == (sources / "main.ts").as_uri()
    number = int(function_lines()["runFor"].rsplit(":", 1)[1])
    text = (sources / "main.ts").read_text().splitlines()[number - 1]
    assert run_for["lineNumber"] == number - 1
    # V8 begins a function at its "(": as written, there or at its name (a segment may start there).
    assert text.index("runFor") <= run_for["columnNumber"] <= text.index("("), text


@pytest.mark.parametrize("build", ["tsc", "esbuild external", "esbuild inline"])
def test_spawned_builds_are_shown_as_written(jitprof, tmp_path, builds, build):
    script = builds[build]
    run = jitprof("-F", "499", "-o", "out.folded", "-o", "out.jitprof", "-o", "out.cpuprofile", "--", "node", str(script), "3")
    assert run.returncode == 0, run.stderr
    assert "source map" not in run.stderr, run.stderr
    assert_as_written(tmp_path / "out.folded")
    assert_cpuprofile_as_written(tmp_path / "out.cpuprofile", script.parent.parent.parent / "src")
    # The saved run: shown as written by report, as generated with --no-source-maps.
    report = jitprof("report", "out.jitprof", "-o", "report.folded")
    assert report.returncode == 0, report.stderr
    assert_as_written(tmp_path / "report.folded")
    generated = jitprof("report", "out.jitprof", "--no-source-maps")
    assert generated.returncode == 0 and ".ts:" not in generated.stdout
    assert script.name + ":" in generated.stdout


def test_attached_bundle_is_shown_as_written_and_js_only_too(jitprof, tmp_path, background, builds):
    script = builds["esbuild external"]
    # Long enough for both attaches on any CPU (jitprof starting twice at half speed took more
    # than the 8 s it ran for); killed when they are done.
    target = flagless(background, node_binary("20"), str(script), "120", cwd=tmp_path)
    wait_for_cpu(target.pid, 0.8)
    run = jitprof("-F", "499", "--pid", str(target.pid), "-d", "3", "-o", "out.folded")
    assert run.returncode == 0, run.stderr
    assert_as_written(tmp_path / "out.folded")
    js_only = jitprof("-F", "499", "--pid", str(target.pid), "-d", "2", "--js-only", "-o", "js.folded")
    assert js_only.returncode == 0, js_only.stderr
    assert_as_written(tmp_path / "js.folded")
    target.kill()


def test_no_source_maps_shows_the_code_that_ran(jitprof, tmp_path, builds):
    run = jitprof("-F", "499", "--no-source-maps", "-o", "out.folded", "--", "node", str(builds["esbuild inline"]), "2")
    assert run.returncode == 0, run.stderr
    text = (tmp_path / "out.folded").read_text()
    assert ".ts:" not in text and "main.min.js:1" in text


def test_a_broken_map_skips_the_map_with_one_line_and_keeps_the_run(jitprof, tmp_path, builds):
    script = tmp_path / "broken.min.js"
    shutil.copy(builds["esbuild external"], script)
    script.write_text(script.read_text().replace("app.min.js.map", "broken.min.js.map"))
    (tmp_path / "broken.min.js.map").write_text('{"version": 3, "sources": ["a.ts"], "names": [], "mappings": "!!"}')
    run = jitprof("-F", "499", "-o", "out.folded", "--", "node", str(script), "2")
    assert run.returncode == 0, run.stderr
    problems = [line for line in run.stderr.splitlines() if "source map" in line]
    assert problems == ["jitprof: warning: the source map of broken.min.js is skipped: its mappings are malformed"], run.stderr
    assert "broken.min.js:1" in (tmp_path / "out.folded").read_text()
