"""Bun's own symbol sources, made (and this module imported) when a run finds
its first bun: a run without one does not import them. Its functions'
places (jit/bun/functions.py) are one store for the run, asked by the
jitdump source through the runtime's place_frame."""

from __future__ import annotations

from collections.abc import Callable

from profiler.jit.bun.functions import BunFunctions
from profiler.jit.bun.interpreter import BunInterpreterNames
from profiler.jit.symbol_source import JitSymbolSource
from profiler.model.profile import Frame

_FUNCTIONS = BunFunctions()


class BunPlaceNotes(JitSymbolSource):
    """Has a followed bun's scripts transpiled at once, while it lives, and
    says at the end of a run which processes' functions could not be placed."""

    def __init__(self, is_bun: Callable[[int], bool]) -> None:
        self._is_bun = is_bun

    def watch(self, pid: int) -> None:
        if self._is_bun(pid):
            _FUNCTIONS.prepare(pid)

    def close(self) -> None:
        _FUNCTIONS.stop()

    def warnings(self) -> list[str]:
        return [
            f"jitprof: note: bun (pid {pid}): {problem}, so its JavaScript frames are named without their scripts and lines"
            for pid, problem in _FUNCTIONS.problems().items()
        ]


def bun_sources(is_bun: Callable[[int], bool]) -> list[JitSymbolSource]:
    return [BunPlaceNotes(is_bun), BunInterpreterNames()]


def place_frame(pid: int, name: str, frame: Frame) -> Frame:
    return _FUNCTIONS.place_frame(pid, name, frame)
