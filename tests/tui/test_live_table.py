"""The live view's table model and rendering, without a terminal."""

from __future__ import annotations

import io

from rich.console import Console

from profiler.kernel.events import WalkEnd
from profiler.model.profile import Frame, FrameKind, Profile, RunInfo, Sample
from profiler.tui.live_table import LiveTable, SortColumn
from profiler.tui.live_view import LiveView, RunCounters

SECOND = 1_000_000_000
MAIN = Frame("main", "/bin/app", FrameKind.NATIVE)
WORK = Frame("work app.js:3", "[jit]", FrameKind.JIT, "/srv/app.js", 3, tier="turbofan")
HOT = Frame("hot app.js:10", "[jit]", FrameKind.JIT, "/srv/app.js", 11, 5, "turbofan", inlined=True, line_exact=True)
HOT_OTHER_LINE = Frame("hot app.js:10", "[jit]", FrameKind.JIT, "/srv/app.js", 12, 5, "turbofan", inlined=True, line_exact=True)
LEAF = Frame("memcpy", "/lib/libc.so.6", FrameKind.NATIVE)
UNNAMED = Frame("[unknown] ([jit])", "[jit]", FrameKind.UNKNOWN)


def by_function(table: LiveTable, sort: SortColumn = SortColumn.OWN_PERCENT, text: str = "") -> dict[str, tuple]:
    return {row.key.function: row for row in table.rows(False, sort, text)}


def test_own_and_total_per_function():
    table = LiveTable(frequency_hz=100)
    for index in range(6):
        table.add(index, [MAIN, WORK, HOT])
    for index in range(3):
        table.add(10 + index, [MAIN, WORK])
    table.add(20, [MAIN, LEAF])
    rows = by_function(table)
    assert rows["hot app.js:10"].own_percent == 60.0 and rows["hot app.js:10"].total_percent == 60.0
    assert rows["work app.js:3"].own_percent == 30.0 and rows["work app.js:3"].total_percent == 90.0
    assert rows["main"].own_percent == 0.0 and rows["main"].total_percent == 100.0
    assert rows["hot app.js:10"].own_seconds == 0.06 and rows["main"].total_seconds == 0.1
    assert rows["hot app.js:10"].tier == "inlined" and rows["work app.js:3"].tier == "TurboFan"
    assert rows["main"].tier == "native" and rows["main"].location == "/bin/app"
    assert rows["hot app.js:10"].location == "/srv/app.js"


def test_recursion_counts_once_in_total():
    table = LiveTable(frequency_hz=100)
    table.add(0, [MAIN, WORK, WORK, WORK])
    assert by_function(table)["work app.js:3"].total_percent == 100.0


def test_per_line_rows_split_exact_lines_only():
    table = LiveTable(frequency_hz=100)
    for _ in range(3):
        table.add(0, [MAIN, WORK, HOT])
    table.add(0, [MAIN, WORK, HOT_OTHER_LINE])
    lines = {(row.key.function, row.key.line): row for row in table.rows(True, SortColumn.OWN_PERCENT)}
    assert lines[("hot app.js:10", 11)].own_percent == 75.0
    assert lines[("hot app.js:10", 12)].own_percent == 25.0
    assert lines[("hot app.js:10", 11)].location == "/srv/app.js:11"
    assert ("work app.js:3", 0) in lines  # its line is where it begins, not where it was: no per-line split


def test_sorting_by_each_column():
    table = LiveTable(frequency_hz=100)
    for _ in range(5):
        table.add(0, [MAIN, WORK, HOT])
    table.add(0, [MAIN, LEAF])
    assert table.rows(False, SortColumn.OWN_PERCENT)[0].key.function == "hot app.js:10"
    assert table.rows(False, SortColumn.TOTAL_PERCENT)[0].key.function == "main"
    assert table.rows(False, SortColumn.OWN_TIME)[0].key.function == "hot app.js:10"
    assert table.rows(False, SortColumn.TOTAL_TIME)[0].key.function == "main"
    assert [row.key.function for row in table.rows(False, SortColumn.TOTAL_PERCENT, limit=2)] == ["main", "work app.js:3"]


def test_filter_matches_function_or_file():
    table = LiveTable(frequency_hz=100)
    table.add(0, [MAIN, WORK, HOT])
    table.add(0, [MAIN, LEAF])
    assert set(by_function(table, text="HOT")) == {"hot app.js:10"}
    assert set(by_function(table, text="libc")) == {"memcpy"}
    assert set(by_function(table, text="app.js")) == {"work app.js:3", "hot app.js:10"}


def test_window_expires_but_times_stay_cumulative():
    table = LiveTable(frequency_hz=100, window_s=5)
    for _ in range(4):
        table.add(1 * SECOND, [MAIN, HOT])
    table.add(7 * SECOND, [MAIN, LEAF])
    table.expire(8 * SECOND)  # the first four are older than 5 s
    rows = by_function(table)
    assert table.window_samples == 1
    assert rows["memcpy"].own_percent == 100.0 and rows["hot app.js:10"].own_percent == 0.0
    assert rows["hot app.js:10"].own_seconds == 0.04  # still counted in the times


