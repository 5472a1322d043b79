"""When to look again for files a process may start writing later (a perf
map, a jitdump, a V8 log): soon at first, then less and less often while
none turns up. A process that never writes one (node under --all, a JVM
without its agent) costs a look every RESCAN_MAX_S, not five a second, and
one whose file comes late is still found within RESCAN_MAX_S, while its
first samples wait for names (symbolizer's PARK_MAX_S)."""

from __future__ import annotations

from dataclasses import dataclass

RESCAN_FIRST_S = 0.2
RESCAN_MAX_S = 1.6


@dataclass
class Rescan:
    """When to look again for something a process may still write."""

    next_at: float = 0.0
    interval_s: float = RESCAN_FIRST_S

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def looked(self, now: float, found: bool) -> None:
        """A look at `now`; found: it turned up something new."""
        if found:
            self.interval_s = RESCAN_FIRST_S
        self.next_at = now + self.interval_s
        if not found:
            self.interval_s = min(self.interval_s * 2, RESCAN_MAX_S)
