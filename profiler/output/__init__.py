"""Output formats: choosing one by extension, and writing files safely."""

from __future__ import annotations

import errno
import importlib
import io
import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TextIO

from profiler.model.profile import Profile
from profiler.output import distinct_names
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


# name -> (module, function, writes text): writers are imported when used,
# not when a run starts.
_WRITER_FUNCTIONS = {
    "folded": ("profiler.output.folded", "write_folded", True),
    "svg": ("profiler.output.svg", "write_svg", True),
    "html": ("profiler.output.html", "write_html", True),
    "speedscope": ("profiler.output.speedscope", "write_speedscope", False),
    "cpuprofile": ("profiler.output.cpuprofile", "write_cpuprofile", False),
    "pprof": ("profiler.output.pprof", "write_pprof", False),
    "callgrind": ("profiler.output.callgrind", "write_callgrind", False),
    "jitprof": ("profiler.model.raw", "write_raw", False),
}


_loaded_writers: dict[str, Writer] = {}


def writer(name: str) -> Writer:
    """The writer of a format, imported on first use (KeyError if unknown).
    Every writer streams into the file it is given."""
    found = _loaded_writers.get(name)
    if found is None:
        module_name, function_name, text = _WRITER_FUNCTIONS[name]
        function = getattr(importlib.import_module(module_name), function_name)
        found = _loaded_writers[name] = _text(function) if text else function
    return found


FORMATS: tuple[str, ...] = tuple(_WRITER_FUNCTIONS)

