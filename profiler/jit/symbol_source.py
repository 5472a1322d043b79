"""What a run asks of a source of names for JIT code (V8's objects, V8's
code log, jitdumps, perf maps, the JVM's maps), in one interface: a source is
added once, with all of it, and cannot be half-registered. The symbolizer
asks for frames and for what the whole-stack cache needs (epoch); the run
tells it which processes to watch and forget, and asks what to tell the user
and which files to remove. What a source has no use for it inherits from
here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from profiler.kernel.address_spaces import KnownMapping
from profiler.kernel.events import RawSample, StackCopy, V8FrameSlots
from profiler.kernel.late_walks import WalkedFrame
from profiler.kernel.procmaps import MapEntry
from profiler.model.profile import Frame


@dataclass(frozen=True)
class RecordedFrames:
    """The frames of a frame the kernel recorded a runtime's words for:
    outermost first; keep_native: the address's own (native) frame stays
    below them as the leaf (an interpreter's handler, say)."""

    frames: tuple[Frame, ...]
    keep_native: bool


class CodeLifetime(Protocol):
    """When the code a source named at an address held it, as far as is known now."""

    def names_sample_at(self, time_ns: int) -> bool:
        """Was the code there at time_ns the one named (so the same frames name a sample then)?"""
        ...


class JitSymbolSource:
    def async_callers(self, sample: RawSample) -> tuple[Frame, ...] | None:
        """The async functions awaiting a sample's code, as the kernel read
        them (sample.async_frames), named and outermost first; None: not
        known here (or a chain that cannot be named whole from its start)."""
        return None

    def expand(self, pid: int, time_ns: int, address: int, caller: bool = False) -> tuple[Frame, ...] | None:
        """The JIT code at an address at a sample time (a caller's: its return
        address - 1), as its source frames (inlined functions included),
        outermost first; None: not known here."""
        return None

    def code_lifetime(self, pid: int, address: int) -> CodeLifetime | None:
        """(Just after expand named address.) What says at which times the
        frames it gave name the code there, so that the symbolizer may keep
        them for later samples; None: ask expand each time (code this source
        cannot follow may move or be replaced unseen)."""
        return None

    def leaf_caller_skipped(self, pid: int, time_ns: int, leaf: int) -> bool:
        """Did the kernel's walk of a sample skip its leaf's caller? A leaf
        caught before its frame was built (or after it was taken down) has
        the caller's frame pointer: a frame-pointer step from it lands on the
        caller's caller. Only a source that knows where the kernel could not
        tell so answers True."""
        return False

    def expand_recorded(
        self, pid: int, address: int, record: V8FrameSlots, leaf: bool, time_ns: int = 0
    ) -> RecordedFrames | None:
        """The frames of a JS (or interpreted Java) frame from what the kernel
        read of it with the sample taken at time_ns (address: a leaf's pc, or
        a caller's call instruction); None: not known here."""
        return None

    def note_sample(self, sample: RawSample) -> None:
        """(Sampling thread: must not block.) A sample was just taken: a
        source that can only read while the process lives may start on it."""
        return None

    def record_walked_frames(self, pid: int, frames: list[WalkedFrame], stack: StackCopy) -> tuple[V8FrameSlots, ...]:
        """Frames walked in user space (from a stack copy): the records the
        kernel would have sent for those of this source's runtime."""
        return ()

    def resolve(self, pid: int, mapping: KnownMapping, address: int, time_ns: int = 0) -> Frame | None:
        """One frame for the code at an address of any mapping (after the ELF
        file's own names), for a sample taken at time_ns (0: now)."""
        return None

    def maps_changed(self, pid: int, entries: Sequence[MapEntry]) -> None:
        """pid's executable mappings were just read (entries) and one is a
        jitdump (a runtime maps its dump so). (Main thread: open, not read.)"""

    def resolve_file_code(self, pid: int, mapping: KnownMapping, address: int, time_ns: int = 0) -> Frame | None:
        """A frame for code in a file's mapping that the file does not name
        (V8 maps its embedded builtins again from a stripped binary; its perf
        map names them there). Only a source that names such code answers:
        asking one for every unnamed native frame would look for its files
        before the runtime writes them."""
        return None

    def epoch(self, pid: int) -> tuple[int, int]:
        """(revision, time of its latest news) of what this source knows of
        pid: while it stays the same, the source names pid's code the same."""
        return (0, 0)

    def samples_held(self, pid: int, until_ns: int) -> None:
        """(The symbolizer's thread.) pid's samples taken by until_ns wait to
        be named after it exits: a source whose names carry no times notes
        what it could name them by now."""
        return None

    def waiting_for(self, pid: int, time_ns: int) -> bool:
        """Will this source know more of pid's code at time_ns? (Its samples wait.)"""
        return False

    def read_all(self) -> None:
        """The run is over and the runtimes have flushed: read once more, to the end."""
        return None

    # The run's side ---------------------------------------------------------

    def watch(self, pid: int) -> None:
        """A process is followed, or has just exec'd: note what it runs."""
        return None

    def has_source(self, pid: int) -> bool:
        """Does this source name some of pid's JIT code?"""
        return False

    def forget(self, pid: int, remove_as: int | None) -> list[str]:
        """A process long gone: let what is known of it go (remove_as: remove
        the files jitprof made it write, as their owner). Returns the warnings
        about it to give at the end of the run."""
        return []

    def warnings(self) -> list[str]:
        """At the end of the run: what went wrong with the processes still known."""
        return []

    def remove_files(self, owner_uid: int) -> None:
        """The run is over: remove the files the injected flags made its processes write."""
        return None

    def remove_asked_files(self) -> None:
        """The run is over: remove the files jitprof itself asked processes to write (attached ones too)."""
        return None

    def close(self) -> None:
        return None
