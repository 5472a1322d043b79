"""report.html opened in headless Chromium, as a person would look at it:
the hot functions in the table, a search that finds one, a screenshot with
the flame graph drawn, and no request leaving the page (Chromium's traffic
goes through a proxy on 127.0.0.1 that records whatever reaches it)."""

from __future__ import annotations

import html
import random
import re
import shutil
import socket
import threading
from pathlib import Path

import pytest

from e2e.conftest import ROOT
from e2e.test_formats import chromium, record_base_and_new
from e2e.test_node import JS, start_node
from profiler.kernel.events import WalkEnd
from profiler.model.profile import Frame, FrameKind, Profile, RunInfo, Sample
from profiler.model.raw import write_raw

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is installed by make test's set-up")


# Chromium's own calls home (network time, sign-in), made whatever page it opens.
BROWSER_SERVICES = ("google.com", "googleapis.com", "gstatic.com", "gvt1.com", "googleusercontent.com")


class RequestLog:
    """A listener Chromium is told to use as its proxy: any request the page
    (or the browser) makes arrives here and is recorded, and gets no answer."""

    def __init__(self) -> None:
        self.requests: list[bytes] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def flag(self) -> str:
        return f"--proxy-server=http://127.0.0.1:{self._server.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._server.accept()
            except OSError:
                continue
            with connection:
                connection.settimeout(2)
                try:
                    received = connection.recv(4096)
                except OSError:
                    received = b"(connection)"
                # A connection closed with nothing sent carries no request:
                # Chromium opens one to its proxy ahead of need and closes
                # it as it exits (seen on a CPU at half speed).
                if received:
                    self.requests.append(received.split(b"\r\n", 1)[0])

    def from_pages(self) -> list[bytes]:
        """The requests that are not Chromium's own calls home."""

        def host(request: bytes) -> str:
            target = request.split(b" ")[1].decode(errors="replace") if b" " in request else ""
            return target.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]

        return [
            request
            for request in self.requests
            if not any(host(request) == service or host(request).endswith("." + service) for service in BROWSER_SERVICES)
        ]

    def __enter__(self) -> RequestLog:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._server.close()


def test_the_request_log_sees_a_page_that_calls_out(tmp_path):
    """What the pages' checks stand on: a request a page makes is seen."""
    page = tmp_path / "calls.html"
    page.write_text('<img src="http://tracker.invalid/pixel.png">')
    with RequestLog() as log:
        chromium(log.flag, "--virtual-time-budget=5000", "--dump-dom", f"file://{page}")
    assert any(b"tracker.invalid" in request for request in log.from_pages()), log.requests


def table_rows(dom: str) -> list[str]:
    body = dom.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [re.sub(r"<[^>]+>", " ", row) for row in body.split("</tr>") if "<td" in row]


def boxes_drawn(dom: str) -> int:
    found = re.search(r'id="flame"[^>]*data-boxes="(\d+)"', dom)
    assert found, dom[:2000]
    return int(found.group(1))


def open_page(page: Path, fragment: str, tmp_path: Path) -> tuple[str, Path]:
    with RequestLog() as log:
        dom = chromium(log.flag, "--virtual-time-budget=5000", "--dump-dom", f"file://{page}#{fragment}")
        screenshot = tmp_path / (page.stem + ".png")
        chromium(
            log.flag, "--virtual-time-budget=5000", "--window-size=1400,1000", f"--screenshot={screenshot}", f"file://{page}"
        )
    assert log.from_pages() == [], log.requests  # nothing left the page
    assert 'data-ready="yes"' in dom, dom[-2000:]
    assert screenshot.stat().st_size > 10_000
    return dom, screenshot


