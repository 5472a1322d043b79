"""Finding a script's source map in the files of the process that ran it.

A script names its map in its last `//# sourceMappingURL=` comment: a file
(relative to the script, an absolute path or a file: URL) or a data: URL
holding the map itself. The script and the map are files the target
controls: each is opened inside the target's root (/proc/PID/root) with no
symlink anywhere on its path, must be a regular file under a size cap, and
is read only if the target's own user could reach and read it (every
directory on the way searchable by that user, the file readable: root must
not show in a profile what the target could not see). Both are kept open, so the
frames of a program that has exited are still mapped at the end of the run.
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
import posixpath
import re
import stat
import urllib.parse
from dataclasses import dataclass
from typing import BinaryIO

from profiler.kernel.proc_status import status_field
from profiler.safety.files import open_in_root_as

MAX_SCRIPT_BYTES = 64 << 20
MAX_MAP_BYTES = 128 << 20  # a server bundle's map is tens of MB
TAIL_BYTES = 64 << 10
MARKER = b"sourceMappingURL="
_PREFIXES = (b"//# ", b"//@ ", b"/*# ", b"/*@ ")
_URL_END = re.compile(rb"[\s'\"*]")


class SourceMapUnavailable(Exception):
    """The script names a map that cannot be read; the message says why, in a few words."""


@dataclass(frozen=True)
class TargetUser:
    """The user and groups a target's files are read as."""

    uid: int
    gids: frozenset[int]

    @classmethod
    def of_process(cls, pid: int) -> TargetUser | None:
        uids, gids, groups = status_field(pid, "Uid:"), status_field(pid, "Gid:"), status_field(pid, "Groups:")
        if not uids or len(uids) < 4 or not gids or len(gids) < 4:
            return None
        # The filesystem ids are the ones the kernel checks a read against.
        return cls(int(uids[3]), frozenset([int(gids[3]), *(int(group) for group in groups or [])]))

    def may_read(self, info: os.stat_result) -> bool:
        return self._allowed(info, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)

    def may_search(self, info: os.stat_result) -> bool:
        """May the user pass through this directory (as the kernel decides, ACLs aside)?"""
        return self._allowed(info, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)

    def _allowed(self, info: os.stat_result, owner_bit: int, group_bit: int, other_bit: int) -> bool:
        if self.uid == 0:
            return True
        if info.st_uid == self.uid:
            return bool(info.st_mode & owner_bit)
        if info.st_gid in self.gids:
            return bool(info.st_mode & group_bit)
        return bool(info.st_mode & other_bit)


@dataclass
class ScriptFiles:
    """A script that names a source map, and its map, open."""

    script: BinaryIO
    source_map: BinaryIO | None  # an external map; None: the map is the script's data: URL
    data_url: tuple[int, int]  # where the data: URL is in the script (an inline map)
    base: str  # what the map's sources are relative to: the map's directory

    def map_text(self) -> bytes:
        """The map's JSON (SourceMapUnavailable if its data: URL is not one)."""
        if self.source_map is not None:
            return _read_all(self.source_map, MAX_MAP_BYTES)
        start, end = self.data_url
        return decode_data_url(os.pread(self.script.fileno(), end - start, start))

    def script_text(self) -> bytes:
        return _read_all(self.script, MAX_SCRIPT_BYTES)

    def close(self) -> None:
        self.script.close()
        if self.source_map is not None:
            self.source_map.close()


def script_path(script: str) -> str | None:
    """The file of a script V8 names by path or file: URL; None for node's
    own modules, eval'd code and anything fetched."""
    if script.startswith("file://"):
        script = urllib.parse.unquote(script[len("file://") :])
    return script if script.startswith("/") else None


