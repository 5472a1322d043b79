"""A helper process that parses what a target controls, confined so that
whatever the file makes it do (crash, hang, allocate, or run code through a
parser's bug) stays inside it.

The helper drops root for a uid no account or process has (another user
cannot signal, ptrace or share files with it), keeping one capability:
CAP_DAC_READ_SEARCH, to reopen the files root opened for it through
/proc/self/fd (blazesym takes paths). Its root is an empty read-only
directory holding only /proc, in a mount namespace of its own: a path a
target's file names (a debug link, a .dwp beside it) leads nowhere, so the
helper reads only what jitprof opened and checked. No new privileges, no
core dump, an address-space, heap, CPU and file limit, dies with its parent,
and a seccomp filter that refuses every system call that writes a file,
starts a program, opens a socket or reaches another process.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import struct

HELPER_UID = 0x7FFF_FFF0  # no account, no process but ours
HELPER_GID = 0x7FFF_FFF0
CAP_DAC_READ_SEARCH = 2

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_KEEPCAPS = 8
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
SYS_CAPSET = 126  # x86_64
LINUX_CAPABILITY_VERSION_3 = 0x20080522
CLONE_NEWNS = 0x0002_0000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18,
)  # fmt: skip
EMPTY_ROOT_MOUNT = "/tmp"  # covered in the helper's namespace only

_libc = ctypes.CDLL(None, use_errno=True)


class ConfinementFailed(Exception):
    pass


def _prctl(option: int, value: int | ctypes.c_void_p = 0) -> None:
    if _libc.prctl(option, value, 0, 0, 0) != 0:
        raise ConfinementFailed(f"prctl({option}): {os.strerror(ctypes.get_errno())}")


def _keep_only_capability(capability: int) -> None:
    header = struct.pack("=Ii", LINUX_CAPABILITY_VERSION_3, 0)
    bit = 1 << capability
    data = struct.pack("=6I", bit, bit, 0, 0, 0, 0)  # effective, permitted, inheritable (two words)
    if _libc.syscall(SYS_CAPSET, ctypes.c_char_p(header), ctypes.c_char_p(data)) != 0:
        raise ConfinementFailed(f"capset: {os.strerror(ctypes.get_errno())}")


def _mount(source: str | None, target: str, kind: str | None, flags: int, options: str | None = None) -> None:
    encoded = [None if text is None else text.encode() for text in (source, target, kind, options)]
    if _libc.mount(encoded[0], encoded[1], encoded[2], ctypes.c_ulong(flags), encoded[3]) != 0:
        raise ConfinementFailed(f"mount {target}: {os.strerror(ctypes.get_errno())}")


def _empty_root() -> None:
    """Root becomes an empty read-only tmpfs with /proc bound in, seen by
    this process alone: /proc/self/fd still reaches the files handed over,
    and nothing else is there to open by name."""
    if _libc.unshare(CLONE_NEWNS) != 0:
        raise ConfinementFailed(f"unshare: {os.strerror(ctypes.get_errno())}")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the parent's mounts
    _mount("jitprof-helper", EMPTY_ROOT_MOUNT, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=16k,mode=0555")
    os.mkdir(f"{EMPTY_ROOT_MOUNT}/proc", 0o555)
    _mount("/proc", f"{EMPTY_ROOT_MOUNT}/proc", None, MS_BIND | MS_REC)
    os.chroot(EMPTY_ROOT_MOUNT)
    os.chdir("/")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def confine(address_space_bytes: int, data_bytes: int, cpu_seconds: int, open_files: int) -> None:
    """Called by the helper itself, once it has loaded what it needs and
    before it reads anything a target controls. ConfinementFailed when a
    step cannot be taken (the helper must then not go on)."""
    parent = os.getppid()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (address_space_bytes, address_space_bytes))
    resource.setrlimit(resource.RLIMIT_DATA, (data_bytes, data_bytes))  # the heap; files mapped read-only are not counted
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))
    _prctl(PR_SET_DUMPABLE, 0)
    if os.geteuid() == 0:
        _empty_root()
        os.setgroups([])
        os.setresgid(HELPER_GID, HELPER_GID, HELPER_GID)
        _prctl(PR_SET_KEEPCAPS, 1)
        os.setresuid(HELPER_UID, HELPER_UID, HELPER_UID)
        _keep_only_capability(CAP_DAC_READ_SEARCH)
        _prctl(PR_SET_DUMPABLE, 0)  # a change of uid reset it
    # Set after the change of uid, which clears it; a parent gone before it was set is caught by the check.
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        raise ConfinementFailed("the parent exited")
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    if os.uname().machine == "x86_64":
        _install_filter(_x86_64_filter())


# seccomp's classic BPF: load a word of seccomp_data, compare, return.
_LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JUMP_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JUMP_AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JUMP_ANY_BIT = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RETURN = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF_0000
_KILL = 0x8000_0000
_REFUSE = 0x0005_0000 | 1  # SECCOMP_RET_ERRNO | EPERM
_AUDIT_ARCH_X86_64 = 0xC000_003E
_X32_BIT = 0x4000_0000

# x86_64 system calls the helper never needs: running programs, sockets,
# other processes, namespaces and mounts, the kernel's keys and BPF, and
# every change to a file or directory.
_REFUSED_X86_64 = {
    "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "kill": 62, "ptrace": 101,
    "socket": 41, "connect": 42, "accept": 43, "bind": 49, "listen": 50, "accept4": 288, "socketpair": 53,
    "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_open": 434, "pidfd_getfd": 438,
    "mount": 165, "umount2": 166, "chroot": 161, "pivot_root": 155, "unshare": 272, "setns": 308,
    "name_to_handle_at": 303, "open_by_handle_at": 304, "openat2": 437, "creat": 85, "io_uring_setup": 425,
    "bpf": 321, "perf_event_open": 298, "keyctl": 250, "add_key": 248, "request_key": 249,
    "truncate": 76, "ftruncate": 77, "rename": 82, "mkdir": 83, "rmdir": 84, "link": 86, "unlink": 87,
    "symlink": 88, "chmod": 90, "fchmod": 91, "chown": 92, "fchown": 93, "lchown": 94, "mknod": 133,
    "mkdirat": 258, "mknodat": 259, "fchownat": 260, "unlinkat": 263, "renameat": 264, "linkat": 265,
    "symlinkat": 266, "fchmodat": 268, "renameat2": 316, "fchmodat2": 452,
}  # fmt: skip
_OPEN_X86_64, _OPENAT_X86_64 = 2, 257
_WRITING_OPEN_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _argument_low_word(index: int) -> int:
    return 16 + 8 * index  # seccomp_data: nr, arch, instruction pointer, then the arguments (little-endian)


def _x86_64_filter() -> list[tuple[int, int, int, int]]:
    """(code, jump if true, jump if false, constant) rows. Jumps are
    relative and forward only: the refusal is placed last."""
    rows: list[tuple[int, int, int, int]] = [
        (_LOAD_WORD, 0, 0, 4),  # arch
        (_JUMP_EQUAL, 1, 0, _AUDIT_ARCH_X86_64),
        (_RETURN, 0, 0, _KILL),
        (_LOAD_WORD, 0, 0, 0),  # system call number
    ]
    to_refusal: list[int] = []  # rows whose true branch goes to the refusal
    rows.append((_JUMP_AT_LEAST, 0, 0, _X32_BIT))
    to_refusal.append(len(rows) - 1)
    for number in sorted(_REFUSED_X86_64.values()):
        rows.append((_JUMP_EQUAL, 0, 0, number))
        to_refusal.append(len(rows) - 1)
    # open(path, flags) and openat(dir, path, flags): reading only.
    for number, flags_argument in ((_OPEN_X86_64, 1), (_OPENAT_X86_64, 2)):
        rows.append((_JUMP_EQUAL, 0, 3, number))
        rows.append((_LOAD_WORD, 0, 0, _argument_low_word(flags_argument)))
        rows.append((_JUMP_ANY_BIT, 0, 0, _WRITING_OPEN_FLAGS))
        to_refusal.append(len(rows) - 1)
        rows.append((_RETURN, 0, 0, _ALLOW))
    rows.append((_RETURN, 0, 0, _ALLOW))
    refusal = len(rows)
    rows.append((_RETURN, 0, 0, _REFUSE))
    for index in to_refusal:
        code, _, jump_false, constant = rows[index]
        rows[index] = (code, refusal - index - 1, jump_false, constant)
    if any(jump > 255 for _, jump, _, _ in rows):
        raise ConfinementFailed("seccomp filter too long for its jumps")
    return rows


def _install_filter(rows: list[tuple[int, int, int, int]]) -> None:
    program = b"".join(struct.pack("=HBBI", *row) for row in rows)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("=HxxxxxxQ", len(rows), ctypes.addressof(buffer))
    fprog_buffer = ctypes.create_string_buffer(fprog, len(fprog))
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog_buffer, 0, 0) != 0:
        raise ConfinementFailed(f"seccomp: {os.strerror(ctypes.get_errno())}")
