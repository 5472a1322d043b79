"""The table of cost goals `make bench` writes first: rows written by a run
read back by the next, and a section re-run alone replaces only its rows."""

from benchmarks import goals
from benchmarks.run import _replace_sections


def test_rows_round_trip_through_the_report():
    rows = [
        goals.ratio_row("the program's own work", 1.02, 1.031, "What a run costs", "perf record: -0.5 %"),
        goals.ratio_row("a server's requests/s, `--pid`", 0.98, 0.993, "Cost of --off-cpu", at_least=True),
    ]
    assert [row.met for row in rows] == [False, True]
    assert (rows[0].goal, rows[0].measured) == ("≤ +2.0 %", "+3.1 %")
    assert (rows[1].goal, rows[1].measured) == ("≥ 98 %", "99.3 %")
    text = "\n".join(["# Benchmarks", "", *goals.section(rows, "Measured today."), "## Next", "", "prose"])
    assert goals.rows_in(text) == rows
    assert goals.rows_in("# Benchmarks\n\n## Other\n| a | b | c | d | yes | e |\n") == []


def test_a_section_re_run_alone_replaces_its_rows_and_keeps_the_others():
    earlier = [
        goals.GoalRow("warm run", "≤ +0.3 s", "+0.36 s", "perf record: +0.35 s", False, "What a run costs"),
        goals.GoalRow("server", "≥ 98 %", "99.3 %", "", True, "Cost of --off-cpu"),
    ]
    again = goals.GoalRow("warm run", "≤ +0.3 s", "+0.29 s", "perf record: +0.33 s", True, "What a run costs")
    new = goals.GoalRow("system calls", "≤ +2.0 %", "+0.1 %", "", True, "Other processes' system calls")
    assert goals.merged(earlier, [new, again]) == [again, earlier[1], new]
    report = "\n".join(["# Benchmarks", "", "header", "", "## What a run costs", "", "old table", ""])
    rewritten = _replace_sections(
        report,
        [goals.section(goals.merged(earlier, [again]), "Measured."), ["## What a run costs", "", "new table", ""]],
        ["run_cost"],
        first=goals.TITLE,
    )
    lines = rewritten.split("\n")
    assert lines.index(goals.TITLE) < lines.index("## What a run costs")  # the goals first
    assert "new table" in lines and "old table" not in lines
    assert goals.rows_in(rewritten) == [again, earlier[1]]
