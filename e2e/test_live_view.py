"""The live view, driven through tmux as a person would: keys in, screen out."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from e2e.conftest import ROOT, cpu_seconds_of, read_folded
from e2e.test_node import JS

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (make setup installs it)")


class Tmux:
    """One detached session on a private tmux server."""

    def __init__(self, name: str, socket: Path, width: int = 160, height: int = 45) -> None:
        self.socket = str(socket)  # the server's socket, in the test's directory: gone with it, not left in /tmp
        self.name = name
        self.width, self.height = width, height

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True, text=True, check=True).stdout

    def start(self, command: str) -> None:
        self._tmux("new-session", "-d", "-s", self.name, "-x", str(self.width), "-y", str(self.height), command)

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", self.name)

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", self.name, *keys)

    def alternate_screen(self) -> bool:
        return self._tmux("display-message", "-p", "-t", self.name, "#{alternate_on}").strip() == "1"

    def wait_for(self, predicate: Callable[[str], bool], timeout: float, what: str) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if predicate(screen):
                return screen
            if time.monotonic() > deadline:
                size = self._tmux("display-message", "-p", "-t", self.name, "#{window_width}x#{window_height}").strip()
                raise AssertionError(f"timed out waiting for {what}; screen ({size}):\n{screen}")
            time.sleep(0.1)

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True)


@pytest.fixture
def tmux(tmp_path):
    sessions: list[Tmux] = []

    def make(name: str) -> Tmux:
        session = Tmux(name, tmp_path / f"tmux-{name}")
        sessions.append(session)
        return session

    yield make
    for session in sessions:
        session.kill()


def jitprof_command(workdir: Path, cache: Path, *args: str) -> str:
    """A shell line for the pane: jitprof, then its status and the terminal mode."""
    jitprof = " ".join(shlex.quote(part) for part in (sys.executable, "-m", "profiler", *args))
    return (
        f"cd {shlex.quote(str(workdir))} && env -u SUDO_UID -u SUDO_GID -u COLUMNS -u LINES JITPROF_CACHE_DIR={shlex.quote(str(cache))} "
        f"PYTHONPATH={shlex.quote(str(ROOT))} {jitprof}; echo EXIT=$?; stty -a | tr ' ' '\\n' | grep -x -- '-*icanon'; sleep 600"
    )


def table_rows(screen: str) -> list[list[str]]:
    """The rows of the table: lines that start with two percentages."""
    rows = []
    for line in screen.splitlines():
        fields = line.split()
        if len(fields) >= 6 and all(field.replace(".", "").isdigit() for field in fields[:2]):
            rows.append(fields)
    return rows


def pids_running(argument: str) -> list[int]:
    """The processes with argument on their command line."""
    found = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if argument.encode() in path.read_bytes().split(b"\0"):
                found.append(int(path.parent.name))
        except OSError:
            continue
    return found


def test_live_view_keys(tmux, tmp_path, symbol_cache):
    session = tmux("keys")
    session.start(
        jitprof_command(tmp_path, symbol_cache, "-F", "199", "-o", "out.folded", "--", "node", str(JS / "chain.js"), "60")
    )
    session.wait_for(lambda screen: "samples" in screen and "% Own" in screen, 60, "the header")
    screen = session.wait_for(lambda screen: "inner chain.js" in screen, 20, "the hot function")
    # Named while the program is young, by its own clock (its CPU time: a
    # slower machine, or a slower start, stretches the wall's).
    node = next(pid for pid in pids_running(str(JS / "chain.js")) if Path(f"/proc/{pid}/comm").read_text().strip() == "node")
    assert cpu_seconds_of(node, main_thread=False) <= 3.0
    assert "node " in screen and "199 Hz" in screen and "symbolised" in screen and "threads" in screen
    assert session.alternate_screen()

    def leaf_first(screen: str) -> bool:
        # Sorted by own time: once the loop outweighs node's start-up (on a
        # slow CPU its first samples lead for a while), the leaf comes first.
        rows = table_rows(screen)
        owns = [float(row[0]) for row in rows]
        return bool(rows) and owns == sorted(owns, reverse=True) and "inner" in " ".join(rows[0])

    session.wait_for(leaf_first, 20, "the leaf first, sorted by own time")

    session.keys("2")

    def sorted_by_total(screen: str) -> bool:
        # A capture can catch the terminal mid-frame (new rows over the last
        # frame's): a whole frame is sorted.
        totals = [float(row[1]) for row in table_rows(screen)]
        return "sort: % total" in screen and bool(totals) and totals == sorted(totals, reverse=True)

    screen = session.wait_for(sorted_by_total, 3, "sorting by total")
    assert float(table_rows(screen)[0][1]) >= 50

    # The filter matches whole names, which the table may cut short (a
    # "v8::internal::…" template can hold "inner" past the cut): filter by
    # the script's file, which every matching row shows.
    session.keys("/", "chain.js", "Enter")
    screen = session.wait_for(
        lambda screen: "filter: chain.js" in screen and "_" not in screen.split("filter: chain.js")[1][:2], 3, "the filter"
    )
    rows = table_rows(
        session.wait_for(lambda screen: all("chain.js" in " ".join(row) for row in table_rows(screen)), 3, "filtered rows")
    )
    assert rows and all("chain.js" in " ".join(row) for row in rows)
    assert any("inner" in " ".join(row) for row in rows)
    session.keys("/", "Escape")
    session.wait_for(lambda screen: "filter:" not in screen and len(table_rows(screen)) > 3, 3, "the filter cleared")

    session.keys("p")
    session.wait_for(lambda screen: "PAUSED" in screen, 3, "pause")
    # A capture can catch the terminal mid-frame (the paused header over the
    # last frame's rows): take the screen once the frame is whole.
    time.sleep(0.5)
    first = session.screen()
    time.sleep(2.5)
    assert session.screen() == first  # numbers frozen, elapsed time too
    session.keys("p")
    session.wait_for(lambda screen: "PAUSED" not in screen and screen != first, 3, "resume")

    session.keys("q")
    # The terminal's mode is printed after EXIT=: wait for both.
    screen = session.wait_for(lambda screen: "EXIT=" in screen and "icanon" in screen.split("EXIT=")[1], 30, "the end of the run")
    assert not session.alternate_screen()  # the terminal is back
    assert "% Own" not in screen
    assert "jitprof: " in screen and "wrote out.folded" in screen
    assert "\nicanon" in "\n" + screen  # cooked mode again, not -icanon
    lines = read_folded(tmp_path / "out.folded")
    assert sum(line.count for line in lines if any(frame.startswith("inner chain.js") for frame in line.frames)) > 100


def test_program_output_goes_to_a_pane(tmux, tmp_path, symbol_cache):
    session = tmux("output")
    session.start(jitprof_command(tmp_path, symbol_cache, "-o", "out.folded", "--", "node", str(JS / "chatty.js"), "6"))
    screen = session.wait_for(lambda screen: "tick 5 from chatty.js" in screen, 60, "the program's lines in the pane")
    for _ in range(10):  # while it prints every 100 ms, the layout holds
        lines = session.screen().splitlines()
        assert lines[0].startswith("jitprof ") and "samples" in lines[1]
        header_row = next(index for index, line in enumerate(lines) if "% Own" in line)
        pane_title = next(index for index, line in enumerate(lines) if "program output" in line)
        ticks = [index for index, line in enumerate(lines) if "from chatty.js" in line]
        assert header_row == 3 and ticks and min(ticks) > pane_title > header_row
        assert "1-4 sort" in [line for line in lines if line.strip()][-1]  # the footer stays last
        time.sleep(0.2)
    screen = session.wait_for(lambda screen: "EXIT=" in screen, 30, "the end of the run")
    assert "EXIT=0" in screen
    assert not session.alternate_screen()
    # All of the output is shown once the view has closed, then the summary.
    text = screen.replace("\r", "")
    assert "from chatty.js" in text and "jitprof: " in text
    assert text.index("jitprof: ") > text.rindex("from chatty.js")


def test_live_view_shows_a_bundle_as_written(tmux, tmp_path, symbol_cache):
    esbuild = ROOT / ".nodes" / "apps" / "node_modules" / "@esbuild" / "linux-x64" / "bin" / "esbuild"
    if not esbuild.exists():
        pytest.skip("esbuild is not installed (make setup installs it)")
    bundle = tmp_path / "app.min.js"
    entry = ROOT / "fixtures" / "ts" / "src" / "main.ts"
    subprocess.run(
        [str(esbuild), str(entry), "--bundle", "--minify", "--platform=node", "--sourcemap", f"--outfile={bundle}"],
        check=True,
        capture_output=True,
    )
    session = tmux("maps")
    session.start(jitprof_command(tmp_path, symbol_cache, "-F", "199", "--", "node", str(bundle), "30"))

    # Within a few seconds, the table shows the .ts names the minifier replaced, not app.min.js's
    # (the first second's rows may not have main.ts's functions among them yet).
    def shows_the_sources(screen: str) -> bool:
        return "makeRegularPolygon shapes.ts:27" in screen and any("src/main.ts" in " ".join(row) for row in table_rows(screen))

    session.wait_for(shows_the_sources, 20, "the original names, from shapes.ts and main.ts")
    session.keys("q")
    session.wait_for(lambda screen: "EXIT=" in screen, 30, "the end of the run")
