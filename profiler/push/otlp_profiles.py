"""One interval as an OTLP profiles export request
(opentelemetry.proto.profiles.v1development, built with the official
package): a resource per application process with the attributes backends
group by, one profile each, and one dictionary shared by all of them.

Samples are kept apart by stack and thread; each carries the time of every
sample (the wall clock) and a count of 1 per time. With --off-cpu a process
has two profiles instead, cpu/nanoseconds (a sample's period per time) and
off_cpu/nanoseconds (each wait's time). A location is one machine
address as the symbolizer saw it: the function and, innermost first, what was
inlined into it there (JS and native alike), as Location.lines asks.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import ExportProfilesServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.profiles.v1development.profiles_pb2 import (
    Function,
    Line,
    Location,
    Mapping,
    Profile,
    ProfilesDictionary,
    Sample,
    Stack,
    ValueType,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from profiler import __version__
from profiler.jit import registry
from profiler.labels.label_sources import SPAN_ID, TRACE_ID
from profiler.model.profile import Frame, FrameKind
from profiler.output.pprof import location_groups
from profiler.push.apps import RESERVED_LABELS
from profiler.push.intervals import Interval, Labels, SeriesKey

SCOPE_NAME = "jitprof"
KERNEL_MODULE = "[kernel.kallsyms]"  # the mapping of kernel frames, as perf names it
_FRAME_TYPES = {FrameKind.NATIVE: "native", FrameKind.KERNEL: "kernel"}


@dataclass(frozen=True)
class _SampleKey:
    frame_ids: tuple[int, ...]
    tid: int
    comm: str
    labels: int = 0  # the sample's label set in the interval's


class _Dictionary:
    """ProfilesDictionary's tables, each with its zero item first, every item once."""

    def __init__(self, frames: list[Frame], build_ids: dict[str, str]) -> None:
        self.message = ProfilesDictionary()
        self._frames = frames
        self._build_ids = build_ids
        self._strings: dict[str, int] = {}
        self._attributes: dict[tuple[str, str | int], int] = {}
        self._functions: dict[tuple[str, str, int], int] = {}
        self._mappings: dict[str, int] = {}
        self._locations: dict[tuple[tuple[int, ...], str], int] = {}
        self._stacks: dict[tuple[int, ...], int] = {}
        self._links: dict[tuple[bytes, bytes], int] = {}
        self.string("")
        self.message.attribute_table.add()
        self.message.function_table.add()
        self.message.mapping_table.add()
        self.message.location_table.add()
        self.message.stack_table.add()
        self.message.link_table.add()

    def string(self, text: str) -> int:
        index = self._strings.get(text)
        if index is None:
            index = self._strings[text] = len(self.message.string_table)
            self.message.string_table.append(text)
        return index

    def attribute(self, key: str, value: str | int) -> int:
        index = self._attributes.get((key, value))
        if index is None:
            index = self._attributes[(key, value)] = len(self.message.attribute_table)
            item = self.message.attribute_table.add(key_strindex=self.string(key))
            if isinstance(value, int):
                item.value.int_value = value
            else:
                item.value.string_value = value
        return index

    def link(self, trace_id: str, span_id: str) -> int:
        """The link to a span (hex ids, as labels carry them); 0: none (not ids)."""
        try:
            key = (bytes.fromhex(trace_id), bytes.fromhex(span_id))
        except ValueError:
            return 0
        if len(key[0]) != 16 or len(key[1]) != 8:
            return 0
        index = self._links.get(key)
        if index is None:
            index = self._links[key] = len(self.message.link_table)
            self.message.link_table.add(trace_id=key[0], span_id=key[1])
        return index

    def function(self, frame: Frame) -> int:
        key = (frame.name, frame.file or frame.module, frame.function_line)
        index = self._functions.get(key)
        if index is None:
            index = self._functions[key] = len(self.message.function_table)
            name = self.string(frame.name)
            self.message.function_table.append(
                Function(name_strindex=name, system_name_strindex=name, filename_strindex=self.string(key[1]), start_line=key[2])
            )
        return index

    def mapping(self, module: str) -> int:
        index = self._mappings.get(module)
        if index is None:
            index = self._mappings[module] = len(self.message.mapping_table)
            build_id = self._build_ids.get(module)
            attributes = [self.attribute("process.executable.build_id.gnu", build_id)] if build_id else []
            self.message.mapping_table.append(Mapping(filename_strindex=self.string(module), attribute_indices=attributes))
        return index

    def location(self, group: tuple[int, ...], jit_frame_type: str) -> int:
        """group: a frame and those inlined into it there, outer first."""
        key = (group, jit_frame_type)
        index = self._locations.get(key)
        if index is None:
            index = self._locations[key] = len(self.message.location_table)
            outer = self._frames[group[0]]
            module = KERNEL_MODULE if outer.kind is FrameKind.KERNEL else outer.module or outer.file or "[unknown]"
            frame_type = jit_frame_type if outer.kind in (FrameKind.JIT, FrameKind.ASYNC) else _FRAME_TYPES.get(outer.kind, "")
            lines = []
            for frame_id in reversed(group):  # innermost first
                frame = self._frames[frame_id]
                lines.append(
                    Line(
                        function_index=self.function(frame),
                        line=frame.line if frame.line_exact else frame.function_line,
                        column=frame.column if frame.line_exact else 0,
                    )
                )
            self.message.location_table.append(
                Location(
                    mapping_index=self.mapping(module),
                    lines=lines,
                    attribute_indices=[self.attribute("profile.frame.type", frame_type)] if frame_type else [],
                )
            )
        return index

    def stack(self, frame_ids: tuple[int, ...], jit_frame_type: str) -> int:
        locations = tuple(self.location(group, jit_frame_type) for group in reversed(location_groups(self._frames, frame_ids)))
        index = self._stacks.get(locations)
        if index is None:
            index = self._stacks[locations] = len(self.message.stack_table)
            self.message.stack_table.append(Stack(location_indices=locations))  # leaf first
        return index


