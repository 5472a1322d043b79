"""The processes a run profiles: spawning a command stopped until sampling is
live, as the right user, or validating pids to attach to."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
from dataclasses import dataclass

from profiler import trusted_exec
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


@dataclass
class SpawnedCommand:
    """A forked child held before exec until release()."""

    pid: int
    argv: list[str]
    _go_fd: int
    _error_fd: int
    released: bool = False

    def release(self) -> None:
        """Let the child exec; raise if exec failed (command not found, ...)."""
        os.write(self._go_fd, b"g")
        os.close(self._go_fd)
        self.released = True
        report = b""
        while True:
            chunk = os.read(self._error_fd, 4096)
            if not chunk:
                break
            report += chunk
        os.close(self._error_fd)
        if report:
            _, status = os.waitpid(self.pid, 0)
            code, _, message = report.decode("utf-8", "replace").partition(":")
            raise JitprofError(
                f"cannot run {self.argv[0]}: {message}",
                "check the command name and PATH" if code == "127" else "check the file's permissions",
                exit_code=int(code) if code.isdigit() else 126,
            )

    def abandon(self) -> None:
        """Setup failed before release: the child must never run."""
        if self.released:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        for descriptor in (self._go_fd, self._error_fd):
            try:
                os.close(descriptor)
            except OSError:
                pass


def find_command(argv0: str, path: str) -> str:
    if "/" in argv0:
        if not os.path.exists(argv0):
            raise JitprofError(f"command not found: {argv0}", "check the path", exit_code=127)
        return argv0
    found = shutil.which(argv0, path=trusted_exec.absolute_path_entries(path))
    if found is None:
        raise JitprofError(f"command not found: {argv0}", "check the command name and PATH", exit_code=127)
    return found


@dataclass(frozen=True)
class ChildStdio:
    """Descriptors for the child's stdin, stdout and stderr (else it inherits ours)."""

    stdin: int
    stdout: int
    stderr: int


def spawn_stopped(argv: list[str], run_as: RunAs, environment: dict[str, str], stdio: ChildStdio | None = None) -> SpawnedCommand:
    """Fork a child that waits on a pipe, then execs argv as run_as."""
    executable = find_command(argv[0], environment.get("PATH", os.defpath))
    go_read, go_write = os.pipe()
    error_read, error_write = os.pipe()
    os.set_inheritable(error_write, False)
    child_env = dict(environment)
    if not run_as.is_root or run_as.uid != os.geteuid():
        child_env.update({"HOME": run_as.home, "USER": run_as.name, "LOGNAME": run_as.name})
    pid = os.fork()
    if pid == 0:  # child: nothing but syscalls until exec
        code = 126
        try:
            os.close(go_write)
            os.close(error_read)
            if os.read(go_read, 1) != b"g":
                os._exit(1)
            os.close(go_read)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            if stdio is not None:
                for source, target in ((stdio.stdin, 0), (stdio.stdout, 1), (stdio.stderr, 2)):
                    os.dup2(source, target)
            if run_as.uid != os.geteuid():
                os.setgroups(run_as.groups)
                os.setgid(run_as.gid)
                os.setuid(run_as.uid)
            code = 127
            os.execve(executable, argv, child_env)
        except FileNotFoundError as error:
            os.write(error_write, f"{code}:{error.strerror}".encode())
        except OSError as error:
            os.write(error_write, f"126:{error.strerror}".encode())
        except BaseException as error:  # noqa: BLE001  (must never return into the parent's code)
            os.write(error_write, f"126:{error}".encode())
        os._exit(127)
    os.close(go_read)
    os.close(error_write)
    return SpawnedCommand(pid, argv, go_write, error_read)


def exit_status_code(status: int) -> int:
    """A waitpid status as a shell would report it (128+signal if killed)."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


def thread_group_id(pid: int) -> int | None:
    """The Tgid of a task id, or None if it has gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def validate_attach_pids(pids: list[int]) -> None:
    for pid in pids:
        if pid <= 0 or not os.path.exists(f"/proc/{pid}"):
            raise JitprofError(f"no process with pid {pid}", "check the pid with `ps -p PID`")
        tgid = thread_group_id(pid)
        if tgid is not None and tgid != pid:
            raise JitprofError(f"{pid} is a thread of process {tgid}", f"attach to the process: --pid {tgid}")


def process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            state = handle.read().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def process_command_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return str(pid)
