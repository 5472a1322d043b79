"""One interval's samples, cut from the run, made into one profile per
application process: the store's series name and query, and the pprof."""

from __future__ import annotations

import io
from dataclasses import dataclass, field

from profiler.model.profile import Frame, Profile, RunInfo, Sample
from profiler.output.distinct_names import with_distinct_names
from profiler.output.pprof import write_pprof
from profiler.push.apps import KERNEL_APP, RESERVED_LABELS, App, AppRegistry, label_name, label_value_text

SPY_NAME = "jitprof"


@dataclass(frozen=True)
class SeriesKey:
    app: App
    pid: int | None  # None: the kernel threads together


@dataclass(frozen=True)
class Interval:
    start_s: float  # wall clock (Unix time)
    end_s: float
    frames: list[Frame]  # the run's frame table when it was cut (ids in the samples index it)
    series: dict[SeriesKey, list[Sample]]
    label_sets: list[tuple[tuple[str, str], ...]] = field(default_factory=lambda: [()])  # the run's: samples' labels index it


def group_samples(samples: list[Sample], registry: AppRegistry) -> dict[SeriesKey, list[Sample]]:
    series: dict[SeriesKey, list[Sample]] = {}
    kernel = SeriesKey(App(KERNEL_APP, "kernel"), None)
    for sample in samples:
        app = registry.app_of(sample.pid)
        key = SeriesKey(app, sample.pid) if app is not None else kernel
        series.setdefault(key, []).append(sample)
    return series


@dataclass(frozen=True)
class Labels:
    hostname: str
    tags: tuple[tuple[str, str], ...]  # --tag key=value, in order

    def series_name(self, key: SeriesKey) -> str:
        pairs = [("hostname", self.hostname)]
        if key.pid is not None:
            pairs.append(("pid", str(key.pid)))
        pairs.append(("runtime", key.app.runtime))
        tags = [(label_name(name), value) for name, value in self.tags]
        pairs += [pair for pair in tags if pair[0] not in RESERVED_LABELS]
        return f"{key.app.name}.cpu{{{','.join(f'{name}={label_value_text(value)}' for name, value in pairs)}}}"


def query(labels: Labels, key: SeriesKey, interval: Interval, frequency_hz: int) -> dict[str, str]:
    return {
        "name": labels.series_name(key),
        "from": str(int(interval.start_s)),
        "until": str(max(int(interval.end_s), int(interval.start_s) + 1)),
        "format": "pprof",
        "sampleRate": str(frequency_hz),
        "spyName": SPY_NAME,
    }


def encode(interval: Interval, key: SeriesKey, frequency_hz: int) -> bytes:
    """The gzipped pprof of one series of the interval."""
    info = RunInfo([key.app.name], [key.pid] if key.pid is not None else [], frequency_hz)
    info.ended_ns = round((interval.end_s - interval.start_s) * 1e9)
    # The series is the CPU's (app.cpu): time off the CPU goes over OTLP only.
    cpu_samples = [sample for sample in interval.series[key] if not sample.off_cpu_ns]
    source = Profile(info, frames=interval.frames, samples=cpu_samples)
    source.label_sets = interval.label_sets
    profile = with_distinct_names(source)
    stream = io.BytesIO()
    write_pprof(profile, stream, sample_labels=False, time_nanos=round(interval.start_s * 1e9))
    return stream.getvalue()
