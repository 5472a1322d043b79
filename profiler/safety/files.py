"""Files root creates or removes in directories a target controls.

A path under /proc/PID/cwd or /proc/PID/root is resolved anew on every use,
and the target can point it elsewhere in between (chdir, a swapped symlink).
So a directory is opened once and checked on its descriptor, and every
create, check and remove afterwards is relative to that descriptor, never
to a path: a target cannot steer root into a directory it does not own.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


class UnsafeDirectory(Exception):
    """The directory is not one root may write in for this target."""


def open_regular(path: str, max_bytes: int) -> BinaryIO:
    """A file a target may have put in our way, opened for reading: without
    blocking (a FIFO in its place would hold the thread in open() forever),
    then checked on the descriptor: a regular file, at most max_bytes.
    Raises OSError."""
    return _checked_regular(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), path, max_bytes)


def _checked_regular(descriptor: int, path: str, max_bytes: int) -> BinaryIO:
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, f"{path} is not a regular file")
        if info.st_size > max_bytes:
            raise OSError(errno.EFBIG, f"{path} is {info.st_size:,} bytes, over the {max_bytes:,} byte limit")
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


_OPENAT2 = 437  # x86-64 syscall number
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_IN_ROOT = 0x10


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def open_in_root(root: str, path: str, max_bytes: int, symlinks: bool = True) -> BinaryIO:
    """A file of a target's filesystem (root: /proc/PID/root), opened as
    open_regular does, with every component resolved inside that root: a
    symlink the target planted (to "/etc/shadow", or "../../..") stays in its
    own filesystem instead of reaching the host's. Without symlinks, a path
    with one anywhere in it is refused (ELOOP). Raises OSError."""
    root_descriptor = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        resolve = _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS | (0 if symlinks else _RESOLVE_NO_SYMLINKS)
        how = _OpenHow(os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC, 0, resolve)
        libc = ctypes.CDLL(None, use_errno=True)
        descriptor = libc.syscall(_OPENAT2, root_descriptor, path.lstrip("/").encode(), ctypes.byref(how), ctypes.sizeof(how))
        if descriptor < 0:
            error = ctypes.get_errno()
            raise OSError(error, f"{root}/{path.lstrip('/')}: {os.strerror(error)}")
    finally:
        os.close(root_descriptor)
    return _checked_regular(descriptor, path, max_bytes)


_RESOLVE_BENEATH = 0x08


def _openat2_beneath(directory: int, name: str, flags: int) -> int:
    how = _OpenHow(flags | os.O_CLOEXEC, 0, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS | _RESOLVE_NO_SYMLINKS)
    libc = ctypes.CDLL(None, use_errno=True)
    descriptor = libc.syscall(_OPENAT2, directory, name.encode("utf-8", "surrogateescape"), ctypes.byref(how), ctypes.sizeof(how))
    if descriptor < 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{name}: {os.strerror(error)}")
    return descriptor


def open_in_root_as(
    root: str, path: str, max_bytes: int, may_search: Callable[[os.stat_result], bool], may_read: Callable[[os.stat_result], bool]
) -> BinaryIO:
    """A file of a target's filesystem, opened only if the target's user
    could open it: one directory at a time from the root, each checked on
    its descriptor with may_search (the kernel's search permission for that
    user) before the next is opened from it, the file with may_read. No
    symbolic link anywhere (ELOOP), no `..` (EACCES), no path resolved twice.
    Raises OSError (PermissionError when the user could not reach it)."""
    parts = [part for part in path.split("/") if part and part != "."]
    if not parts or ".." in parts:
        raise PermissionError(errno.EACCES, "not a plain path", path)
    current = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in [None, *parts[:-1]]:
            if part is not None:
                following = _openat2_beneath(current, part, os.O_PATH | os.O_DIRECTORY)
                os.close(current)
                current = following
            if not may_search(os.fstat(current)):
                raise PermissionError(errno.EACCES, "its user may not reach it", path)
        descriptor = _openat2_beneath(current, parts[-1], os.O_RDONLY | os.O_NONBLOCK)
    finally:
        os.close(current)
    try:
        readable = may_read(os.fstat(descriptor))
    except BaseException:
        os.close(descriptor)
        raise
    if not readable:
        os.close(descriptor)
        raise PermissionError(errno.EACCES, "its user may not read it", path)
    return _checked_regular(descriptor, path, max_bytes)


def open_directory_for(path: str, owner_uid: int) -> int:
    """A descriptor of the directory at path (a /proc magic link is followed
    once, here), if the target's user owns it, or it is a shared sticky
    directory like /tmp (where no one else can remove or replace root's
    files). Raises UnsafeDirectory otherwise."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as error:
        raise UnsafeDirectory(f"{path}: {error.strerror}") from error
    info = os.fstat(descriptor)
    shared_sticky = info.st_uid == 0 and info.st_mode & stat.S_ISVTX and info.st_mode & stat.S_IWOTH
    if info.st_uid != owner_uid and not shared_sticky:
        os.close(descriptor)
        raise UnsafeDirectory(f"{path} belongs to uid {info.st_uid}, not the target's uid {owner_uid}")
    return descriptor


