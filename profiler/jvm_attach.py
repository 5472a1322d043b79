"""HotSpot's attach protocol, spoken directly: what `jcmd PID <command>` does,
without starting a second JVM (jcmd costs a few hundred ms of CPU per call;
this costs a few ms, so the perf map can be asked for every second).

A JVM opens its attach socket, /tmp/.java_pid<PID> (its own /tmp and pid
namespace), when it gets SIGQUIT while a file named .attach_pid<PID> exists
in its working directory or /tmp. HotSpot accepts root as a peer, and a
trigger file owned by root. SIGQUIT is only sent once the JVM has installed
its handler for it: the default action would kill it, and a JVM started with
-XX:+DisableAttachMechanism would print a thread dump instead, so it is left
alone.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import time
from dataclasses import dataclass

from profiler.perfmap import namespace_pid

PROTOCOL_VERSION = b"1"
SOCKET_WAIT_S = 5.0
REPLY_TIMEOUT_S = 10.0
MAX_REPLY_BYTES = 1 << 20
_SIGQUIT_BIT = 1 << (signal.SIGQUIT - 1)


class AttachError(Exception):
    """The JVM could not be asked; the message says why, for the user."""


@dataclass(frozen=True)
class JcmdReply:
    status: int  # 0: the command ran
    output: str


def run_jcmd(pid: int, command: str) -> JcmdReply:
    """Run one diagnostic command (e.g. "Compiler.perfmap") in the JVM `pid`."""
    connection = _connect(pid)
    try:
        # Request: version, "jcmd", then three arguments, each NUL-terminated.
        connection.sendall(b"\0".join([PROTOCOL_VERSION, b"jcmd", command.encode(), b"", b""]) + b"\0")
        reply = bytearray()
        while len(reply) < MAX_REPLY_BYTES:
            chunk = connection.recv(65536)
            if not chunk:
                break
            reply += chunk
    except OSError as error:
        raise AttachError(f"the JVM's attach socket failed: {error.strerror or error}") from error
    finally:
        connection.close()
    status, _, output = bytes(reply).partition(b"\n")
    try:
        code = int(status)
    except ValueError as error:
        raise AttachError(f"the JVM answered {status[:40]!r}, not an attach reply") from error
    return JcmdReply(code, output.decode("utf-8", "replace"))


def _connect(pid: int) -> socket.socket:
    root_tmp = f"/proc/{pid}/root/tmp"
    own_pid = namespace_pid(pid)
    socket_path = f"{root_tmp}/.java_pid{own_pid}"
    owner = _owner(pid)
    if not _is_attach_socket(socket_path, owner):
        _trigger(pid, own_pid, owner)
        deadline = time.monotonic() + SOCKET_WAIT_S
        while not _is_attach_socket(socket_path, owner):
            if time.monotonic() > deadline:
                raise AttachError("the JVM did not open its attach socket (started with -XX:+DisableAttachMechanism?)")
            time.sleep(0.02)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(REPLY_TIMEOUT_S)
    try:
        connection.connect(socket_path)
    except OSError as error:
        connection.close()
        raise AttachError(f"cannot connect to the JVM's attach socket: {error.strerror or error}") from error
    return connection


def _is_attach_socket(path: str, owner: int) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISSOCK(info.st_mode) and info.st_uid == owner


def _trigger(pid: int, own_pid: int, owner: int) -> None:
    status = _status_fields(pid)
    if not int(status.get("SigCgt", "0"), 16) & _SIGQUIT_BIT:
        raise AttachError("the JVM is not ready for attach yet (no SIGQUIT handler)")
    if _attach_disabled(pid):
        raise AttachError("the JVM was started with -XX:+DisableAttachMechanism")
    trigger = f"/proc/{pid}/cwd/.attach_pid{own_pid}"
    try:
        descriptor = os.open(trigger, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        descriptor = -1  # someone else is attaching: their trigger serves
    except OSError:
        trigger = f"/proc/{pid}/root/tmp/.attach_pid{own_pid}"
        try:
            descriptor = os.open(trigger, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            descriptor = -1
        except OSError as error:
            raise AttachError(f"cannot create the attach trigger file: {error.strerror}") from error
    try:
        os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + SOCKET_WAIT_S
        while time.monotonic() < deadline and not _is_attach_socket(f"/proc/{pid}/root/tmp/.java_pid{own_pid}", owner):
            time.sleep(0.02)
    except ProcessLookupError as error:
        raise AttachError("the JVM exited") from error
    finally:
        if descriptor >= 0:
            os.close(descriptor)
            try:
                os.unlink(trigger)
            except OSError:
                pass


def _owner(pid: int) -> int:
    uids = _status_fields(pid).get("Uid", "")
    try:
        return int(uids.split()[1])  # effective uid: the attach socket's owner
    except (IndexError, ValueError) as error:
        raise AttachError("the JVM exited") from error


def _status_fields(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
            return {key: value.strip() for key, _, value in (line.partition(":") for line in handle)}
    except OSError:
        return {}


def _attach_disabled(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            arguments = handle.read()
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environment = handle.read()
    except OSError:
        return False
    return b"+DisableAttachMechanism" in arguments or b"+DisableAttachMechanism" in environment