def test_reset_window_starts_percentages_afresh():
    table = LiveTable(frequency_hz=100)
    table.add(1 * SECOND, [MAIN, HOT])
    table.reset_window(2 * SECOND)
    assert table.window_samples == 0
    table.add(3 * SECOND, [MAIN, LEAF])
    rows = by_function(table)
    assert rows["memcpy"].own_percent == 100.0 and rows["hot app.js:10"].own_percent == 0.0
    assert table.samples == 2


def test_symbolised_and_jit_named_shares():
    table = LiveTable(frequency_hz=100)
    table.add(0, [MAIN, WORK, UNNAMED])
    assert (table.frames, table.unknown_frames, table.jit_frames, table.unnamed_jit_frames) == (3, 1, 2, 1)


def _view_with_samples() -> tuple[LiveView, Console]:
    profile = Profile(RunInfo(["node", "app.js"], [42], 99))
    stacks = [[MAIN, WORK, HOT]] * 8 + [[MAIN, LEAF]] * 2
    for index, stack in enumerate(stacks):
        profile.add(Sample(index, 42, 42, "node", tuple(profile.intern(frame) for frame in stack), WalkEnd.COMPLETE))
    console = Console(file=io.StringIO(), width=140, height=30, force_terminal=False, color_system=None)
    view = LiveView(profile, None, lambda: RunCounters(3, 1), lambda: [], console=console)
    view.tick()  # takes the samples (no terminal: nothing drawn)
    return view, console


def render_text(view: LiveView, console: Console) -> str:
    with console.capture() as capture:
        console.print(view.render())
    return capture.get()


def table_rows(screen: str) -> list[str]:
    return [line for line in screen.splitlines() if line.strip() and line.split()[0].replace(".", "").isdigit()]


def test_view_renders_header_rows_and_keys():
    view, console = _view_with_samples()
    screen = render_text(view, console)
    assert "node app.js" in screen and "99 Hz" in screen and "samples 10" in screen and "lost 3" in screen
    assert "sort: % own" in screen
    assert "hot app.js:10" in table_rows(screen)[0] and "inlined" in table_rows(screen)[0]
    view.handle_key("2")
    screen = render_text(view, console)
    assert "sort: % total" in screen and "% Total▼" in screen
    assert "main" in table_rows(screen)[0]
    for key in "/memc\r":
        view.handle_key(key)
    screen = render_text(view, console)
    assert "filter: memc" in screen and "memcpy" in screen and "hot app.js" not in screen
    view.handle_key("/")
    view.handle_key("\x1b")  # Esc clears the filter
    assert "hot app.js" in render_text(view, console)
    view.handle_key("p")
    frozen = render_text(view, console)
    assert "PAUSED" in frozen
    view.handle_key("?")
    view.handle_key("q")
    assert view.stop_requested


def test_bracketed_names_and_line_locations_render_as_written():
    profile = Profile(RunInfo(["node", "app.js"], [42], 99))
    builtin = Frame("[builtin] JSEntry", "[jit]", FrameKind.JIT, tier="builtin")
    for stack in ([MAIN, builtin, HOT], [MAIN, UNNAMED]):
        profile.add(Sample(0, 42, 42, "node", tuple(profile.intern(frame) for frame in stack), WalkEnd.COMPLETE))
    console = Console(file=io.StringIO(), width=160, height=30, color_system=None)
    view = LiveView(profile, None, lambda: RunCounters(0, 0), lambda: [], console=console)
    view.tick()
    view.handle_key("l")
    screen = render_text(view, console)
    assert "[builtin] JSEntry" in screen and "[unknown] ([jit])" in screen
    assert "srv/app.js:11" in screen and "rows: lines" in screen


def test_j_shows_the_javascript_only_and_back():
    profile = Profile(RunInfo(["node", "app.js"], [42], 99))
    node_start = Frame("node::Start(int, char**)", "node", FrameKind.NATIVE)
    stacks = [[node_start, WORK, HOT, LEAF]] * 8 + [[node_start, LEAF]] * 2
    for index, stack in enumerate(stacks):
        profile.add(Sample(index, 42, 42, "node", tuple(profile.intern(frame) for frame in stack), WalkEnd.COMPLETE))
    console = Console(file=io.StringIO(), width=140, height=30, force_terminal=False, color_system=None)
    view = LiveView(profile, None, lambda: RunCounters(0, 0), lambda: [], console=console)
    view.tick()
    assert "node::Start" in render_text(view, console) and "memcpy" in render_text(view, console)
    view.handle_key("j")
    screen = render_text(view, console)
    rows = " ".join(table_rows(screen))
    assert "functions  JS only" in screen and "samples 10" in screen
    # node's and libc's frames are gone (memcpy's time is hot's own); no JavaScript: (program).
    assert "hot app.js" in rows and "work app.js" in rows and "(program)" in rows
    assert "memcpy" not in rows and "node::Start" not in rows
    assert "hot app.js" in table_rows(screen)[0]  # sorted by own time, hot leads with memcpy's samples
    view.handle_key("j")
    assert "functions  JS only" not in render_text(view, console) and "memcpy" in render_text(view, console)


