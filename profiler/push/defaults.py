"""Where a push's spool is and how large it may grow, unless told: known to
the command line and the run's options without importing the spool."""

from __future__ import annotations

from pathlib import Path

DEFAULT_DIRECTORY = Path("/var/spool/jitprof")
DEFAULT_MAX_BYTES = 64 << 20
