"""A push thread, one per destination (--push, --otlp): every interval cut
from the run is made into what the destination takes (a profile per
application process, or one request for all), kept in its spool, and sent
oldest first.

Sampling never waits for the store: intervals are handed over and the thread
does the rest. A store that is down, slow or answers 429/5xx is tried again
after a backoff (1 s doubling to 60 s, or the Retry-After it asked for),
while new profiles wait in the spool; a profile is given up when the spool
needs its room (oldest first) or it is older than MAX_AGE_S, which stores
refuse anyway. Every such loss is counted and logged.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from profiler.push.endpoint import REQUEST_TIMEOUT_S, Outcome, Result
from profiler.push.intervals import Interval
from profiler.push.spool import Spool
from profiler.safety.terminal import say

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0
MAX_AGE_S = 3600.0  # Pyroscope refuses profiles older than an hour by default
FLUSH_BUDGET_S = 15.0
DROP_LOG_EVERY_S = 60.0  # at the end: the last interval and what waits, then what is left stays spooled


class Destination(Protocol):
    """A store and its protocol: what an interval becomes, and how one is sent."""

    option: str  # the flag that named it, for messages
    sends: str  # what it sends each interval, for the line at the start
    unit: str  # what one spool entry is, for messages ("profiles")

    @property
    def shown(self) -> str:
        """Its URL, for messages."""
        ...

    def package(self, interval: Interval) -> list[tuple[dict[str, str], bytes]]:
        """The interval as spool entries: (query with "name" and "until", body)."""
        ...

    def send(self, query: dict[str, str], body: bytes, timeout_s: float) -> Outcome: ...


@dataclass
class PushStats:
    intervals: int = 0
    profiles: int = 0  # made (one per application process and interval)
    samples: int = 0
    requests: int = 0  # made (one per profile for --push, one per interval for --otlp)
    sent: int = 0
    sent_bytes: int = 0
    failed_attempts: int = 0
    refused: int = 0
    expired: int = 0


def log(message: str) -> None:
    say(f"jitprof: push: {message}")


class Pusher:
    def __init__(self, destination: Destination, spool: Spool, say: Callable[[str], None] = log) -> None:
        self.destination = destination
        self.spool = spool
        self.stats = PushStats()
        self._say = say
        self._queue: queue.Queue[Interval | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="jitprof-push", daemon=True)
        self._abandoned = threading.Event()
        self._backoff_s = 0.0
        self._retry_at = 0.0
        self._failing_since: float | None = None
        self._flush_deadline: float | None = None  # set by finish: no request may outlast it
        self._dropped_logged = 0
        self._drops_logged_at = -DROP_LOG_EVERY_S

    def start(self) -> None:
        self._thread.start()

    def submit(self, interval: Interval) -> None:
        """(Any thread.) An interval to send; returns at once."""
        self._queue.put(interval)

    def finish(self, budget_s: float = FLUSH_BUDGET_S, abandon: Callable[[], bool] = lambda: False) -> None:
        """Send what was submitted and what waits in the spool, within
        budget_s (at once when abandon() turns true); the rest stays spooled
        for the next run."""
        deadline = time.monotonic() + budget_s
        self._flush_deadline = deadline
        self._queue.put(None)
        while self._thread.is_alive():
            self._thread.join(0.1)
            if abandon() or time.monotonic() > deadline:
                self._abandoned.set()
                self._thread.join(0.5)  # it stops between two requests
                break
        self._log_drops(now=True)
        self.spool.close()

    def backlog(self) -> int:
        return self._queue.qsize() + len(self.spool)

    def _run(self) -> None:
        closing = False
        while not closing:
            timeout = max(self._retry_at - time.monotonic(), 0.05) if len(self.spool) else None
            item: object
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                item = _NOTHING
            if item is None:
                closing = True
            elif isinstance(item, Interval):
                self._keep(item)
            if self._abandoned.is_set():
                return
            self._send_waiting(closing)

    def _keep(self, interval: Interval) -> None:
        self.stats.intervals += 1
        self.stats.profiles += len(interval.series)
        self.stats.samples += sum(len(samples) for samples in interval.series.values())
        for query, body in self.destination.package(interval):
            if self._abandoned.is_set():
                return
            self.stats.requests += 1
            self.spool.put(query, body)
        self._log_drops()

    def _send_waiting(self, closing: bool) -> None:
        """Oldest first, while the store takes them; at the end, one try
        even in a backoff."""
        if time.monotonic() < self._retry_at and not closing:
            return
        while not self._abandoned.is_set():
            entry = self.spool.oldest()
            if entry is None:
                return
            if time.time() - float(entry.query.get("until", "0")) > MAX_AGE_S:
                self.stats.expired += 1
                self.spool.remove(entry.name)
                continue
            timeout_s = REQUEST_TIMEOUT_S
            if self._flush_deadline is not None:
                timeout_s = min(timeout_s, self._flush_deadline - time.monotonic())
                if timeout_s <= 0:
                    return
            outcome = self.destination.send(entry.query, entry.profile, timeout_s)
            if outcome.result is Result.RETRY:
                self.stats.failed_attempts += 1
                self._back_off(outcome)
                return
            self.spool.remove(entry.name)
            if outcome.result is Result.REFUSED:
                self.stats.refused += 1
                self._say(
                    f"{self.destination.shown} refused the profile {entry.query.get('name', '')} ({outcome.detail}); dropped it"
                )
                continue
            if outcome.detail:  # taken in part
                self._say(f"{self.destination.shown} took {entry.query.get('name', '')} but said: {outcome.detail}")
            self.stats.sent += 1
            self.stats.sent_bytes += len(entry.profile)
            if self._failing_since is not None:
                self._say(
                    f"{self.destination.shown} takes profiles again after {time.monotonic() - self._failing_since:.0f} s; "
                    f"sending the {len(self.spool)} waiting"
                )
                self._failing_since = None
            self._backoff_s = 0.0
            self._retry_at = 0.0

    def _back_off(self, outcome: Outcome) -> None:
        self._backoff_s = min(max(self._backoff_s * 2, BACKOFF_FIRST_S), BACKOFF_MAX_S)
        wait = outcome.retry_after_s if outcome.retry_after_s is not None else self._backoff_s
        self._retry_at = time.monotonic() + wait
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            self._say(
                f"cannot send to {self.destination.shown}: {outcome.detail}; keeping profiles in {self.spool.directory} "
                f"(up to {_size_text(self.spool.max_bytes)}, oldest dropped first) and trying again in {wait:.0f} s"
            )

    def _log_drops(self, now: bool = False) -> None:
        dropped = self.spool.stats.dropped
        if dropped > self._dropped_logged and (now or time.monotonic() - self._drops_logged_at >= DROP_LOG_EVERY_S):
            self._drops_logged_at = time.monotonic()
            self._say(f"the spool is full: dropped {dropped - self._dropped_logged} of the oldest profiles ({dropped} in all)")
            self._dropped_logged = dropped


_NOTHING = object()


def _size_text(size: int) -> str:
    return f"{size / (1 << 20):g} MiB" if size >= 1 << 20 else f"{size / 1024:.0f} KiB"
