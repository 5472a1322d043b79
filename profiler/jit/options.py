"""Flags added to an options variable a runtime reads (NODE_OPTIONS,
JAVA_TOOL_OPTIONS), once, with the user's own kept as written."""

from __future__ import annotations

import shlex


def merge_options(existing: str | None, flags: tuple[str, ...]) -> str:
    """NODE_OPTIONS (or JAVA_TOOL_OPTIONS) with the flags added once, the user's kept as written."""
    text = existing or ""
    try:
        present = set(shlex.split(text))
    except ValueError:  # unbalanced quotes: node would reject it anyway
        present = set(text.split())
    missing = [flag for flag in flags if flag not in present]
    return " ".join(part for part in (text.strip(), *missing) if part)
