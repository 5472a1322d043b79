"""The long runs (`make soak`, `make soak-push`) in docs/benchmarks.md: their
latest figures, taken from docs/soak.md and docs/soak-push.md (an hour each,
too long for `make bench` to run itself)."""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
RUNS = [
    ("soak.md", "`jitprof -- service` (make soak)"),
    ("soak-push.md", "`jitprof --all --push` (make soak-push)"),
]
EVERY_S = 600


def long_runs() -> list[str]:
    lines = ["## Long runs: memory, CPU, descriptors and kernel state over an hour", ""]
    found = False
    for name, title in RUNS:
        path = DOCS / name
        if not path.exists():
            continue
        text = path.read_text().splitlines()
        rows = [line for line in text if line.startswith("| ") and line[2:3].isdigit()]
        header = next((line for line in text if line.startswith("| seconds")), None)
        if not rows or header is None:
            continue
        found = True
        lines += [
            f"### {title}",
            "",
            f"From [docs/{name}]({name}), which says how it was made; every {EVERY_S // 60} minutes and the last row:",
            "",
        ]
        lines += [header, "| " + " | ".join("---" for _ in header.strip("|").split("|")) + " |"]
        shown, next_at = [], 0
        for row in rows:
            seconds = int(row.split("|")[1])
            if seconds >= next_at:
                shown.append(row)
                next_at = seconds - seconds % EVERY_S + EVERY_S
        if rows[-1] not in shown:
            shown.append(rows[-1])
        lines += shown
        summary = [line for line in text if line.startswith("jitprof: ")]
        if summary:
            lines += ["", "```", *summary, "```"]
        lines.append("")
    if not found:
        lines += ["No long run recorded yet: `make soak`, `make soak-push`.", ""]
    return lines
