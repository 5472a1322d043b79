"""The live view in the terminal (rich): a header, the hottest functions or
lines, the program's own output in a pane, and single-key commands.

It runs on the main thread between ring-buffer polls: keys are read without
blocking, new samples are folded into the table, and the screen is redrawn
about once a second or at once after a key. The alternate screen and the
terminal mode are restored on every way out (see stop()).
"""

from __future__ import annotations

import os
import select
import termios
import time
import tty
from collections.abc import Callable
from dataclasses import dataclass

import psutil
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from profiler.jit import registry
from profiler.model.profile import Profile
from profiler.output.originals import OriginalFrameTable
from profiler.safety.terminal import printable
from profiler.tui.child_output import CapturedOutput
from profiler.tui.live_table import LiveTable, Row, SortColumn

REFRESH_S = 1.0
ROUTE_LABEL = "http.route"  # the column of request routes (labels from the context processes publish)
MAX_ROUTE_SETS = 1 << 16
HEADER_LINES = 3
FOOTER_LINES = 1
PANE_LINES = 6
SORT_NAMES = {
    SortColumn.OWN_PERCENT: "% own",
    SortColumn.TOTAL_PERCENT: "% total",
    SortColumn.OWN_TIME: "own time",
    SortColumn.TOTAL_TIME: "total time",
    SortColumn.OFF_CPU_TIME: "off-CPU time",
}
COLUMN_TITLES = {
    SortColumn.OWN_PERCENT: "% Own",
    SortColumn.TOTAL_PERCENT: "% Total",
    SortColumn.OWN_TIME: "Own time",
    SortColumn.TOTAL_TIME: "Total time",
    SortColumn.OFF_CPU_TIME: "Off-CPU",  # with --off-cpu only
}
HELP = """\
 1 2 3 4   sort by % own, % total, own time, total time (CPU)
 5         sort by time off the CPU, waits under the function included (--off-cpu)
 l         rows per source line / per function
 j         JavaScript only (node's and V8's own frames given to the JS that called them) / everything
 /         filter by a substring of the function or file (Enter keeps, Esc clears)
 p         pause the display (sampling goes on)
 r         reset the window the percentages are taken over
 ?         this help
 q Ctrl-C  stop, write the outputs and exit
"""


@dataclass(frozen=True)
class RunCounters:
    """What the recording knows that the samples do not say."""

    lost_samples: int
    cut_short: int


@dataclass
class _TargetUsage:
    cpu_percent: float = 0.0
    rss_bytes: int = 0
    threads: int = 0
    processes: int = 0