def create_exclusive(directory: int, name: str, mode: int = 0o600) -> int:
    """A new file in the directory; FileExistsError if the name is taken
    (by anything, a symlink included)."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"not a file name: {name!r}")
    return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=directory)


def claim_for(directory: int, name: str, uid: int, gid: int, mode: int = 0o644, tries: int = 8) -> bool:
    """Make name in the directory a new empty regular file of uid's, before a
    program of that user opens it by that path: whatever stood there (a link
    to root's files, a hard link, a FIFO) is removed first, never followed.
    In a sticky directory another user can put something back between the
    two steps: tried again, and False if the name could not be had."""
    for _ in range(tries):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=directory)
        try:
            descriptor = create_exclusive(directory, name, mode)
        except FileExistsError:
            continue
        try:
            os.fchown(descriptor, uid, gid)
            os.fchmod(descriptor, mode)
        finally:
            os.close(descriptor)
        return True
    return False


def private_directory(parent: int, name: str, uid: int, gid: int) -> int:
    """A descriptor of the directory name in parent (made if missing): owned
    by uid, open to no one else, not a link. Raises UnsafeDirectory when
    something else stands there."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=parent)
        os.chown(name, uid, gid, dir_fd=parent, follow_symlinks=False)
    try:
        descriptor = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except OSError as error:
        raise UnsafeDirectory(f"{name}: {error.strerror}") from error
    info = os.fstat(descriptor)
    if info.st_uid != uid or info.st_mode & 0o077:
        os.close(descriptor)
        raise UnsafeDirectory(f"{name} belongs to uid {info.st_uid} or is open to others")
    return descriptor


def remove_owned(directory: int, name: str, owner_uid: int, inode: int | None = None) -> bool:
    """Remove name from the directory if it is a regular file of owner_uid
    (and the given inode): what the target's runtime wrote because jitprof
    asked, never a link or another user's file put in its place."""
    if "/" in name or name in ("", ".", ".."):
        return False
    try:
        there = os.stat(name, dir_fd=directory, follow_symlinks=False)
        if not stat.S_ISREG(there.st_mode) or there.st_uid != owner_uid or (inode is not None and there.st_ino != inode):
            return False
        os.unlink(name, dir_fd=directory)
    except OSError:
        return False
    return True


def remove_if_same(directory: int, name: str, descriptor: int) -> bool:
    """Remove name from the directory only if it is still the file open at
    descriptor (not something put in its place)."""
    try:
        ours = os.fstat(descriptor)
        there = os.stat(name, dir_fd=directory, follow_symlinks=False)
        if (there.st_dev, there.st_ino) != (ours.st_dev, ours.st_ino):
            return False
        os.unlink(name, dir_fd=directory)
    except OSError:
        return False
    return True


def root_only(path: Path) -> bool:
    """Can only root change what path names? It and every directory above it
    belong to root and are writable by no one else, or are sticky (/tmp:
    others cannot rename or replace root's entries there)."""
    # A link on the way that someone else owns can be repointed after the check.
    absolute = path if path.is_absolute() else Path.cwd() / path
    for component in [absolute, *absolute.parents]:
        try:
            if os.lstat(component).st_uid != 0 and component.is_symlink():
                return False
        except OSError:
            return False
    try:
        resolved = path.resolve(strict=True)
    except OSError:
        return False
    for component in [resolved, *resolved.parents]:
        try:
            info = os.lstat(component)
        except OSError:
            return False
        if info.st_uid != 0:
            return False
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (component != resolved and info.st_mode & stat.S_ISVTX):
            return False
    return True


class UnsafePath(Exception):
    """A path root may not create or use; the message says which part and why."""


MAX_LINK_HOPS = 40


def open_root_directory(path: Path, create_mode: int | None = 0o700) -> int:
    """A descriptor of the directory at path (created with create_mode if
    missing), reached one component at a time from /, without following a
    link anyone but root could change: every directory on the way must be
    root's and writable by no one else (or sticky, as /tmp, except the last),
    a symbolic link on the way must be root's (the last may not be one), and
    the directory itself root's alone.
    Raises UnsafePath. (For root's own state, e.g. the push spool.)"""
    if not path.is_absolute():
        path = Path.cwd() / path
    parts = [part for part in path.parts[1:] if part not in ("", ".")]
    current = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    shown = ""
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            shown += "/" + part
            if part == "..":
                raise UnsafePath(f"{shown}: '..' in the path")
            try:
                info = os.stat(part, dir_fd=current, follow_symlinks=False)
            except FileNotFoundError:
                if not last or create_mode is None:
                    raise UnsafePath(f"{shown} does not exist") from None
                try:
                    os.mkdir(part, create_mode, dir_fd=current)
                except FileExistsError:
                    pass
                except OSError as error:
                    raise UnsafePath(f"cannot create {shown}: {error.strerror}") from error
                info = os.stat(part, dir_fd=current, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode) and (last or info.st_uid != 0):
                raise UnsafePath(f"{shown} is a symbolic link" + (f" of uid {info.st_uid}" if info.st_uid else ""))
            flags = os.O_DIRECTORY | os.O_CLOEXEC | (os.O_RDONLY if last else os.O_PATH)
            if not stat.S_ISLNK(info.st_mode):
                flags |= os.O_NOFOLLOW
            try:
                following = os.open(part, flags, dir_fd=current)
            except OSError as error:
                raise UnsafePath(f"{shown}: {error.strerror}") from error
            os.close(current)
            current = following
            problem = _directory_problem(os.fstat(current), last)
            if problem is None and stat.S_ISLNK(info.st_mode) and not root_only(Path(os.readlink(f"/proc/self/fd/{current}"))):
                problem = "links to a directory others can change"
            if problem is not None:
                raise UnsafePath(f"{shown}: {problem}")
        if not parts:
            raise UnsafePath("/ itself")
        result, current = current, -1
        return result
    finally:
        if current >= 0:
            os.close(current)


def _directory_problem(info: os.stat_result, last: bool) -> str | None:
    if info.st_uid != 0:
        return f"it belongs to uid {info.st_uid}"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and (last or not info.st_mode & stat.S_ISVTX):
        return "others can write in it"
    return None
