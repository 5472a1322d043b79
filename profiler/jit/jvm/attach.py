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
from collections.abc import Callable
from dataclasses import dataclass

from profiler.kernel.proc_status import caught_signals, command_line_and_environment, namespace_pid, process_uid
from profiler.safety import files

PROTOCOL_VERSION = b"1"
SOCKET_WAIT_S = 5.0
EXCHANGE_TIMEOUT_S = 10.0  # the whole exchange, trigger to last byte: a JVM that dribbles is cut off
POLL_S = 0.1  # how often a waiting exchange looks at `cancelled`
MAX_REPLY_BYTES = 1 << 20
_SIGQUIT_BIT = 1 << (signal.SIGQUIT - 1)


class AttachError(Exception):
    """The JVM could not be asked; the message says why, for the user."""


@dataclass(frozen=True)
class JcmdReply:
    status: int  # 0: the command ran
    output: str


@dataclass(frozen=True)
class Budget:
    """When an exchange must be over, and what ends it sooner (the run stopping)."""

    deadline: float  # time.monotonic()
    cancelled: Callable[[], bool] = lambda: False

    @classmethod
    def of(cls, seconds: float, cancelled: Callable[[], bool] = lambda: False) -> Budget:
        return cls(time.monotonic() + seconds, cancelled)

    def remaining(self) -> float:
        """Seconds left; raises AttachError when none are, or when cancelled."""
        if self.cancelled():
            raise AttachError("the run is ending")
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise AttachError("the JVM did not answer in time")
        return left


def run_jcmd(pid: int, command: str, budget: Budget | None = None) -> JcmdReply:
    """Run one diagnostic command (e.g. "Compiler.perfmap") in the JVM `pid`,
    all of it within the budget (default EXCHANGE_TIMEOUT_S)."""
    budget = budget or Budget.of(EXCHANGE_TIMEOUT_S)
    connection = _connect(pid, budget)
    try:
        # Request: version, "jcmd", then three arguments, each NUL-terminated.
        connection.settimeout(budget.remaining())
        connection.sendall(b"\0".join([PROTOCOL_VERSION, b"jcmd", command.encode(), b"", b""]) + b"\0")
        reply = bytearray()
        while len(reply) < MAX_REPLY_BYTES:
            connection.settimeout(min(budget.remaining(), POLL_S))
            try:
                chunk = connection.recv(65536)
            except TimeoutError:
                continue  # the budget decides, not one slow read
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


def _connect(pid: int, budget: Budget) -> socket.socket:
    own_pid = namespace_pid(pid)
    socket_path = f"/proc/{pid}/root/tmp/.java_pid{own_pid}"
    owner = process_uid(pid)
    if owner is None:
        raise AttachError("the JVM exited")
    if not _is_attach_socket(socket_path, owner):
        _trigger(pid, own_pid, lambda: _is_attach_socket(socket_path, owner), budget)
        if not _is_attach_socket(socket_path, owner):
            raise AttachError("the JVM did not open its attach socket (started with -XX:+DisableAttachMechanism?)")
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.settimeout(budget.remaining())
        connection.connect(socket_path)
    except AttachError:
        connection.close()
        raise
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


def _trigger(pid: int, own_pid: int, listening: Callable[[], bool], budget: Budget) -> None:
    """Create the trigger file, send SIGQUIT, and keep the file until the
    JVM listens (it looks for the file when the signal arrives)."""
    if not _sigquit_handled(pid):
        raise AttachError("the JVM is not ready for attach yet (no SIGQUIT handler)")
    arguments, environment = command_line_and_environment(pid)
    if any(b"+DisableAttachMechanism" in item for item in arguments + environment):
        raise AttachError("the JVM was started with -XX:+DisableAttachMechanism")
    owner = process_uid(pid)
    if owner is None:
        raise AttachError("the JVM exited")
    name = f".attach_pid{own_pid}"
    directory, descriptor, failures = -1, -1, []
    # HotSpot looks in its working directory, then in its /tmp.
    for place in (f"/proc/{pid}/cwd", f"/proc/{pid}/root/tmp"):
        try:
            directory = files.open_directory_for(place, owner)
            descriptor = files.create_exclusive(directory, name)
            break
        except FileExistsError:
            break  # someone else is attaching: their trigger serves
        except (files.UnsafeDirectory, OSError) as error:
            failures.append(str(error))
            if directory >= 0:
                os.close(directory)
                directory = -1
    else:
        raise AttachError(f"cannot create the attach trigger file: {'; '.join(failures)}")
    try:
        os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + SOCKET_WAIT_S
        while time.monotonic() < deadline and not listening():
            time.sleep(min(0.02, budget.remaining()))
    except ProcessLookupError as error:
        raise AttachError("the JVM exited") from error
    finally:
        if descriptor >= 0:
            files.remove_if_same(directory, name, descriptor)
            os.close(descriptor)
        if directory >= 0:
            os.close(directory)


def _sigquit_handled(pid: int) -> bool:
    return bool(caught_signals(pid) & _SIGQUIT_BIT)