@pytest.fixture(scope="module")
def node_run(jitprof_module, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("html")
    run = jitprof_module(
        "-F",
        "499",
        "-o",
        str(workdir / "run.html"),
        "-o",
        str(workdir / "run.jitprof"),
        "--",
        "node",
        str(JS / "inline_chain.js"),
        "3",
    )
    assert run.returncode == 0, run.stderr
    return workdir


def test_a_node_run_s_page_shows_its_hot_functions_and_finds_one(node_run, tmp_path):
    dom, _ = open_page(node_run / "run.html", "search=leaf", tmp_path)
    rows = table_rows(dom)
    assert rows and "leaf inline_chain.js:7" in rows[0] and "inlined" in rows[0], rows[:3]
    share = re.search(r'id="matched">matched: ([\d.]+) %<', dom)
    assert share and float(share.group(1)) >= 50, dom[:3000]
    assert "inline_chain.js 3" in dom and "samples at 499 Hz" in dom
    assert boxes_drawn(dom) >= 5
    # The whole table, unsearched: top and mid are there too, with their files.
    dom, _ = open_page(node_run / "run.html", "", tmp_path)
    text = " ".join(table_rows(dom))
    for function in ("top inline_chain.js:19", "mid inline_chain.js:15", "leaf inline_chain.js:7"):
        assert function in text


def test_report_writes_the_same_page_from_the_saved_profile(jitprof, node_run, tmp_path):
    run = jitprof("report", str(node_run / "run.jitprof"), "-o", str(tmp_path / "again.html"))
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "again.html").read_bytes() == (node_run / "run.html").read_bytes()


def test_the_run_s_warnings_are_on_its_page(jitprof, tmp_path, background):
    """What the run said besides its summary (here: a node attached without
    a perf map and not read from its heap) is in the page's summary, and in
    the page `jitprof report` makes of the saved profile."""
    node = start_node(background, tmp_path)
    run = jitprof("--no-v8-heap", "--pid", str(node.pid), "-d", "1", "-o", "run.html", "-o", "run.jitprof")
    assert run.returncode == 0, run.stderr
    said = [
        line.removeprefix("jitprof: ")
        for line in run.stderr.splitlines()
        if "has no perf map" in line or "hint:" in line or line.startswith("jitprof: note:")
    ]
    assert len(said) >= 2, run.stderr
    again = jitprof("report", "run.jitprof", "-o", "again.html")
    assert again.returncode == 0, again.stderr
    for page in ("run.html", "again.html"):
        dom, _ = open_page(tmp_path / page, "", tmp_path)
        shown = re.search(r'<details id="warnings">(.*?)</details>', dom, re.S)
        assert shown is not None, dom[:3000]
        items = [html.unescape(item) for item in re.findall(r"<li>(.*?)</li>", shown.group(1), re.S)]
        assert items == said, (items, said)


JIT_TIERS = ("interpreted", "baseline", "optimized", "inlined", "JIT (tier unknown)", "runtime builtins, stubs")


def test_an_off_cpu_page_says_what_it_leaves_out_and_starts_at_the_code(jitprof, tmp_path):
    """node's threadpool under --off-cpu: the page says how much idle time
    it leaves out, as the command line does; (queued) and [threadpool] are
    kinds of their own, not JIT code; the table starts where time is spent
    (self time), not at _start and the event loop, and shows JavaScript only
    when asked."""
    data = tmp_path / "data.bin"
    data.write_bytes(bytes(range(256)) * 4096)
    run = jitprof("--off-cpu", "-o", "run.html", "--", "node", str(JS / "threadpool.js"), "2", str(data))
    assert run.returncode == 0, run.stderr
    idle = re.search(r"([\d.]+) s idle left out", run.stderr)
    assert idle, run.stderr
    dom, _ = open_page(tmp_path / "run.html", "", tmp_path)
    # The same time, to the page's tenth of a second (the line has hundredths: rounded twice).
    shown = re.search(r"([\d.]+) s idle left out \(--idle keeps it\)", dom)
    assert shown and abs(float(shown.group(1)) - float(idle.group(1))) <= 0.051, (shown, idle.group(1))
    rows = [" ".join(row.split()) for row in table_rows(dom)]
    assert not any(name in rows[0] for name in ("_start", "uv_run", "node::Start", "(off-CPU)")), rows[:3]
    assert any(row.startswith("(queued) waiting (not code)") for row in rows), rows
    assert any(row.startswith("[threadpool] crypto.pbkdf2 threadpool work") for row in rows), rows
    dom, _ = open_page(tmp_path / "run.html", "code=jit", tmp_path)
    rows = [" ".join(row.split()) for row in table_rows(dom)]
    assert rows and all(any(f" {tier} " in f" {row} " for tier in JIT_TIERS) for row in rows), rows
    assert any(row.startswith("hashPasswords ") for row in rows), rows


