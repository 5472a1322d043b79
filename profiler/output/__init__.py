"""Output formats: choosing one by extension, and writing files safely."""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TextIO

from profiler.model.profile import Profile
from profiler.model.raw import write_raw
from profiler.output.callgrind import write_callgrind
from profiler.output.cpuprofile import write_cpuprofile
from profiler.output.folded import write_folded
from profiler.output.pprof import write_pprof
from profiler.output.speedscope import write_speedscope
from profiler.output.svg import write_svg
from profiler.safety.users import RunAs

Writer = Callable[[Profile, IO[bytes]], None]


def write_text(stream: IO[bytes], write: Callable[[TextIO], None]) -> None:
    """Let a text writer stream UTF-8 into a binary file, leaving it open."""
    text = io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="\n")  # type: ignore[arg-type]
    write(text)
    text.flush()
    text.detach()


def _text(write: Callable[[Profile, TextIO], None]) -> Writer:
    def write_bytes(profile: Profile, stream: IO[bytes]) -> None:
        write_text(stream, lambda text: write(profile, text))

    return write_bytes


# Every writer streams into the file it is given.
WRITERS: dict[str, Writer] = {
    "folded": _text(write_folded),
    "svg": _text(write_svg),
    "speedscope": write_speedscope,
    "cpuprofile": write_cpuprofile,
    "pprof": write_pprof,
    "callgrind": write_callgrind,
    "jitprof": write_raw,
}

EXTENSIONS: dict[str, str] = {
    ".folded": "folded",
    ".txt": "folded",
    ".svg": "svg",
    ".speedscope.json": "speedscope",
    ".cpuprofile": "cpuprofile",
    ".pb.gz": "pprof",
    ".pprof": "pprof",
    ".jitprof": "jitprof",
    "callgrind.out.*": "callgrind",
}
CALLGRIND_PREFIX = "callgrind.out"


class UnknownFormat(ValueError):
    pass


@dataclass(frozen=True)
class OutputRequest:
    path: Path
    format_name: str


@dataclass(frozen=True)
class WrittenOutput:
    requested: Path
    written: Path | None  # None when nothing could be written at all
    error: str = ""  # why the requested path was not used


def format_for(path: Path, forced: str | None) -> str:
    if forced:
        if forced not in WRITERS:
            raise UnknownFormat(f"unknown format {forced!r} (known: {', '.join(sorted(WRITERS))})")
        return forced
    if path.name.startswith(CALLGRIND_PREFIX):
        return "callgrind"
    for suffix, name in EXTENSIONS.items():
        if path.name.endswith(suffix):
            return name
    raise UnknownFormat(
        f"cannot tell the format of {path} from its extension "
        f"(known: {', '.join(sorted(EXTENSIONS))}); use --format"
    )


def render(profile: Profile, format_name: str) -> bytes:
    buffer = io.BytesIO()
    WRITERS[format_name](profile, buffer)
    return buffer.getvalue()


def write_to(stream: IO[bytes], profile: Profile, format_name: str) -> None:
    WRITERS[format_name](profile, stream)


def write_outputs(profile: Profile, requests: list[OutputRequest], owner: RunAs | None) -> list[WrittenOutput]:
    """Write each output; an unwritable path falls back to a temporary file."""
    return [write_path(request.path, _producer(profile, request.format_name), owner) for request in requests]


def _producer(profile: Profile, format_name: str) -> Callable[[IO[bytes]], None]:
    def produce(stream: IO[bytes]) -> None:
        WRITERS[format_name](profile, stream)

    return produce


def write_path(path: Path, produce: Callable[[IO[bytes]], None], owner: RunAs | None) -> WrittenOutput:
    """Stream into path; if it cannot be written, into a temporary file named after it."""
    try:
        _write_file(path, produce, owner)
        return WrittenOutput(path, path)
    except OSError as error:
        reason = error.strerror or str(error)
        return WrittenOutput(path, _write_fallback(path, produce, owner), reason)


def _write_file(path: Path, produce: Callable[[IO[bytes]], None], owner: RunAs | None) -> None:
    # Never follow a symlink planted at the output path: we are root.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(path, flags, 0o644)
    with os.fdopen(descriptor, "wb", buffering=1 << 20) as handle:
        _give_to(handle.fileno(), owner)
        produce(handle)


def _give_to(descriptor: int, owner: RunAs | None) -> None:
    if owner is not None:
        try:
            os.fchown(descriptor, owner.uid, owner.gid)
        except OSError:
            pass


def _write_fallback(path: Path, produce: Callable[[IO[bytes]], None], owner: RunAs | None) -> Path | None:
    for directory in (os.getcwd(), tempfile.gettempdir()):
        try:
            descriptor, name = tempfile.mkstemp(prefix="jitprof-", suffix="-" + path.name, dir=directory)
        except OSError:
            continue
        with os.fdopen(descriptor, "wb", buffering=1 << 20) as handle:
            _give_to(handle.fileno(), owner)
            produce(handle)
        os.chmod(name, 0o644)
        return Path(name)
    return None
