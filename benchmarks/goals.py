"""What jitprof's cost must stay within, in one table: each row a ratio or
difference against its baseline measured in the same run (the program
alone, interleaved rounds, medians), with perf or `node --cpu-prof` beside
it where they measure the same thing. The sections that measure them record
their rows here; `benchmarks.run` writes the table first in the report."""

from __future__ import annotations

import re
from dataclasses import dataclass

TITLE = "## Cost against its goals"
_HEADER = "| what | goal | measured | anchor, same rounds | met | details |"
_ROW = re.compile(
    r"^\| (?P<what>[^|]+) \| (?P<goal>[^|]+) \| (?P<measured>[^|]+) \| (?P<anchor>[^|]*) \| (?P<met>yes|no) \| (?P<details>[^|]*) \|$"
)


@dataclass(frozen=True)
class GoalRow:
    """One goal and what this run measured of it."""

    what: str
    goal: str
    measured: str
    anchor: str  # what perf or `node --cpu-prof` cost in the same rounds ("" where none measures it)
    met: bool
    details: str  # the section with the whole measurement


_recorded: list[GoalRow] = []


def record(row: GoalRow) -> None:
    """A section's measurement of a goal (the latest of the same `what` wins)."""
    _recorded[:] = [kept for kept in _recorded if kept.what != row.what]
    _recorded.append(row)


def recorded() -> list[GoalRow]:
    return list(_recorded)


def ratio_row(
    what: str, goal_ratio: float, measured_ratio: float, details: str, anchor: str = "", at_least: bool = False
) -> GoalRow:
    """A goal on a ratio to the baseline (1.02: at most 2 % more; with
    at_least, 0.98: at least 98 % of it), written as a change in percent."""
    met = measured_ratio >= goal_ratio if at_least else measured_ratio <= goal_ratio
    if at_least:
        goal, measured = f"≥ {100 * goal_ratio:.0f} %", f"{100 * measured_ratio:.1f} %"
    else:
        goal, measured = f"≤ {percent(goal_ratio)}", percent(measured_ratio)
    return GoalRow(what, goal, measured, anchor, met, details)


def percent(ratio: float) -> str:
    return f"{100 * (ratio - 1):+.1f} %"


def section(rows: list[GoalRow], measured_on: str) -> list[str]:
    """The table, rows in the order the sections ran."""
    return [
        TITLE,
        "",
        f"{measured_on} Each row against its baseline measured in the same rounds (medians of interleaved runs); "
        "the sections named hold the whole measurement and where what is not met goes.",
        "",
        _HEADER,
        "| --- | --- | --- | --- | --- | --- |",
        *(
            f"| {row.what} | {row.goal} | {row.measured} | {row.anchor} | {'yes' if row.met else 'no'} | {row.details} |"
            for row in rows
        ),
        "",
    ]


def rows_in(text: str) -> list[GoalRow]:
    """The rows of the table as an earlier run wrote it (none if it has none)."""
    lines = text.split("\n")
    if TITLE not in lines:
        return []
    rows = []
    for line in lines[lines.index(TITLE) + 1 :]:
        if line.startswith("## "):
            break
        found = _ROW.match(line)
        if found and found["what"] != "what":
            rows.append(
                GoalRow(found["what"], found["goal"], found["measured"], found["anchor"], found["met"] == "yes", found["details"])
            )
    return rows


def merged(earlier: list[GoalRow], new: list[GoalRow]) -> list[GoalRow]:
    """The earlier rows with those measured again replaced in place, new ones after."""
    by_what = {row.what: row for row in new}
    rows = [by_what.pop(row.what, row) for row in earlier]
    return [*rows, *(row for row in new if row.what in by_what)]
