"""Which application a node process is, for a store's series names: the
"name" of the package.json above its main script, else the script's name.
The package.json is opened inside the process's own root (a target's files
are never followed out of it) and read as JSON or not at all.
"""

from __future__ import annotations

import json
import os
from pathlib import PurePosixPath

from profiler.safety.files import open_in_root

MAX_PACKAGE_JSON_BYTES = 1 << 20
PACKAGE_SEARCH_DEPTH = 8

# node options that take their value as the next argument.
_NODE_VALUE_OPTIONS = frozenset(
    {
        "-r",
        "--require",
        "--import",
        "--loader",
        "--experimental-loader",
        "-C",
        "--conditions",
        "--inspect-port",
        "--debug-port",
        "--env-file",
        "--title",
        "--input-type",
        "--stack-size",
        "--redirect-warnings",
        "--max-old-space-size",
        "--openssl-config",
        "--icu-data-dir",
        "--diagnostic-dir",
        "--report-directory",
    }
)
_NODE_NO_SCRIPT = frozenset({"-e", "--eval", "-p", "--print", "-i", "--interactive", "-"})


def node_script(arguments: list[str]) -> str | None:
    """The main script of a node command line, or None (-e, the REPL)."""
    index = 1
    while index < len(arguments):
        argument = arguments[index]
        if argument in _NODE_NO_SCRIPT:
            return None
        if argument == "--":
            return arguments[index + 1] if index + 1 < len(arguments) else None
        if argument.startswith("-"):
            index += 2 if argument in _NODE_VALUE_OPTIONS else 1
            continue
        return argument
    return None


def node_application(pid: int, arguments: list[str]) -> str | None:
    """The package or script name; None for node without a script (-e, the REPL)."""
    script = node_script(arguments)
    if script is None:
        return None
    return _package_name(pid, script) or PurePosixPath(script).stem


def _package_name(pid: int, script: str) -> str | None:
    """The "name" of the nearest package.json above the script, read in the
    process's root."""
    base = PurePosixPath(script)
    if not base.is_absolute():
        try:
            base = PurePosixPath(os.readlink(f"/proc/{pid}/cwd")) / base
        except OSError:
            return None
    directory = base.parent
    for _ in range(PACKAGE_SEARCH_DEPTH):
        if directory.name == "node_modules":
            break
        try:
            with open_in_root(f"/proc/{pid}/root", str(directory / "package.json"), MAX_PACKAGE_JSON_BYTES) as stream:
                document = json.loads(stream.read())
        except (OSError, ValueError):
            document = None
        if isinstance(document, dict) and isinstance(document.get("name"), str) and document["name"]:
            return str(document["name"])
        if directory.parent == directory:
            break
        directory = directory.parent
    return None