class LiveView:
    def __init__(
        self,
        profile: Profile,
        output: CapturedOutput | None,
        counters: Callable[[], RunCounters],
        live_pids: Callable[[], list[int]],
        console: Console | None = None,
        js_only: bool = False,
    ) -> None:
        self._profile = profile
        self._output = output
        self._counters = counters
        self._live_pids = live_pids
        self._console = console or Console()
        self._js_only = js_only
        self.table = LiveTable(profile.info.frequency_hz, stack_view=registry.language_stack if js_only else None)
        self.stop_requested = False
        self._sort = SortColumn.OWN_PERCENT
        self._by_line = False
        self._filter = ""
        self._typing_filter: str | None = None
        self._paused = False
        self._help = False
        self._seen = 0
        self._routes: dict[int, str] = {}  # each label set's http.route
        self._originals_known = 0
        self._started = self._window_reset = time.monotonic()
        self._last_draw = 0.0
        self._frozen: Group | None = None
        self._processes: dict[int, psutil.Process] = {}
        self._usage = _TargetUsage()
        self._live: Live | None = None
        self._saved_mode: list | None = None  # type: ignore[type-arg]
        self._stdin = -1

    # Terminal ------------------------------------------------------------

    def start(self) -> None:
        self._stdin = os.dup(0)
        try:
            self._saved_mode = termios.tcgetattr(self._stdin)
            tty.setcbreak(self._stdin)  # keys one by one, no echo; Ctrl-C still signals
        except termios.error:
            self._saved_mode = None
        self._live = Live(console=self._console, screen=True, auto_refresh=False, redirect_stdout=False, redirect_stderr=False)
        self._live.start()
        self._draw(force=True)

    def stop(self) -> None:
        """Leave the alternate screen and give the terminal its mode back."""
        try:
            if self._live is not None:
                self._live.stop()
                self._live = None
        finally:
            if self._saved_mode is not None:
                try:
                    termios.tcsetattr(self._stdin, termios.TCSADRAIN, self._saved_mode)
                except termios.error:
                    pass
                self._saved_mode = None
            if self._stdin >= 0:
                os.close(self._stdin)
                self._stdin = -1

    # Each turn of the sampling loop --------------------------------------

    def tick(self) -> None:
        pressed = self._read_keys()
        frames = self._frames()
        if len(self._profile.originals) != self._originals_known:
            self._originals_known = len(self._profile.originals)
            self.table.forget_stacks()
        for sample in self._profile.samples_since(self._seen):
            self.table.add_ids(sample.time_ns, sample.frame_ids, frames, sample.off_cpu_ns, self._route_of(sample.labels))
            self._seen += 1
        now = time.monotonic()
        due = now - self._last_draw >= REFRESH_S
        if pressed or due or (self._output is not None and self._output.changed and now - self._last_draw >= 0.2):
            self._draw(force=pressed or due)

    def _read_keys(self) -> bool:
        if self._stdin < 0:
            return False
        pressed = False
        while select.select([self._stdin], [], [], 0)[0]:
            try:
                data = os.read(self._stdin, 64)
            except OSError:
                return pressed
            if not data:
                return pressed
            for key in data.decode("utf-8", "replace"):
                self.handle_key(key)
                pressed = True
        return pressed

    def handle_key(self, key: str) -> None:
        if self._typing_filter is not None:
            if key in ("\r", "\n"):
                self._filter, self._typing_filter = self._typing_filter, None
            elif key == "\x1b":
                self._filter, self._typing_filter = "", None
            elif key in ("\x7f", "\x08"):
                self._typing_filter = self._typing_filter[:-1]
            elif key.isprintable():
                self._typing_filter += key
            return
        if key in ("1", "2", "3", "4") or (key == "5" and self._profile.info.off_cpu):
            self._sort = SortColumn(int(key))
        elif key in ("l", "L"):
            self._by_line = not self._by_line
        elif key in ("j", "J"):
            self._toggle_js_view()
        elif key == "/":
            self._typing_filter = self._filter
        elif key in ("p", "P", " "):
            self._paused = not self._paused
            self._frozen = None
        elif key in ("r", "R"):
            self.table.reset_window(time.monotonic_ns())
            self._window_reset = time.monotonic()
        elif key == "?":
            self._help = not self._help
        elif key in ("q", "Q"):
            self.stop_requested = True

    def _frames(self) -> OriginalFrameTable:
        """The frames as shown: source-mapped where their originals are known yet."""
        return OriginalFrameTable(self._profile.frames, self._profile.originals)

    def _toggle_js_view(self) -> None:
        """Count every sample so far again, in the other view."""
        self._js_only = not self._js_only
        table = LiveTable(
            self._profile.info.frequency_hz, self.table.window_ns / 1e9, registry.language_stack if self._js_only else None
        )
        table.reset_window(self.table.window_start_ns)
        samples = self._profile.snapshot()
        frames = self._frames()
        for sample in samples:
            table.add_ids(sample.time_ns, sample.frame_ids, frames, sample.off_cpu_ns, self._route_of(sample.labels))
        table.expire(time.monotonic_ns())
        self.table, self._seen = table, len(samples)
        self._frozen = None

    # Drawing -------------------------------------------------------------

    def _draw(self, force: bool) -> None:
        if self._live is None:
            return
        now = time.monotonic()
        if force:
            self._last_draw = now
            self.table.expire(time.monotonic_ns())
            self._refresh_usage()
        self._live.update(self.render(), refresh=True)

    def render(self) -> Group:
        height = self._console.size.height
        pane_lines = PANE_LINES if self._output is not None else 0
        table_rows = max(height - HEADER_LINES - FOOTER_LINES - 2 - (pane_lines + 2 if pane_lines else 0), 3)
        if self._paused and self._frozen is not None:
            body = self._frozen
        else:
            shown: RenderableType = self._help_panel() if self._help else self._rows_table(table_rows)
            body = Group(self._header(), shown)
            if self._paused:
                self._frozen = body
        parts: list[RenderableType] = [body]
        if self._output is not None:
            parts.append(self._pane(pane_lines))
        parts.append(self._footer())
        return Group(*parts)

    def _header(self) -> Text:
        info = self._profile.info
        counters = self._counters()
        table = self.table
        elapsed = time.monotonic() - self._started
        window_s = max(min(table.window_ns / 1e9, time.monotonic() - self._window_reset), 1.0)
        target = " ".join(info.command) if info.command else "pid " + ", ".join(map(str, info.pids))
        symbolised = 100.0 * (1 - table.unknown_frames / table.frames) if table.frames else 100.0
        jit_named = 100.0 * (1 - table.unnamed_jit_frames / table.jit_frames) if table.jit_frames else 100.0
        usage = self._usage
        status = "  [PAUSED]" if self._paused else ""
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("jitprof ", style="bold")
        text.append(printable(target), style="bold cyan")
        text.append(f"  pid {', '.join(map(str, info.pids))}  {info.frequency_hz} Hz  elapsed {_clock(elapsed)}{status}\n")
        text.append(
            f"samples {table.samples:,} ({table.window_samples / window_s:,.0f}/s)  lost {counters.lost_samples:,}  "
            f"cut short {counters.cut_short:,}  symbolised {symbolised:.1f}%  JIT named {jit_named:.1f}%\n"
        )
        text.append(
            f"target CPU {usage.cpu_percent:.1f}%  RSS {usage.rss_bytes / 2**20:,.1f} MiB  threads {usage.threads}  "
            f"processes {usage.processes}  |  sort: {SORT_NAMES[self._sort]}  rows: "
            f"{'lines' if self._by_line else 'functions'}{'  JS only' if self._js_only else ''}  window {table.window_ns / 1e9:.0f} s"
        )
        shown_filter = self._typing_filter if self._typing_filter is not None else self._filter
        if shown_filter or self._typing_filter is not None:
            text.append(f"  filter: {shown_filter}", style="bold yellow")
            if self._typing_filter is not None:
                text.append("_", style="blink")
        return text

    def _rows_table(self, limit: int) -> Table:
        table = Table(box=None, expand=True, pad_edge=False, show_edge=False, header_style="bold reverse")
        for column, title in COLUMN_TITLES.items():
            if column is SortColumn.OFF_CPU_TIME and not self._profile.info.off_cpu:
                continue
            marker = "▼" if column is self._sort else ""
            table.add_column(title + marker, justify="right", no_wrap=True, width=11)
        table.add_column("Tier", no_wrap=True, width=11)
        table.add_column("Function", no_wrap=True, overflow="ellipsis", ratio=3)
        table.add_column("File:Line", no_wrap=True, overflow="ellipsis", ratio=2)
        routes = self.table.has_routes
        if routes:
            table.add_column("Route", no_wrap=True, overflow="ellipsis", ratio=1)
        active_filter = self._typing_filter if self._typing_filter is not None else self._filter
        for row in self.table.rows(self._by_line, self._sort, active_filter, limit):
            table.add_row(*_cells(row, self._profile.info.off_cpu), *((Text(printable(row.route)),) if routes else ()))
        return table

    def _route_of(self, label_id: int) -> str:
        """A label set's http.route (read once per set)."""
        if not label_id:
            return ""
        route = self._routes.get(label_id)
        if route is None:
            if len(self._routes) >= MAX_ROUTE_SETS:
                self._routes.clear()
            route = self._routes[label_id] = dict(self._profile.label_sets[label_id]).get(ROUTE_LABEL, "")
        return route

    def _help_panel(self) -> Panel:
        return Panel(Text(HELP), title="keys", border_style="cyan")

    def _pane(self, lines: int) -> Panel:
        assert self._output is not None
        width = max(self._console.size.width - 4, 10)
        shown = [line[:width] for line in self._output.last_lines(lines)]
        shown += [""] * (lines - len(shown))
        title = "program output (stdin is not connected: use --no-tui for interactive programs)"
        return Panel(Text("\n".join(shown), no_wrap=True, overflow="crop"), title=title, title_align="left", height=lines + 2)

    def _footer(self) -> Text:
        sorts = "1-5" if self._profile.info.off_cpu else "1-4"
        return Text(
            f" {sorts} sort  l lines/functions  j JS only  / filter  p pause  r reset window  ? help  q quit", style="reverse"
        )

    def _refresh_usage(self) -> None:
        usage = _TargetUsage()
        for pid in self._live_pids():
            process = self._processes.get(pid)
            try:
                if process is None:
                    process = self._processes[pid] = psutil.Process(pid)
                    process.cpu_percent(None)  # the first reading only starts the clock
                with process.oneshot():
                    usage.cpu_percent += process.cpu_percent(None)
                    usage.rss_bytes += process.memory_info().rss
                    usage.threads += process.num_threads()
                usage.processes += 1
            except (psutil.Error, OSError):
                self._processes.pop(pid, None)
        self._usage = usage


def _cells(row: Row, off_cpu: bool = False) -> tuple[Text, ...]:
    # Text, not strings: names like "[unknown]" or "[builtin] X" are not markup.
    return (
        Text(f"{row.own_percent:.1f}"),
        Text(f"{row.total_percent:.1f}"),
        Text(_duration(row.own_seconds)),
        Text(_duration(row.total_seconds)),
        *((Text(_duration(row.off_cpu_seconds)),) if off_cpu else ()),
        Text(row.tier),
        Text(printable(row.key.function)),
        Text(printable(_short_location(row))),
    )


def _short_location(row: Row) -> str:
    """The last two parts of the path and the line: the line must stay visible."""
    file = row.key.file
    parts = file.replace("\\", "/").split("/")
    short = "/".join(parts[-2:]) if file.startswith("/") and len(parts) > 3 else file
    return f"{short}:{row.key.line}" if row.key.line else short


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.2f}s"
    return f"{int(seconds // 60)}m{seconds % 60:04.1f}s"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"
