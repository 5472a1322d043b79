"""Every output format of a real Node run, opened by the tools people use:
speedscope (schema and viewer), pprof-format, callgrind_annotate, Chrome's
cpuprofile invariants, headless Chromium; `report` round trip and `diff`."""

from __future__ import annotations

import contextlib
import functools
import html
import http.server
import json
import re
import shutil
import subprocess
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.conftest import ROOT
from e2e.test_node import JS
from tests.output.test_formats import SPEEDSCOPE_SCHEMA, TOOLS

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ALL_OUTPUTS = [
    "run.jitprof",
    "run.folded",
    "run.svg",
    "run.html",
    "run.speedscope.json",
    "run.cpuprofile",
    "run.pb.gz",
    "callgrind.out.run",
]


@pytest.fixture(scope="module")
def node_run(jitprof_module, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("formats")
    arguments = ["-F", "499"]
    for name in ALL_OUTPUTS:
        arguments += ["-o", str(workdir / name)]
    run = jitprof_module(*arguments, "--", "node", str(JS / "inline_chain.js"), "3")
    assert run.returncode == 0, run.stderr
    return workdir


def test_every_format_written(node_run):
    for name in ALL_OUTPUTS:
        assert (node_run / name).stat().st_size > 1000, name


def test_report_round_trip_is_byte_identical(jitprof, node_run, tmp_path):
    run = jitprof(
        "report", str(node_run / "run.jitprof"), "-o", str(tmp_path / "again.folded"), "-o", str(tmp_path / "again.svg")
    )
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "again.folded").read_bytes() == (node_run / "run.folded").read_bytes()
    assert (tmp_path / "again.svg").read_bytes() == (node_run / "run.svg").read_bytes()
    printed = jitprof("report", str(node_run / "run.jitprof"), "--since", "1", "--until", "2")
    assert printed.returncode == 0, printed.stderr
    counted = sum(int(line.rsplit(" ", 1)[1]) for line in printed.stdout.splitlines())
    whole = sum(int(line.rsplit(" ", 1)[1]) for line in (node_run / "run.folded").read_text().splitlines())
    assert 0.15 * whole <= counted <= 0.5 * whole, (counted, whole)  # one second of a 3 s run


def test_report_errors_are_one_line(jitprof, tmp_path):
    missing = jitprof("report", str(tmp_path / "nope.jitprof"))
    assert missing.returncode == 1 and missing.stderr.startswith("jitprof: error: no such file")
    (tmp_path / "bad.jitprof").write_text("hello")
    bad = jitprof("report", str(tmp_path / "bad.jitprof"))
    assert bad.returncode == 1 and "not a readable .jitprof file" in bad.stderr and "Traceback" not in bad.stderr


def test_speedscope_valid_with_inlined_frames(node_run):
    jsonschema = pytest.importorskip("jsonschema")
    document = json.loads((node_run / "run.speedscope.json").read_text())
    jsonschema.validate(document, json.loads(SPEEDSCOPE_SCHEMA.read_text()))
    names = {frame["name"] for frame in document["shared"]["frames"]}
    assert {"leaf inline_chain.js:7 [inlined]", "mid inline_chain.js:15 [inlined]"} <= names


def test_pprof_has_inline_locations(node_run):
    reader = ROOT / "tests" / "readers" / "read_pprof.js"
    completed = subprocess.run(
        ["node", str(reader), str(TOOLS / "pprof-format"), str(node_run / "run.pb.gz")], capture_output=True, check=True
    )
    decoded = json.loads(completed.stdout)
    hot = max(decoded["samples"], key=lambda sample: sample["values"][0])
    names = [line["name"] for line in hot["stack"][0]]
    assert names[:3] == ["leaf inline_chain.js:7", "mid inline_chain.js:15", "top inline_chain.js:19"]
    assert hot["stack"][0][0]["file"].endswith("fixtures/js/inline_chain.js") and hot["stack"][0][0]["line"] == 10


def test_cpuprofile_line_ticks_on_the_hot_line(node_run):
    document = json.loads((node_run / "run.cpuprofile").read_text())
    ticks: Counter[int] = Counter()
    for node in document["nodes"]:
        if node["callFrame"]["functionName"] == "leaf" and node["callFrame"]["url"].endswith("/inline_chain.js"):
            for entry in node.get("positionTicks", []):
                ticks[entry["line"]] += entry["ticks"]
    assert ticks.most_common(1)[0][0] == 10  # the HOT line
    assert sum(document["timeDeltas"]) == document["endTime"] - document["startTime"]
    assert len(document["samples"]) == len(document["timeDeltas"])