def find_source_map(root: str, script: str, user: TargetUser) -> ScriptFiles | None:
    """The script's files, in the target's root (/proc/PID/root), if it
    names a source map; None if it names none (or is not a file).
    SourceMapUnavailable when it names one that cannot be read; OSError when
    the script itself cannot be."""
    path = script_path(script)
    if path is None:
        return None
    handle = _open_readable(root, path, MAX_SCRIPT_BYTES, user)
    try:
        found = _last_comment(handle)
        if found is None:
            handle.close()
            return None
        url, start, end = found
        if url.startswith(b"data:"):
            return ScriptFiles(handle, None, (start, end), posixpath.dirname(path))
        map_path = _map_path(path, url)
        try:
            source_map = _open_readable(root, map_path, MAX_MAP_BYTES, user)
        except FileNotFoundError:
            handle.close()  # packages often ship the comment without the map: nothing to say
            return None
        except OSError as error:
            raise SourceMapUnavailable(f"{map_path}: {_reason(error)}") from error
        return ScriptFiles(handle, source_map, (0, 0), posixpath.dirname(map_path))
    except BaseException:
        handle.close()
        raise


def _open_readable(root: str, path: str, max_bytes: int, user: TargetUser) -> BinaryIO:
    """Opened only if the target's user could: every directory on the way
    searchable by it (a 0644 map in root's 0700 directory is not), the file
    readable by it."""
    return open_in_root_as(root, path, max_bytes, user.may_search, user.may_read)


def _reason(error: OSError) -> str:
    if error.errno == errno.ELOOP:  # RESOLVE_NO_SYMLINKS met one
        return "a symbolic link on its path (not followed)"
    return error.strerror or str(error)


def _map_path(script_path: str, url: bytes) -> str:
    text = url.decode("utf-8", "replace")
    if "://" in text[:16] and not text.startswith("file://"):
        raise SourceMapUnavailable(f"{text[:80]} is not a local file (not fetched)")
    if text.startswith("file://"):
        text = text[len("file://") :]
    text = urllib.parse.unquote(text.partition("?")[0].partition("#")[0])
    return posixpath.normpath(posixpath.join(posixpath.dirname(script_path), text))


def _last_comment(handle: BinaryIO) -> tuple[bytes, int, int] | None:
    """The URL of the script's last sourceMappingURL comment, and where it
    is in the file. Only its last line is searched (and what precedes it in
    the chunk it begins in): chunks are read from the end, each looked at
    alone, until one holds the newline before it; then that part is read
    once, so a bundle whose last line is a 50 MB inline map costs one pass."""
    descriptor = handle.fileno()
    size = os.fstat(descriptor).st_size
    start, content_end = size, None  # content_end: where the file's trailing whitespace begins
    while start > 0:
        start = max(0, start - TAIL_BYTES)
        chunk = os.pread(descriptor, min(TAIL_BYTES, size - start), start)
        if content_end is None and chunk.strip():
            content_end = start + len(chunk.rstrip())
        if content_end is not None and chunk.rfind(b"\n", 0, max(content_end - start, 0)) >= 0:
            break
    region_start = max(0, start - len(_PREFIXES[0]))  # a comment's prefix may end the chunk before
    region = os.pread(descriptor, size - region_start, region_start)
    search_end = len(region)
    while (marker := region.rfind(MARKER, 0, search_end)) >= 0:
        if region[marker - 4 : marker] in _PREFIXES:
            url_start = marker + len(MARKER)
            ending = _URL_END.search(region, url_start)
            url_end = ending.start() if ending else len(region)
            return region[url_start:url_end], region_start + url_start, region_start + url_end
        search_end = marker
    return None


def decode_data_url(url: bytes) -> bytes:
    """The bytes a data: URL holds (base64 or percent-encoded)."""
    header, comma, payload = url.partition(b",")
    if not header.startswith(b"data:") or not comma:
        raise SourceMapUnavailable("its data: URL is malformed")
    if header.endswith(b";base64"):
        try:
            return base64.b64decode(payload, validate=True)
        except binascii.Error as error:
            raise SourceMapUnavailable("its data: URL is not base64") from error
    return urllib.parse.unquote_to_bytes(payload)


def _read_all(handle: BinaryIO, max_bytes: int) -> bytes:
    size = os.fstat(handle.fileno()).st_size
    if size > max_bytes:
        raise SourceMapUnavailable(f"it has grown to {size:,} bytes, over the {max_bytes:,} byte limit")
    return os.pread(handle.fileno(), size, 0)
