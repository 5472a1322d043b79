"""A run's continuous profiling (--push, --otlp): a pusher per destination,
the applications of the followed processes, and the cutting of samples into
intervals (each interval goes to every destination)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from profiler.errors import JitprofError
from profiler.model.profile import Profile
from profiler.push import ingest, otlp
from profiler.push.apps import AppRegistry
from profiler.push.intervals import Interval, Labels, group_samples
from profiler.push.pusher import FLUSH_BUDGET_S, Destination, Pusher
from profiler.push.spool import Spool, SpoolError, make_directory
from profiler.run.options import PushOptions
from profiler.safety.terminal import say

# --push without -o keeps no samples past their interval; the frame table is
# started anew past this many frames, so days of new JIT code stay bounded.
FRAME_TABLE_LIMIT = 200_000
OTLP_SPOOL = "otlp"  # --otlp's spool: this directory in --spool-dir


class PushSession:
    def __init__(
        self,
        push: PushOptions,
        environ: dict[str, str],
        frequency_hz: int,
        keep_samples: bool,
        build_ids: dict[str, str],
    ) -> None:
        """Starts the pushers (each sending what an earlier run left first).
        keep_samples: -o too, so the whole run is written at the end;
        build_ids: the run's native modules', as they are found."""
        self.options = push
        labels = Labels(socket.gethostname(), tuple(push.tags))
        destinations: list[tuple[Destination, Path]] = []
        if push.url is not None:
            destinations.append(
                (ingest.PyroscopeIngest(ingest.endpoint(push.url, push.tenant, environ), labels, frequency_hz), push.spool_dir)
            )
        if push.otlp_url is not None:
            export = otlp.OtlpExport(otlp.endpoint(push.otlp_url, push.tenant, environ), labels, frequency_hz, build_ids)
            destinations.append((export, push.spool_dir / OTLP_SPOOL))
        self.apps = AppRegistry(push.app_name)
        self.pushers: list[Pusher] = []
        for destination, directory in destinations:
            try:
                if directory != push.spool_dir:
                    make_directory(push.spool_dir)
                spool = Spool(directory, push.spool_max_bytes)
            except SpoolError as error:
                self._close()
                raise JitprofError(str(error), "give --spool-dir a directory only root can write (it is created 0700)") from error
            self.pushers.append(Pusher(destination, spool))
        for pusher in self.pushers:
            pusher.start()
            waiting = len(pusher.spool)
            say(
                f"jitprof: pushing {pusher.destination.sends} "
                f"every {push.interval_s:g} s to {pusher.destination.shown}"
                + (f" ({waiting} left by an earlier run are sent first)" if waiting else "")
            )
        self._keep_samples = keep_samples
        self._interval_start = time.time()  # wall clock: where the interval being collected began
        self._cut_index = 0  # with -o: samples before this were sent

    def _close(self) -> None:
        for pusher in self.pushers:
            pusher.spool.close()

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
        interval = Interval(self._interval_start, until, frames, group_samples(samples, self.apps), profile.label_sets)
        self._interval_start = until
        self.apps.drop_leaving()
        if not self._keep_samples and len(profile.frames) > FRAME_TABLE_LIMIT:
            profile.reset_frames()
            forget_frame_ids()
        if interval.series:
            for pusher in self.pushers:
                pusher.submit(interval)

    def finish(
        self, profile: Profile, forget_frame_ids: Callable[[], None], abandon: Callable[[], bool], status: Callable[[str], None]
    ) -> None:
        """The interval under way is cut short and sent with what waits (SIGTERM flushes)."""
        self.cut(profile, forget_frame_ids, time.time())
        for pusher in self.pushers:
            backlog = pusher.backlog()
            if backlog:
                status(f"sending {backlog} {pusher.destination.unit} to {pusher.destination.shown}")
        # The destinations flush side by side, within one budget.
        deadline = time.monotonic() + FLUSH_BUDGET_S
        finishers = [
            threading.Thread(target=pusher.finish, args=(FLUSH_BUDGET_S, lambda: abandon() or time.monotonic() > deadline))
            for pusher in self.pushers
        ]
        for finisher in finishers:
            finisher.start()
        for finisher in finishers:
            finisher.join()

    def summary(self) -> list[str]:
        return [_summary(pusher) for pusher in self.pushers]


def _summary(pusher: Pusher) -> str:
    stats, spool = pusher.stats, pusher.spool
    if pusher.destination.option == "--push":
        parts = [f"{stats.sent:,} of {stats.profiles:,} profiles sent ({stats.sent_bytes / 1024:,.0f} KiB)"]
    else:
        parts = [
            f"{stats.sent:,} of {stats.requests:,} requests sent ({stats.profiles:,} profiles, {stats.sent_bytes / 1024:,.0f} KiB)"
        ]
    if stats.failed_attempts:
        parts.append(f"{stats.failed_attempts:,} failed attempts")
    if stats.refused:
        parts.append(f"{stats.refused:,} refused by the store")
    if spool.stats.dropped or stats.expired:
        parts.append(f"{spool.stats.dropped + stats.expired:,} dropped (spool full or over an hour old)")
    if len(spool):
        parts.append(f"{len(spool):,} left in {spool.directory} for the next run")
    return f"jitprof: {pusher.destination.option} to {pusher.destination.shown}: " + "; ".join(parts)
