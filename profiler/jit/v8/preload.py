"""The script jitprof preloads into Node through NODE_OPTIONS.

Node refuses `--log-code` and `--logfile` in NODE_OPTIONS, and only
NODE_OPTIONS reaches the node processes that npm, npx and shell scripts
start. A `--require`d script may set V8 flags, though, and V8 starts
logging code from then on: before any user code runs, and in every worker
(the script runs there too). The log goes where `--perf-basic-prof` already
opened it, `isolate-0x…-PID-v8.log` in the working directory; it holds the
program's source, so the script makes it readable by its owner only.

The script lives at a fixed root-owned path, not in a per-run directory: a
process that outlives jitprof keeps NODE_OPTIONS and may start node again.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

PRELOAD_DIRECTORY = Path("/run/jitprof")
PRELOAD_NAME = "v8-code-log.cjs"

SCRIPT = """\
// Preloaded by jitprof (NODE_OPTIONS=--require): turns on V8's code log, from
// which jitprof restores inlined functions and source lines. Never throws.
'use strict';
try {
  const v8 = require('v8');
  v8.setFlagsFromString('--log-code');
  v8.setFlagsFromString('--log-source-code');
  v8.setFlagsFromString('--log-source-position');
  const fs = require('fs');
  const suffix = `-${process.pid}-v8.log`;
  for (const name of fs.readdirSync('.')) {
    if (name.startsWith('isolate-0x') && name.endsWith(suffix)) {
      try { fs.chmodSync(name, 0o600); } catch {}
    }
  }
} catch {}
"""


def install(directory: Path = PRELOAD_DIRECTORY) -> Path | None:
    """The script's path, written if missing or changed; None when it cannot be
    (the run goes on with perf maps only)."""
    path = directory / PRELOAD_NAME
    try:
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        info = os.lstat(directory)
        # Someone else's directory (or a symlink) could swap the script.
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            return None
        try:
            if path.read_text() == SCRIPT and not os.lstat(path).st_mode & 0o022:
                return path
        except OSError:
            pass
        descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-")
        with os.fdopen(descriptor, "w") as handle:
            handle.write(SCRIPT)
        os.chmod(temporary, 0o444)
        os.replace(temporary, path)
        return path
    except OSError:
        return None