EXTENSIONS: dict[str, str] = {
    ".folded": "folded",
    ".txt": "folded",
    ".svg": "svg",
    ".html": "html",
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
    """An output asked for: a path and its format."""

    path: Path
    format_name: str


@dataclass(frozen=True)
class WrittenOutput:
    """Where an output was written, or why not."""

    requested: Path
    written: Path | None  # None when nothing could be written at all
    error: str = ""  # why the requested path was not used
    rescue: bool = False  # the raw profile, saved because other outputs failed


def format_for(path: Path, forced: str | None) -> str:
    if forced:
        if forced not in FORMATS:
            raise UnknownFormat(f"unknown format {forced!r} (known: {', '.join(sorted(FORMATS))})")
        return forced
    if path.name.startswith(CALLGRIND_PREFIX):
        return "callgrind"
    for suffix, name in EXTENSIONS.items():
        if path.name.endswith(suffix):
            return name
    raise UnknownFormat(
        f"cannot tell the format of {path} from its extension (known: {', '.join(sorted(EXTENSIONS))}); use --format"
    )


def render(profile: Profile, format_name: str) -> bytes:
    buffer = io.BytesIO()
    writer(format_name)(_as_shown(profile, format_name), buffer)
    return buffer.getvalue()


def write_to(stream: IO[bytes], profile: Profile, format_name: str) -> None:
    writer(format_name)(_as_shown(profile, format_name), stream)


def _as_shown(profile: Profile, format_name: str) -> Profile:
    """Every format but the raw profile (which keeps what report decides from) names functions apart."""
    return profile if format_name == "jitprof" else distinct_names.with_distinct_names(profile)


def _producer(profile: Profile, format_name: str) -> Callable[[IO[bytes]], None]:
    def produce(stream: IO[bytes]) -> None:
        writer(format_name)(profile, stream)

    return produce


def write_path(path: Path, produce: Callable[[IO[bytes]], None], owner: RunAs | None) -> WrittenOutput:
    """Write path as its owner-to-be (the sudo caller) would be allowed to;
    if that fails, a file named after it in the working directory or the
    temporary directory. A failed write leaves no partial file."""
    try:
        _as_user(owner, lambda: _replace(path, produce))
        return WrittenOutput(path, path)
    except OSError as error:
        reason = error.strerror or str(error)
        return WrittenOutput(path, _write_fallback(path, produce, owner), reason)


def _replace(path: Path, produce: Callable[[IO[bytes]], None], devices: bool = True) -> None:
    """A new file beside path, renamed over it once complete: an existing
    file is replaced, never truncated or re-owned. A device or FIFO the user
    names (/dev/stdout) is written in place (with devices; a FIFO with no
    reader is an error, not a wait); a symlink is refused."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISLNK(info.st_mode):
        raise OSError(errno.ELOOP, "is a symbolic link (refused: jitprof runs as root)")
    if info is not None and not stat.S_ISREG(info.st_mode) and not stat.S_ISDIR(info.st_mode):
        if not devices:
            raise OSError(errno.EEXIST, "exists and is not a regular file")
        descriptor = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        os.set_blocking(descriptor, True)
        with os.fdopen(descriptor, "wb", buffering=1 << 20) as handle:
            produce(handle)
        return
    directory = path.parent if str(path.parent) else Path(".")
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(descriptor, "wb", buffering=1 << 20) as handle:
            produce(handle)
            os.fchmod(handle.fileno(), 0o644)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _as_user(owner: RunAs | None, action: Callable[[], None]) -> None:
    """Run action with owner's credentials (in a child process that drops
    root), so files are created, replaced and refused as owner's own would
    be; as ourselves when there is no one else to act for. Raises OSError."""
    if owner is None or owner.uid == os.geteuid():
        action()
        return
    report_read, report_write = os.pipe()
    child = os.fork()
    if child == 0:  # nothing of the parent's state is touched from here
        code = 1
        try:
            os.close(report_read)
            os.setgroups(owner.groups)
            os.setgid(owner.gid)
            os.setuid(owner.uid)
            action()
            code = 0
        except OSError as error:
            os.write(report_write, f"{error.errno or 0}:{error.strerror or error}".encode()[:4000])
        except BaseException as error:  # noqa: BLE001  (must never return into the parent's code)
            os.write(report_write, f"0:{type(error).__name__}: {error}".encode()[:4000])
        finally:
            os._exit(code)
    os.close(report_write)
    with os.fdopen(report_read, "rb") as report_pipe:
        report = report_pipe.read()
    _, status = os.waitpid(child, 0)
    if status != 0:
        number, _, message = report.decode("utf-8", "replace").partition(":")
        raise OSError(int(number) if number.isdigit() else 0, message or f"writer exited with status {status}")


def _write_fallback(path: Path, produce: Callable[[IO[bytes]], None], owner: RunAs | None) -> Path | None:
    for directory in _fallback_directories():
        fallback = Path(directory) / f"jitprof-{os.getpid()}-{os.urandom(3).hex()}-{path.name}"
        try:
            _as_user(owner, lambda target=fallback: _replace(target, produce, devices=False))  # type: ignore[misc]
        except OSError:
            continue
        return fallback
    return None


def _fallback_directories() -> list[str]:
    try:
        here = [os.getcwd()]
    except OSError:
        here = []
    return [*here, tempfile.gettempdir(), "/var/tmp"]


RAW_RESCUE = Path("profile.jitprof")


def write_outputs(
    profile: Profile, requests: list[OutputRequest], owner: RunAs | None, shown: Profile | None = None
) -> list[WrittenOutput]:
    """Write each output, each on its own (one failing never stops the
    others); if any could not be written at all, the raw profile is saved
    where it can be, so `jitprof report` can write it later. shown: a view
    of the profile (--js-only) for every format but the raw one, which keeps
    everything."""
    named = distinct_names.with_distinct_names(profile if shown is None else shown)  # every format but the raw one
    written = [
        write_path(request.path, _producer(profile if request.format_name == "jitprof" else named, request.format_name), owner)
        for request in requests
    ]
    if any(output.written is None for output in written) and not any(
        output.written is not None and request.format_name == "jitprof" for output, request in zip(written, requests)
    ):
        rescued = _write_fallback(RAW_RESCUE, _producer(profile, "jitprof"), owner)
        written.append(WrittenOutput(RAW_RESCUE, rescued, rescue=True))
    return written
