"""Who jitprof acts for: the user a spawned command runs as, and the owner of
the files it writes (the sudo caller, never root by accident)."""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass

from profiler.errors import JitprofError


@dataclass(frozen=True)
class RunAs:
    """Who the spawned command runs as."""

    uid: int
    gid: int
    groups: list[int]
    name: str
    home: str

    @property
    def is_root(self) -> bool:
        return self.uid == 0


def resolve_run_as(user: str | None, as_root: bool, environ: dict[str, str]) -> RunAs:
    """--user wins, then --as-root, then the sudo caller, else whoever we are."""
    if user:
        try:
            entry = pwd.getpwnam(user) if not user.isdigit() else pwd.getpwuid(int(user))
        except KeyError as error:
            raise JitprofError(f"no such user: {user}", "give a name from /etc/passwd to --user") from error
        return _run_as_entry(entry, entry.pw_gid)
    sudo_uid = environ.get("SUDO_UID")
    if not as_root and sudo_uid and sudo_uid.isdigit() and int(sudo_uid) != 0:
        try:
            entry = pwd.getpwuid(int(sudo_uid))
        except KeyError:
            sudo_gid = int(environ.get("SUDO_GID", sudo_uid)) if environ.get("SUDO_GID", "").isdigit() else int(sudo_uid)
            return RunAs(int(sudo_uid), sudo_gid, [sudo_gid], environ.get("SUDO_USER", sudo_uid), "/")
        gid_text = environ.get("SUDO_GID", "")
        return _run_as_entry(entry, int(gid_text) if gid_text.isdigit() else entry.pw_gid)
    uid = os.geteuid()
    try:
        entry = pwd.getpwuid(uid)
        return RunAs(uid, os.getegid(), os.getgroups(), entry.pw_name, entry.pw_dir)
    except KeyError:
        return RunAs(uid, os.getegid(), os.getgroups(), str(uid), os.environ.get("HOME", "/"))


def _run_as_entry(entry: pwd.struct_passwd, gid: int) -> RunAs:
    groups = os.getgrouplist(entry.pw_name, gid)
    return RunAs(entry.pw_uid, gid, groups, entry.pw_name, entry.pw_dir)


def output_owner(environ: dict[str, str]) -> RunAs | None:
    """Files jitprof writes belong to the invoking (sudo) user."""
    sudo_uid = environ.get("SUDO_UID", "")
    if not sudo_uid.isdigit() or int(sudo_uid) == 0:
        return None
    gid_text = environ.get("SUDO_GID", "")
    gid = int(gid_text) if gid_text.isdigit() else int(sudo_uid)
    return RunAs(int(sudo_uid), gid, [gid], environ.get("SUDO_USER", sudo_uid), "/")