def test_names_carrying_escapes_reach_the_terminal_escaped():
    """A perf-map name or comm with OSC 52 (clipboard), OSC 0 (title), a
    screen clear or a newline: under tmux they set buffers and the title."""
    profile = Profile(RunInfo(["node", "app\x1b]0;cmd\x07.js"], [42], 99))
    forged = Frame("f\x1b]52;c;cHduZWQ=\x07\x1b[2J\nrow", "[jit]", FrameKind.JIT, "/srv/\x1b]2;t\x07.js", 3, function_line=3)
    profile.add(Sample(0, 42, 42, "node", (profile.intern(MAIN), profile.intern(forged)), WalkEnd.COMPLETE))
    stream = io.StringIO()
    console = Console(file=stream, width=200, height=30, color_system=None)
    view = LiveView(profile, None, lambda: RunCounters(0, 0), lambda: [], console=console)
    view.tick()
    screen = render_text(view, console)
    assert "\x1b]" not in screen and "\x07" not in screen and "\x1b[2J" not in screen
    assert "f\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\x0arow" in screen and "\\x1b]0;cmd\\x07" in screen


WAIT_READ = Frame("read", "/lib/libc.so.6", FrameKind.NATIVE)
OFF_CPU = Frame("(off-CPU)", "", FrameKind.WAIT)


def test_waits_go_to_the_off_cpu_column_not_the_cpus():
    table = LiveTable(frequency_hz=100)
    frames = [MAIN, WORK, WAIT_READ, OFF_CPU]
    table.add_ids(0, (0, 1), frames)
    table.add_ids(1, (0, 1, 2, 3), frames, off_cpu_ns=2 * SECOND)
    rows = by_function(table, SortColumn.OFF_CPU_TIME)
    assert table.samples == 1 and rows["work app.js:3"].own_percent == 100.0
    assert rows["read"].off_cpu_seconds == 2.0 and rows["main"].off_cpu_seconds == 2.0
    assert list(rows)[0] in ("main", "work app.js:3", "read", "(off-CPU)") and rows["read"].total_seconds == 0.0


def test_the_view_shows_an_off_cpu_column_with_off_cpu():
    profile = Profile(RunInfo(["node", "app.js"], [42], 99, off_cpu=True))
    cpu = tuple(profile.intern(frame) for frame in [MAIN, WORK])
    wait = tuple(profile.intern(frame) for frame in [MAIN, WORK, WAIT_READ, OFF_CPU])
    profile.add(Sample(0, 42, 42, "node", cpu, WalkEnd.COMPLETE))
    profile.add(Sample(1, 42, 42, "node", wait, WalkEnd.COMPLETE, 3 * SECOND))
    console = Console(file=io.StringIO(), width=160, height=30, force_terminal=False, color_system=None)
    view = LiveView(profile, None, lambda: RunCounters(0, 0), lambda: [], console=console)
    view.tick()
    view.handle_key("5")
    screen = render_text(view, console)
    assert "Off-CPU▼" in screen and "sort: off-CPU time" in screen
    read_row = next(line for line in table_rows(screen) if " read " in line)
    assert read_row.split()[4] == "3.00s"  # the fifth column, after CPU's four
    assert "Off-CPU" not in render_text(*_view_with_samples())


def test_a_route_column_says_which_request_route_a_function_served():
    """Samples labelled with their request's http.route: each row names the
    route most of its samples served, with its share; no labels, no column."""
    profile = Profile(RunInfo(["node", "app.js"], [42], 99))
    checkout = profile.intern_labels((("trace_id", "ab" * 16), ("http.route", "/checkout")))
    search = profile.intern_labels((("trace_id", "cd" * 16), ("http.route", "/search")))
    stacks = [([MAIN, WORK, HOT], checkout)] * 6 + [([MAIN, WORK, HOT], search)] * 2 + [([MAIN, LEAF], search)] * 2
    for index, (stack, labels) in enumerate(stacks):
        ids = tuple(profile.intern(frame) for frame in stack)
        profile.add(Sample(index, 42, 42, "node", ids, WalkEnd.COMPLETE, 0, labels))
    console = Console(file=io.StringIO(), width=160, height=30, force_terminal=False, color_system=None)
    view = LiveView(profile, None, lambda: RunCounters(0, 0), lambda: [], console=console)
    view.tick()
    rows = {row.key.function: row.route for row in view.table.rows(False, SortColumn.TOTAL_PERCENT)}
    assert rows["hot app.js:10"] == "/checkout 75%" and rows["memcpy"] == "/search 100%" and rows["main"] == "/checkout 60%"
    assert "Route" in render_text(view, console)
    plain, plain_console = _view_with_samples()
    assert "Route" not in render_text(plain, plain_console)
