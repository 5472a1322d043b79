"""Output formats: choosing one by extension, and writing files safely."""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from profiler.output.folded import write_folded
from profiler.output.svg import write_svg
from profiler.profile import Profile
from profiler.targets import RunAs

Writer = Callable[[Profile, TextIO], None]

WRITERS: dict[str, Writer] = {
    "folded": write_folded,
    "svg": write_svg,
}

EXTENSIONS: dict[str, str] = {
    ".folded": "folded",
    ".txt": "folded",
    ".svg": "svg",
}


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
    for suffix, name in EXTENSIONS.items():
        if path.name.endswith(suffix):
            return name
    raise UnknownFormat(
        f"cannot tell the format of {path} from its extension "
        f"(known: {', '.join(sorted(EXTENSIONS))}); use --format"
    )


def render(profile: Profile, format_name: str) -> bytes:
    buffer = io.StringIO()
    WRITERS[format_name](profile, buffer)
    return buffer.getvalue().encode("utf-8", "replace")


def write_outputs(profile: Profile, requests: list[OutputRequest], owner: RunAs | None) -> list[WrittenOutput]:
    """Write each output; an unwritable path falls back to a temporary file."""
    results = []
    for request in requests:
        data = render(profile, request.format_name)
        try:
            _write_file(request.path, data, owner)
            results.append(WrittenOutput(request.path, request.path))
        except OSError as error:
            reason = error.strerror or str(error)
            fallback = _write_fallback(request.path, data, owner)
            results.append(WrittenOutput(request.path, fallback, reason))
    return results


def _write_file(path: Path, data: bytes, owner: RunAs | None) -> None:
    # Never follow a symlink planted at the output path: we are root.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(path, flags, 0o644)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
        _give_to(handle.fileno(), owner)


def _give_to(descriptor: int, owner: RunAs | None) -> None:
    if owner is not None:
        try:
            os.fchown(descriptor, owner.uid, owner.gid)
        except OSError:
            pass


def _write_fallback(path: Path, data: bytes, owner: RunAs | None) -> Path | None:
    for directory in (os.getcwd(), tempfile.gettempdir()):
        try:
            descriptor, name = tempfile.mkstemp(prefix="jitprof-", suffix="-" + path.name, dir=directory)
        except OSError:
            continue
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            _give_to(handle.fileno(), owner)
        os.chmod(name, 0o644)
        return Path(name)
    return None
