"""What jitprof knows of one JIT runtime, in one record: how it is recognised
in a process, what it is given when jitprof spawns a command, how the names
it gives its JIT code read as frames, what a store calls it, and what to tell
its user. Each runtime's record is in its own module (jit/v8/runtime.py,
jit/jvm/runtime.py, jit/moarvm.py, jit/cpython.py, jit/dotnet.py) and
jit/runtimes.py lists them: adding a runtime touches its module and that list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from profiler.model.profile import Frame


@dataclass(frozen=True, eq=False)  # compared by identity: one record per runtime
class Runtime:
    name: str  # "Node.js"
    fix: str  # how to make it describe its JIT code
    label: str = "jit"  # what a store's series calls it
    # Recognised by its executable's name, else by a library it maps (a name
    # start), else by a name its executable exports.
    executable: Callable[[str], bool] = lambda _name: False
    libraries: tuple[str, ...] = ()
    exported_name: bytes = b""
    # What a spawned command's environment gets for it (its flags), from the
    # environment so far and the code-log script jitprof installed (or None).
    spawn_environment: Callable[[dict[str, str], Path | None], dict[str, str]] | None = None
    # Its form of JIT code names (perf maps, jitdumps) as a frame; None: not its form.
    frame_for_name: Callable[[str], Frame | None] | None = None
    # Names written by this runtime are only ever in its own form.
    own_names_only: bool = False
    # The application a process of it is (a package, a main class); None: unknown.
    application: Callable[[int, list[str]], str | None] | None = None