def test_callgrind_annotate_shows_js_by_name_and_file(node_run):
    text = subprocess.run(
        ["callgrind_annotate", str(node_run / "callgrind.out.run")], capture_output=True, text=True, check=True
    ).stdout
    hot = re.search(r"([\d,]+) \(\s*([\d.]+)%\)\s+(\S*fixtures/js/inline_chain\.js):leaf inline_chain\.js:7 \[inlined\]", text)
    assert hot is not None, text[:3000]
    assert float(hot.group(2)) > 50


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def chromium(*arguments: str, timeout: float = 90) -> str:
    with tempfile.TemporaryDirectory() as profile_dir:
        completed = subprocess.run(
            ["chromium", *CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}", *arguments],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    return completed.stdout


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is installed by make setup")
def test_svg_and_speedscope_render_in_chromium(node_run, tmp_path):
    dom = chromium("--dump-dom", f"file://{node_run / 'run.svg'}")
    assert "leaf inline_chain.js:7" in dom and "inlined" in dom
    chromium("--window-size=1200,900", f"--screenshot={tmp_path / 'svg.png'}", f"file://{node_run / 'run.svg'}")
    assert (tmp_path / "svg.png").stat().st_size > 10_000
    # The speedscope viewer, served from localhost with the profile beside it.
    site = tmp_path / "site"
    shutil.copytree(TOOLS / "speedscope" / "dist" / "release", site)
    shutil.copy(node_run / "run.speedscope.json", site / "profile.json")
    with serving(site) as origin:
        base = f"{origin}/index.html#profileURL=profile.json"
        dom = chromium("--virtual-time-budget=20000", "--dump-dom", base + "&view=sandwich")
        assert "leaf inline_chain.js:7 [inlined]" in dom  # the sandwich table's top row: DOM, not canvas
        chromium("--virtual-time-budget=10000", "--window-size=1400,900", f"--screenshot={tmp_path / 'speedscope.png'}", base)
        assert (tmp_path / "speedscope.png").stat().st_size > 10_000
        # The .cpuprofile in the same viewer (it reads Chrome's format): V8's names, not jitprof's.
        shutil.copy(node_run / "run.cpuprofile", site / "run.cpuprofile")
        base = f"{origin}/index.html#profileURL=run.cpuprofile"
        dom = chromium("--virtual-time-budget=20000", "--dump-dom", base + "&view=sandwich")
        assert ">leaf<" in dom and "inline_chain.js:7" not in dom.split(">leaf<")[1][:40]


CPUPRO = ROOT / ".nodes" / "cpupro" / "node_modules" / "cpupro"
# CPUpro draws into shadow roots, which --dump-dom leaves out: this script,
# added to its page, copies what the page shows (tables, not the canvas) into
# the document, again and again until the dump.
_SHADOW_TEXT = """<script>
setInterval(function copyShownText() {
  const texts = [];
  (function walk(node) {
    if (node.shadowRoot) {
      for (const child of node.shadowRoot.children) if (child.tagName !== "STYLE") texts.push(child.innerText || "");
      walk(node.shadowRoot);
    }
    for (const child of node.children || []) walk(child);
  })(document.documentElement);
  let out = document.getElementById("shown-text");
  if (!out) { out = document.createElement("pre"); out.id = "shown-text"; document.body.appendChild(out); }
  out.textContent = texts.join("\\n");
}, 1000);
</script>"""


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is installed by make test's set-up")
def test_cpupro_shows_the_functions_of_our_cpuprofile_with_the_inlined_one(node_run, tmp_path):
    """CPUpro 0.7 (from npm), the analyser of V8 profiles, opens our
    .cpuprofile: the run is node's, inline_chain.js is the hot module, and
    leaf (inlined by TurboFan into top, its own node in our profile) is the
    hot call frame. CPUpro's page loads its data from model.data beside it
    (0.7.0's page ignores the data its CLI appends), so it is served so."""
    if not (CPUPRO / "build" / "report.html").exists():
        pytest.skip("CPUpro is installed by make test's set-up (npm)")
    site = tmp_path / "cpupro"
    site.mkdir()
    (site / "index.html").write_text((CPUPRO / "build" / "report.html").read_text() + _SHADOW_TEXT)
    shutil.copy(node_run / "run.cpuprofile", site / "model.data")
    with serving(site) as origin:
        dom = chromium("--virtual-time-budget=60000", "--window-size=1400,1000", "--dump-dom", f"{origin}/index.html")
    found = re.search(r'<pre id="shown-text">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    shown = html.unescape(found.group(1))
    assert re.search(r"Runtime\s+Node\.js", shown), shown[:2000]
    assert re.search(r"Samples\s+[1-9]", shown), shown[:2000]
    # Call frames by self time: (self ms, self %, total ms, total %, name).
    frames = re.findall(r"([\d.]+)\s+([\d.]+)%\s+([\d.]+)\s+([\d.]+)%\s+([^\n]+)\n", shown)
    by_name = {name.strip(): float(self_share) for _self, self_share, _total, _share, name in frames}
    assert by_name.get("leaf", 0) >= 50, frames[:20]
    modules = [name for name in by_name if name.endswith("inline_chain.js")]
    assert modules and by_name[modules[0]] >= 50, frames[:20]


@contextlib.contextmanager
def serving(directory: Path) -> Iterator[str]:
    """directory served on 127.0.0.1 for the time of the block: its origin."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def record_base_and_new(jitprof) -> None:  # noqa: ANN001
    """base.jitprof and new.jitprof of diff_work.js, g's work doubled in new."""
    for name, factor in (("base", "1"), ("new", "2")):
        run = jitprof("-F", "499", "-o", f"{name}.jitprof", "--", "node", str(JS / "diff_work.js"), "200", factor)
        assert run.returncode == 0, run.stderr


def test_diff_shows_the_doubled_function(jitprof, tmp_path):
    record_base_and_new(jitprof)
    printed = jitprof("diff", "base.jitprof", "new.jitprof", "--format", "folded")
    assert printed.returncode == 0, printed.stderr
    before: Counter[str] = Counter()
    after: Counter[str] = Counter()
    for line in printed.stdout.splitlines():
        stack, old, new = line.rsplit(" ", 2)
        names = {frame.split(" ", 1)[0] for frame in stack.split(";")}
        for function in ("f", "g", "h"):
            if function in names:
                before[function] += int(old)
                after[function] += int(new)
    assert 1.6 <= after["g"] / before["g"] <= 2.4, (before, after)
    for level in ("f", "h"):
        assert 0.8 <= after[level] / before[level] <= 1.2, (level, before, after)
    drawn = jitprof("diff", "base.jitprof", "new.jitprof", "-o", "diff.svg")
    assert drawn.returncode == 0, drawn.stderr
    titles = re.findall(r"<title>([^<]*)</title><rect[^>]*fill=\"([^\"]+)\"", (tmp_path / "diff.svg").read_text())

    def boxes(name: str) -> list[tuple[int, float, str]]:
        """(new samples, change %, fill) of each box of a function."""
        found = []
        for title, fill in titles:
            match = re.search(r"base ([\d,]+) → new ([\d,]+) samples, ([+-][\d.]+|\+inf)%", title)
            if title.startswith(name + " diff_work.js") and match:
                found.append((int(match.group(2).replace(",", "")), float(match.group(3)), fill))
        return sorted(found, reverse=True)

    grown = boxes("g")
    assert grown and grown[0][1] > 60 and grown[0][2].startswith("rgb(255,"), grown  # g's main box: red, grew
    level = boxes("f")
    assert level and abs(level[0][1]) < 20, level  # f's main box: level


def test_cpuprofile_reads_like_one_node_wrote(jitprof, tmp_path):
    """Against `node --cpu-prof` of the same program and node: the same keys,
    the same kinds of values, the same names, scripts and lines."""
    run = jitprof("-o", "run.cpuprofile", "--", "node", str(JS / "chain.js"), "2")
    assert run.returncode == 0, run.stderr
    subprocess.run(
        ["node", "--cpu-prof", "--cpu-prof-dir", str(tmp_path / "v8"), str(JS / "chain.js"), "1"], check=True, capture_output=True
    )
    ours = json.loads((tmp_path / "run.cpuprofile").read_text())
    theirs = json.loads(next((tmp_path / "v8").glob("*.cpuprofile")).read_text())
    assert set(ours) == set(theirs)
    for document in (ours, theirs):
        for node in document["nodes"]:
            assert set(node) <= {"id", "callFrame", "hitCount", "children", "positionTicks"}
            assert set(node["callFrame"]) == {"functionName", "scriptId", "url", "lineNumber", "columnNumber"}
            assert isinstance(node["callFrame"]["scriptId"], str) and isinstance(node["callFrame"]["lineNumber"], int)

    def functions(document):
        return {
            (node["callFrame"]["functionName"], node["callFrame"]["url"], node["callFrame"]["lineNumber"])
            for node in document["nodes"]
            if node["callFrame"]["url"].endswith("/chain.js")
        }

    chain = {name for name, _url, _line in functions(theirs)} & {"main", "outer", "middle", "inner", ""}
    assert chain == {"main", "outer", "middle", "inner", ""}
    wanted = {entry for entry in functions(theirs) if entry[0] in chain}
    assert wanted <= functions(ours), sorted(wanted - functions(ours))