def export_request(
    interval: Interval,
    labels: Labels,
    frequency_hz: int,
    wall_offset_ns: int,
    build_ids: dict[str, str],
) -> ExportProfilesServiceRequest:
    """wall_offset_ns: added to a sample's time (the monotonic clock BPF
    reads) to make it Unix time."""
    dictionary = _Dictionary(interval.frames, build_ids)
    request = ExportProfilesServiceRequest()
    start_ns = round(interval.start_s * 1e9)
    duration_ns = max(round((interval.end_s - interval.start_s) * 1e9), 0)
    period_ns = round(1e9 / frequency_hz)
    for key, samples in interval.series.items():
        resource_profiles = request.resource_profiles.add(resource=Resource(attributes=_resource_attributes(labels, key)))
        scope = resource_profiles.scope_profiles.add(scope=InstrumentationScope(name=SCOPE_NAME, version=__version__))
        jit_frame_type = registry.jit_frame_type(key.app.runtime)
        cpu_samples = [sample for sample in samples if not sample.off_cpu_ns]
        waits = [sample for sample in samples if sample.off_cpu_ns]
        # With waits (--off-cpu), two profiles: CPU time, and time off the CPU, both in nanoseconds.
        kinds = (
            [("cpu", "nanoseconds", cpu_samples), ("off_cpu", "nanoseconds", waits)] if waits else [("samples", "count", samples)]
        )
        for type_name, unit, selected in kinds:
            profile = Profile(
                sample_type=ValueType(type_strindex=dictionary.string(type_name), unit_strindex=dictionary.string(unit)),
                time_unix_nano=start_ns,
                duration_nano=duration_ns,
                period_type=ValueType(type_strindex=dictionary.string("cpu"), unit_strindex=dictionary.string("nanoseconds")),
                period=period_ns,
                profile_id=secrets.token_bytes(16),
            )
            times: dict[_SampleKey, list[tuple[int, int]]] = {}
            for sample in selected:
                value = 1 if unit == "count" else sample.off_cpu_ns or period_ns
                times.setdefault(_SampleKey(sample.frame_ids, sample.tid, sample.comm, sample.labels), []).append(
                    (sample.time_ns + wall_offset_ns, value)
                )
            for sample_key, stamped in times.items():
                stamped.sort()
                label_set = dict(interval.label_sets[sample_key.labels]) if sample_key.labels < len(interval.label_sets) else {}
                trace_id, span_id = label_set.pop(TRACE_ID, ""), label_set.pop(SPAN_ID, "")
                profile.samples.append(
                    Sample(
                        stack_index=dictionary.stack(sample_key.frame_ids, jit_frame_type),
                        values=[value for _, value in stamped],
                        timestamps_unix_nano=[stamp for stamp, _ in stamped],
                        attribute_indices=[
                            dictionary.attribute("thread.id", sample_key.tid),
                            dictionary.attribute("thread.name", sample_key.comm),
                            *(dictionary.attribute(key, value) for key, value in label_set.items()),
                        ],
                        link_index=dictionary.link(trace_id, span_id) if trace_id and span_id else 0,
                    )
                )
            scope.profiles.append(profile)
    request.dictionary.CopyFrom(dictionary.message)
    return request


def _resource_attributes(labels: Labels, key: SeriesKey) -> list[KeyValue]:
    """The semantic conventions' names, then --tag pairs as given."""
    pairs: list[tuple[str, str | int]] = [("service.name", key.app.name), ("host.name", labels.hostname)]
    if key.pid is not None:
        pairs.append(("process.pid", key.pid))
    if key.app.executable:
        pairs.append(("process.executable.name", key.app.executable))
    if key.app.runtime not in ("native", "kernel"):
        pairs.append(("process.runtime.name", key.app.runtime))
    if key.app.container_id:
        pairs.append(("container.id", key.app.container_id))
    pairs += [pair for pair in labels.tags if pair[0] not in RESERVED_LABELS]
    return [KeyValue(key=name, value=_any_value(value)) for name, value in pairs]


def _any_value(value: str | int) -> AnyValue:
    return AnyValue(int_value=value) if isinstance(value, int) else AnyValue(string_value=value)
