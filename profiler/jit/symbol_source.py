"""What the symbolizer asks of a source of names for JIT code (V8's code log,
jitdumps, perf maps, the JVM's maps), in one interface: a source is added
once, with all of it, and cannot be half-registered. What a source has no
use for it inherits from here."""

from __future__ import annotations

from dataclasses import dataclass

from profiler.kernel.events import V8FrameSlots
from profiler.kernel.mappings import KnownMapping
from profiler.model.profile import Frame


@dataclass(frozen=True)
class RecordedFrames:
    """The frames of a frame the kernel recorded a runtime's words for:
    outermost first; keep_native: the address's own (native) frame stays
    below them as the leaf (an interpreter's handler, say)."""

    frames: tuple[Frame, ...]
    keep_native: bool


class JitSymbolSource:
    def expand(self, pid: int, time_ns: int, address: int) -> tuple[Frame, ...] | None:
        """The JIT code at an address at a sample time, as its source frames
        (inlined functions included), outermost first; None: not known here."""
        return None

    def expand_recorded(self, pid: int, address: int, record: V8FrameSlots, leaf: bool) -> RecordedFrames | None:
        """The frames of a JS frame from what the kernel read of it with the
        sample (address: a leaf's pc, or a caller's call instruction); None:
        not known here."""
        return None

    def resolve(self, pid: int, mapping: KnownMapping, address: int) -> Frame | None:
        """One frame for the code at an address of any mapping (after the ELF file's own names)."""
        return None

    def epoch(self, pid: int) -> tuple[int, int]:
        """(revision, time of its latest news) of what this source knows of
        pid: while it stays the same, the source names pid's code the same."""
        return (0, 0)

    def waiting_for(self, pid: int, time_ns: int) -> bool:
        """Will this source know more of pid's code at time_ns? (Its samples wait.)"""
        return False

    def read_all(self) -> None:
        """The run is over and the runtimes have flushed: read once more, to the end."""
        return None
