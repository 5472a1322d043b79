"""The processes a run profiles: spawning a command stopped until sampling is
live, as the right user, or validating pids to attach to."""

from __future__ import annotations

import os
import shutil
import signal
import stat
from dataclasses import dataclass

from profiler.errors import JitprofError
from profiler.kernel.proc_status import is_kernel_thread, thread_group_id
from profiler.safety import limits, processes, scheduling
from profiler.safety.users import RunAs


@dataclass
class SpawnedCommand:
    """A forked child held before exec until release()."""

    pid: int
    argv: list[str]
    executable: str
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
    found = shutil.which(argv0, path=processes.absolute_path_entries(path))
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
            limits.restore_for_command()
            scheduling.restore_for_command()
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
    return SpawnedCommand(pid, argv, executable, go_write, error_read)


def exit_status_code(status: int) -> int:
    """A waitpid status as a shell would report it (128+signal if killed)."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


def validate_attach_pids(pids: list[int]) -> None:
    for pid in pids:
        if pid <= 0 or not os.path.exists(f"/proc/{pid}"):
            raise JitprofError(f"no process with pid {pid}", "check the pid with `ps -p PID`")
        tgid = thread_group_id(pid)
        if tgid is not None and tgid != pid:
            raise JitprofError(f"{pid} is a thread of process {tgid}", f"attach to the process: --pid {tgid}")
        if pid == os.getpid():
            raise JitprofError(f"{pid} is jitprof itself", "give the pid of the program to profile")
        if is_kernel_thread(pid):
            raise JitprofError(f"{pid} is a kernel thread: it has no user stack to sample", "use --kernel with a user process")


PERF_MAP_DIRECTORY = "/tmp"  # where runtimes write /tmp/perf-PID.map: fixed, in node, the JVM and MoarVM


def perf_maps_unwritable(run_as: RunAs) -> str:
    """Why the command could not write its perf map, or "" if it can. node
    given --perf-basic-prof aborts when it cannot (a read-only /tmp in a
    private mount namespace): the flags are then not given."""
    try:
        info = os.stat(PERF_MAP_DIRECTORY)
        read_only = os.statvfs(PERF_MAP_DIRECTORY).f_flag & os.ST_RDONLY
    except OSError as error:
        return f"{PERF_MAP_DIRECTORY}: {error.strerror}"
    if read_only:
        return f"{PERF_MAP_DIRECTORY} is on a read-only file system"
    if run_as.is_root:
        return ""
    if info.st_uid == run_as.uid:
        allowed = info.st_mode & stat.S_IWUSR and info.st_mode & stat.S_IXUSR
    elif info.st_gid == run_as.gid or info.st_gid in run_as.groups:
        allowed = info.st_mode & stat.S_IWGRP and info.st_mode & stat.S_IXGRP
    else:
        allowed = info.st_mode & stat.S_IWOTH and info.st_mode & stat.S_IXOTH
    return "" if allowed else f"{PERF_MAP_DIRECTORY} is not writable by {run_as.name}"
