"""A bun process's scripts and bun's runtime copies of them, made by
jitprof's own bun, never by the process's.

A target chooses its binary: any user can run a program called `bun` and
have root execute it. So the copies are made by the bun jitprof's set-up
installed (pinned, root's, checked before each use), running transpile.js
as the process's user (it reads only what that user could), confined
(safety/processes.run_as_user: its own session, no terminal, no capability,
limits). What it answers is checked on jitprof's side as a target's words:
its size, the number of scripts, each path, and the texts' total size.

The copies match the process's own only while both buns transpile alike
(same version: set-up pins the one the tests run); a function whose text
differs is left unplaced, never misplaced.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from profiler.jit.bun import runtime_copies, script_lists
from profiler.jit.v8.source_map_files import TargetUser
from profiler.kernel.proc_status import command_line, status_field
from profiler.safety.processes import run_as_user

BUN_VERSION = "1.4.4"  # scripts/setup.sh installs this one
OWN_BUN = Path(sys.prefix) / "lib" / f"jitprof-bun-{BUN_VERSION}" / "node_modules" / "@oven" / "bun-linux-x64" / "bin" / "bun"
TRANSPILER = Path(__file__).with_name("transpile.js")
MAX_SCRIPTS = 256  # a process's scripts transpiled: its own and what they import
MAX_SCRIPT_BYTES = 16 << 20  # their text and copies together (tsc: 11.5 MiB)
MAX_OUTPUT_BYTES = 3 * MAX_SCRIPT_BYTES  # JSON escapes: a little over the two texts
MAX_PATH_BYTES = 4096
TRANSPILE_DEADLINE_S = 10.0  # about 60 ms for a few small scripts, 0.3 s for tsc


@dataclass(frozen=True)
class TranspiledScript:
    path: str
    original: str  # the file's text
    runtime: str  # bun's copy of it


def trusted_program(path: Path) -> str:
    """Why path is not a program root may run ("" when it is): every part of
    it a real directory or file (no link) of root's, writable by no one else
    (a directory above it may be a sticky one like /tmp, where no one else
    can remove or replace root's entries: a checkout in /tmp)."""
    current = Path("/")
    for part in path.parts[1:]:
        current = current / part
        try:
            info = os.lstat(current)
        except OSError as error:
            return f"{current}: {error.strerror}"
        if stat.S_ISLNK(info.st_mode):
            return f"{current} is a symbolic link"
        shared_sticky = current != path and stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX
        if info.st_uid != 0 or (info.st_mode & 0o022 and not shared_sticky):
            return f"{current} is not root's alone"
    return "" if stat.S_ISREG(os.lstat(path).st_mode) else f"{path} is not a regular file"


def command_of(pid: int) -> tuple[str, list[str]] | None:
    """A live process's working directory and its arguments (after its executable)."""
    try:
        directory = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None
    arguments = command_line(pid)
    return (directory, arguments[1:]) if arguments else None


def transpiled_scripts(
    pid: int, running: Callable[[int | None], None] | None = None, bun: Path = OWN_BUN
) -> tuple[list[TranspiledScript], str]:
    """The scripts a live bun process runs and their runtime copies (or why
    not), found and made by jitprof's own bun as the process's user: a
    command's list of scripts and the copies of texts seen before come from
    the cache."""
    command = command_of(pid)
    uid_words, gid_words = status_field(pid, "Uid:"), status_field(pid, "Gid:")
    if command is None or uid_words is None or gid_words is None or len(uid_words) < 2 or len(gid_words) < 2:
        return [], ""
    untrusted = trusted_program(bun)
    if untrusted:
        return [], f"jitprof's own bun cannot be run ({untrusted}; make setup installs it)"
    directory, arguments = command
    user = (int(uid_words[1]), int(gid_words[1]))
    found, problem = _found_scripts(pid, bun, directory, arguments, user, running)
    keys = {script.path: runtime_copies.key_of(script.path, script.original, TRANSPILER, BUN_VERSION) for script in found}
    copies = {path: runtime_copies.load(key, MAX_SCRIPT_BYTES) for path, key in keys.items()}
    missing = [script.path for script in found if copies[script.path] is None]
    if missing:
        made, copy_problem = _transpile(bun, "copy", directory, missing, user, running)
        problem = problem or copy_problem
        originals = {script.path: script.original for script in found}
        for script in made:
            # The file may have changed between the two runs: a copy of another text is no copy of this one.
            if originals.get(script.path) == script.original:
                copies[script.path] = script.runtime
                runtime_copies.store(keys[script.path], script.runtime)
    paired = [
        TranspiledScript(script.path, script.original, runtime)
        for script in found
        if (runtime := copies[script.path]) is not None
    ]
    scripts, too_large = _within_cap(paired)
    return scripts, too_large or problem


def _found_scripts(
    pid: int,
    bun: Path,
    directory: str,
    arguments: list[str],
    user: tuple[int, int],
    running: Callable[[int | None], None] | None,
) -> tuple[list[TranspiledScript], str]:
    """The scripts the command runs, with their texts: the list kept from an
    earlier run while its scripts are unchanged, else found by jitprof's bun."""
    key = script_lists.key_of(directory, arguments, user, TRANSPILER, BUN_VERSION)
    reader = TargetUser.of_process(pid)
    kept = script_lists.load(key, reader, MAX_SCRIPTS, MAX_SCRIPT_BYTES) if reader is not None else None
    if kept is not None:
        return [TranspiledScript(path, original, "") for path, original in kept], ""
    searched_since_ns = time.time_ns()
    found, problem = _transpile(bun, "find", directory, arguments, user, running)
    if found and not problem:
        listed = [script_lists.listed(script.path, script.original) for script in found]
        if all(entry is not None for entry in listed):
            script_lists.store(key, [entry for entry in listed if entry is not None], searched_since_ns)
    return found, problem


def _transpile(
    bun: Path,
    mode: str,
    directory: str,
    arguments: list[str],
    user: tuple[int, int],
    running: Callable[[int | None], None] | None,
) -> tuple[list[TranspiledScript], str]:
    try:
        run = run_as_user(
            [str(bun), str(TRANSPILER), mode, str(MAX_SCRIPTS), str(MAX_SCRIPT_BYTES), directory, *arguments],
            *user, MAX_OUTPUT_BYTES, TRANSPILE_DEADLINE_S, running,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        return [], f"its scripts could not be transpiled ({type(error).__name__})"
    if run.returncode != 0:
        why = run.overrun or f"bun exited with {run.returncode}"
        return [], f"its scripts could not be transpiled ({why})"
    return checked_answer(run.output, copies=mode == "copy")


def checked_answer(output: bytes, copies: bool = True) -> tuple[list[TranspiledScript], str]:
    """transpile.js's answer, taken as a target's words: its caps enforced
    here, whatever the program that wrote it did. Without copies (its find
    mode) each script's runtime is ""."""
    if len(output) > MAX_OUTPUT_BYTES:
        return [], "its scripts' transpiler answered too much"
    try:
        listed = json.loads(output)["scripts"]
        if not isinstance(listed, list):
            raise TypeError
    except (ValueError, KeyError, TypeError, RecursionError):
        return [], "its scripts' transpiler answered nonsense"
    scripts: list[TranspiledScript] = []
    for entry in listed[:MAX_SCRIPTS]:
        if not isinstance(entry, dict):
            continue
        path, original, runtime = entry.get("path"), entry.get("original"), entry.get("runtime", None if copies else "")
        if not (isinstance(path, str) and isinstance(original, str) and isinstance(runtime, str)):
            continue
        if not path.startswith("/") or len(path) > MAX_PATH_BYTES or "\0" in path:
            continue
        scripts.append(TranspiledScript(path, original, runtime))
    return _within_cap(scripts)


def _within_cap(scripts: list[TranspiledScript]) -> tuple[list[TranspiledScript], str]:
    """The scripts up to MAX_SCRIPT_BYTES of texts and copies together, and why not all ("" when all)."""
    total = 0
    for index, script in enumerate(scripts):
        total += len(script.original) + len(script.runtime)
        if total > MAX_SCRIPT_BYTES:
            return scripts[:index], f"its scripts are over {MAX_SCRIPT_BYTES >> 20} MiB together; those past that are not read"
    return scripts, ""
