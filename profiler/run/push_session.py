"""A run's continuous profiling (--push): the pusher, the applications of the
followed processes, and the cutting of samples into intervals."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from profiler.errors import JitprofError
from profiler.model.profile import Profile
from profiler.push.apps import AppRegistry
from profiler.push.ingest import Endpoint
from profiler.push.intervals import Interval, Labels, group_samples
from profiler.push.pusher import FLUSH_BUDGET_S, Pusher
from profiler.push.spool import Spool, SpoolError
from profiler.run.options import PushOptions
from profiler.safety.terminal import say

# --push without -o keeps no samples past their interval; the frame table is
# started anew past this many frames, so days of new JIT code stay bounded.
FRAME_TABLE_LIMIT = 200_000


class PushSession:
    def __init__(self, push: PushOptions, environ: dict[str, str], frequency_hz: int, keep_samples: bool) -> None:
        """Starts the pusher (sending what an earlier run left first).
        keep_samples: -o too, so the whole run is written at the end."""
        self.options = push
        endpoint = Endpoint.from_options(push.url, push.tenant, environ)
        try:
            spool = Spool(push.spool_dir, push.spool_max_bytes)
        except SpoolError as error:
            raise JitprofError(str(error), "give --spool-dir a directory only root can write (it is created 0700)") from error
        self.apps = AppRegistry(push.app_name)
        self.pusher = Pusher(endpoint, spool, Labels(socket.gethostname(), tuple(push.tags)), frequency_hz)
        self.pusher.start()
        self._keep_samples = keep_samples
        self._interval_start = time.time()  # wall clock: where the interval being collected began
        self._cut_index = 0  # with -o: samples before this were sent
        say(
            f"jitprof: pushing a profile per application every {push.interval_s:g} s to {endpoint.shown}"
            + (f" ({len(spool)} left by an earlier run are sent first)" if len(spool) else "")
        )

    def begin(self) -> None:
        """Sampling starts: the first interval begins now."""
        self._interval_start = time.time()

    def cut(self, profile: Profile, forget_frame_ids: Callable[[], None], until: float) -> None:
        """(On the symbolizer thread, or after it stopped.) The samples since
        the last cut go to the pusher as one interval."""
        if self._keep_samples:
            samples = profile.samples_since(self._cut_index)
            self._cut_index += len(samples)
        else:
            samples = profile.take_samples()
        # Source-mapped frames as known now (a frame first seen in the last half second may not be yet).
        frames = [profile.originals.get(frame, frame) for frame in profile.frames] if profile.originals else profile.frames
        interval = Interval(self._interval_start, until, frames, group_samples(samples, self.apps))
        self._interval_start = until
        self.apps.drop_leaving()
        if not self._keep_samples and len(profile.frames) > FRAME_TABLE_LIMIT:
            profile.reset_frames()
            forget_frame_ids()
        if interval.series:
            self.pusher.submit(interval)

    def finish(
        self, profile: Profile, forget_frame_ids: Callable[[], None], abandon: Callable[[], bool], status: Callable[[str], None]
    ) -> None:
        """The interval under way is cut short and sent with what waits (SIGTERM flushes)."""
        self.cut(profile, forget_frame_ids, time.time())
        backlog = self.pusher.backlog()
        if backlog:
            status(f"sending {backlog} profiles to {self.pusher.endpoint.shown}")
        self.pusher.finish(FLUSH_BUDGET_S, abandon=abandon)

    def summary(self) -> str:
        stats, spool = self.pusher.stats, self.pusher.spool
        parts = [f"{stats.sent:,} of {stats.profiles:,} profiles sent ({stats.sent_bytes / 1024:,.0f} KiB)"]
        if stats.failed_attempts:
            parts.append(f"{stats.failed_attempts:,} failed attempts")
        if stats.refused:
            parts.append(f"{stats.refused:,} refused by the store")
        if spool.stats.dropped or stats.expired:
            parts.append(f"{spool.stats.dropped + stats.expired:,} dropped (spool full or over an hour old)")
        if len(spool):
            parts.append(f"{len(spool):,} left in {spool.directory} for the next run")
        return f"jitprof: push to {self.pusher.endpoint.shown}: " + "; ".join(parts)
