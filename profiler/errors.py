"""Errors a user can hit: one clear line, a hint, and an exit status."""

from __future__ import annotations


class JitprofError(Exception):
    """A condition the user can fix; printed as one line plus a hint."""

    def __init__(self, message: str, hint: str = "", exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code

    def render(self) -> str:
        line = f"jitprof: error: {self.message}"
        if self.hint:
            line += f" (hint: {self.hint})"
        return line