def test_a_diff_page_shows_what_grew(jitprof, tmp_path):
    record_base_and_new(jitprof)
    drawn = jitprof("diff", "base.jitprof", "new.jitprof", "-o", "diff.html")
    assert drawn.returncode == 0, drawn.stderr
    dom, _ = open_page(tmp_path / "diff.html", "search=g", tmp_path)
    # g may be one row or several (called, inlined, in other tiers), and the
    # JIT need not choose alike in the two runs: its rows together grew.
    rows = [row.split() for row in table_rows(dom) if row.strip().startswith("g diff_work.js")]

    def number(text: str) -> float:
        return float(text.replace(",", ""))

    new, base = sum(number(row[-4]) for row in rows), sum(number(row[-3]) for row in rows)
    assert rows and new >= 1.4 * base, rows  # twice g's work, base scaled to equal time
    assert boxes_drawn(dom) >= 5


def ten_thousand_stacks() -> Profile:
    """Twenty processes, 10,000 distinct stacks 10 to 40 frames deep."""
    rng = random.Random(7)
    profile = Profile(RunInfo([], list(range(1000, 1020)), 99, started_ns=0, ended_ns=600 * 10**9))
    frames = [
        profile.intern(
            Frame(
                f"work{index} app{index % 50}.js:{index}",
                "[jit]",
                FrameKind.JIT,
                f"/srv/app{index % 50}.js",
                index,
                1,
                "turbofan",
            )
        )
        for index in range(2000)
    ]
    frames += [profile.intern(Frame(f"native_{index}", "/usr/bin/node", FrameKind.NATIVE)) for index in range(200)]
    stacks = set()
    while len(stacks) < 10_000:
        stacks.add(tuple(rng.choice(frames) for _ in range(rng.randint(10, 40))))
    for index, stack in enumerate(sorted(stacks)):
        pid = 1000 + index % 20
        profile.add(Sample(index * 10**7, pid, pid + index % 3, f"svc{index % 20}", stack, WalkEnd.COMPLETE))
    return profile


def test_a_page_of_ten_thousand_stacks(jitprof, tmp_path):
    with open(tmp_path / "many.jitprof", "wb") as handle:
        write_raw(ten_thousand_stacks(), handle)
    run = jitprof("report", str(tmp_path / "many.jitprof"), "-o", str(tmp_path / "many.html"))
    assert run.returncode == 0, run.stderr
    dom, _ = open_page(tmp_path / "many.html", "select=p1007&search=work12", tmp_path)
    assert re.search(r'id="table-note">the 500 first of [\d,]+ functions|id="table-note">[\d,]+ functions', dom)
    rows = table_rows(dom)
    assert rows and all("work12" in row for row in rows)
    assert "svc7 (pid 1007)" in dom
    assert boxes_drawn(dom) >= 100


def test_a_page_filters_by_request_route_and_trace(jitprof, tmp_path):
    """Samples labelled with their request (the OpenTelemetry context the
    program publishes): the page keeps a route's, or one trace's, alone."""
    program = ROOT / "fixtures" / "build" / "otel_context"
    run = jitprof("--no-tui", "-F", "499", "-o", "page.html", "--", str(program), "2", "2")
    assert run.returncode == 0, run.stderr
    page = tmp_path / "page.html"
    dom, _ = open_page(page, "route=/search", tmp_path)
    rows = " ".join(table_rows(dom))
    assert "search_work" in rows and "checkout_work" not in rows
    # The program's last checkout request (its first ones ran before jitprof read what it publishes).
    checkout = [line.split() for line in run.stdout.splitlines() if line.startswith("span ") and "/checkout" in line]
    checkout_trace = max(checkout, key=lambda fields: int(fields[5]))[1]
    dom, _ = open_page(page, f"trace={checkout_trace[:12]}", tmp_path)
    rows = " ".join(table_rows(dom))
    assert "checkout_work" in rows and "search_work" not in rows and "between_requests" not in rows
