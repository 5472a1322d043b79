"""The soak's store: tests/push/receiver.py's receiver on 127.0.0.1, keeping
counts only. `python -m benchmarks.soak.receiver STATE_FILE` writes its URL,
then (every second) profiles and bytes received, to STATE_FILE."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tests.push.receiver import Receiver, free_port


def main() -> int:
    state = Path(sys.argv[1])
    receiver = Receiver(free_port())
    receiver.start()
    state.write_text(f"{receiver.url} 0 0\n")
    while True:
        time.sleep(1)
        with receiver.lock:
            count = len(receiver.received)
            size = sum(len(item.profile) for item in receiver.received)
            receiver.received.clear()  # counts only: the soak's own memory stays flat
        previous = state.read_text().split()
        total_count, total_bytes = int(previous[1]) + count, int(previous[2]) + size
        temporary = state.with_suffix(".new")
        temporary.write_text(f"{receiver.url} {total_count} {total_bytes}\n")
        temporary.replace(state)  # the watcher never reads a half-written line


if __name__ == "__main__":
    sys.exit(main())
