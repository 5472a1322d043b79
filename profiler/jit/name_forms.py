"""What the runtimes' name forms share: where a frame's file is shown from."""

from __future__ import annotations


def base_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1] or path
