"""Profiles waiting to be sent, on disk, bounded by bytes: the oldest go
first when it is full, and are counted. A restarted jitprof sends what an
earlier one left.

The directory is root's alone (created 0700; refused if anyone else owns it
or could write in it or a directory above it), and every file is opened
relative to its descriptor, never followed through a link.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from profiler.safety.files import UnsafePath, create_exclusive, open_root_directory

_ENTRY = re.compile(r"(\d{12})\.push\Z")
_TEMPORARY_PREFIX = ".new-"


class SpoolError(Exception):
    """The spool directory cannot be used; the message says why."""


@dataclass(frozen=True)
class SpooledProfile:
    """A profile kept on disk until the store takes it."""

    name: str
    query: dict[str, str]
    profile: bytes


@dataclass
class SpoolStats:
    """What the spool had to drop."""

    dropped: int = 0  # the oldest, for room (or that could not be written)
    dropped_bytes: int = 0


class Spool:
    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.stats = SpoolStats()
        self._descriptor = _open_private_directory(directory)
        self._sizes: dict[str, int] = {}  # entry name -> bytes, oldest first
        self._total = 0
        for name in sorted(os.listdir(self._descriptor)):
            info = os.stat(name, dir_fd=self._descriptor, follow_symlinks=False)
            if name.startswith(_TEMPORARY_PREFIX):
                os.unlink(name, dir_fd=self._descriptor)  # a write an earlier run did not finish
            elif _ENTRY.match(name) and stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
                self._sizes[name] = info.st_size
                self._total += info.st_size
        self._next = max((int(name[:12]) for name in self._sizes), default=0) + 1
        self._make_room(0)

    def __len__(self) -> int:
        return len(self._sizes)

    @property
    def size(self) -> int:
        return self._total

    def put(self, query: dict[str, str], profile: bytes) -> bool:
        """Keep a profile to send; False if it could not be kept (counted)."""
        data = json.dumps(query, sort_keys=True).encode() + b"\n" + profile
        if len(data) > self.max_bytes:
            self._count_dropped(len(data))
            return False
        self._make_room(len(data))
        name = f"{self._next:012d}.push"
        self._next += 1
        temporary = _TEMPORARY_PREFIX + name
        try:
            descriptor = create_exclusive(self._descriptor, temporary)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(descriptor, view) :]
            finally:
                os.close(descriptor)
            os.rename(temporary, name, src_dir_fd=self._descriptor, dst_dir_fd=self._descriptor)
        except OSError:
            try:
                os.unlink(temporary, dir_fd=self._descriptor)
            except OSError:
                pass
            self._count_dropped(len(data))  # the disk is full or failing: this one is lost, the run goes on
            return False
        self._sizes[name] = len(data)
        self._total += len(data)
        return True

    def oldest(self) -> SpooledProfile | None:
        while self._sizes:
            name = next(iter(self._sizes))
            entry = self._read(name)
            if entry is not None:
                return entry
            self.remove(name)  # damaged or replaced: not ours to send
        return None

    def remove(self, name: str) -> None:
        size = self._sizes.pop(name, None)
        if size is not None:
            self._total -= size
            try:
                os.unlink(name, dir_fd=self._descriptor)
            except OSError:
                pass

    def close(self) -> None:
        os.close(self._descriptor)

    def _read(self, name: str) -> SpooledProfile | None:
        try:
            descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self._descriptor)
        except OSError:
            return None
        try:
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_size > self.max_bytes:
                return None
            with os.fdopen(os.dup(descriptor), "rb") as stream:
                data = stream.read(self.max_bytes + 1)
        except OSError:
            return None
        finally:
            os.close(descriptor)
        head, newline, profile = data.partition(b"\n")
        try:
            query = json.loads(head) if newline else None
        except ValueError:
            return None
        if not isinstance(query, dict) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in query.items()
        ):
            return None
        return SpooledProfile(name, query, profile)

    def _make_room(self, incoming: int) -> None:
        while self._sizes and self.size + incoming > self.max_bytes:
            name = next(iter(self._sizes))
            self._count_dropped(self._sizes[name])
            self.remove(name)

    def _count_dropped(self, size: int) -> None:
        self.stats.dropped += 1
        self.stats.dropped_bytes += size


def make_directory(directory: Path) -> None:
    """The directory, made root's alone as a spool's is (a spool's parent)."""
    os.close(_open_private_directory(directory))


def _open_private_directory(directory: Path) -> int:
    try:
        return open_root_directory(directory, 0o700) if os.geteuid() == 0 else _own_directory(directory)
    except UnsafePath as error:
        raise SpoolError(f"cannot use the spool directory {directory}: {error}") from error


def _own_directory(directory: Path) -> int:
    """Not root (tests): the directory must be this user's alone."""
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise UnsafePath(f"cannot create it: {error.strerror}") from error
    try:
        descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise UnsafePath("it is a symbolic link" if error.errno == errno.ELOOP else str(error.strerror)) from error
    info = os.fstat(descriptor)
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.close(descriptor)
        raise UnsafePath(f"it belongs to uid {info.st_uid} or others can write in it")
    return descriptor
