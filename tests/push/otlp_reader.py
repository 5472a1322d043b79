"""An OTLP profiles request read the way a backend reads it: through the
dictionary's indices, as the specification defines them, into plain records
the tests can assert on (independent of how jitprof built it)."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import ExportProfilesServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class LineRecord:
    function: str
    file: str
    line: int
    column: int
    start_line: int


@dataclass(frozen=True)
class LocationRecord:
    mapping: str
    build_id: str
    frame_type: str
    lines: tuple[LineRecord, ...]  # innermost first


@dataclass
class SampleRecord:
    stack: list[LocationRecord]  # leaf first
    timestamps_ns: list[int]
    values: list[int]
    attributes: dict[str, str | int]
    link: tuple[str, str] | None = None  # the span it links to: trace id, span id (hex)


@dataclass
class ProfileRecord:
    resource: dict[str, str | int]
    scope: str
    sample_type: tuple[str, str]
    period_type: tuple[str, str]
    period: int
    time_ns: int
    duration_ns: int
    samples: list[SampleRecord]

    def count(self) -> int:
        return sum(len(sample.timestamps_ns) or sum(sample.values) for sample in self.samples)


def read(request: ExportProfilesServiceRequest) -> list[ProfileRecord]:
    dictionary = request.dictionary
    strings = dictionary.string_table
    assert strings[0] == "", "the string table's zero item is the empty string"

    def value_of(value: AnyValue) -> str | int:
        """A string may be given in place or by its index in the string table (as the Collector sends it)."""
        kind = value.WhichOneof("value")
        if kind == "int_value":
            return value.int_value
        return strings[value.string_value_strindex] if kind == "string_value_strindex" else value.string_value

    def attributes(indices) -> dict[str, str | int]:
        table = dictionary.attribute_table
        return {strings[table[index].key_strindex]: value_of(table[index].value) for index in indices}

    def link_of(index: int) -> tuple[str, str] | None:
        """Index 0 is the table's empty link: none."""
        if index == 0:
            return None
        found = dictionary.link_table[index]
        return found.trace_id.hex(), found.span_id.hex()

    def location(index: int) -> LocationRecord:
        found = dictionary.location_table[index]
        mapping = dictionary.mapping_table[found.mapping_index]
        lines = []
        for line in found.lines:
            function = dictionary.function_table[line.function_index]
            lines.append(
                LineRecord(
                    strings[function.name_strindex],
                    strings[function.filename_strindex],
                    line.line,
                    line.column,
                    function.start_line,
                )
            )
        mapping_attributes = attributes(mapping.attribute_indices)
        return LocationRecord(
            strings[mapping.filename_strindex],
            str(mapping_attributes.get("process.executable.build_id.gnu", "")),
            str(attributes(found.attribute_indices).get("profile.frame.type", "")),
            tuple(lines),
        )

    records = []
    for resource_profiles in request.resource_profiles:
        resource = {
            item.key or strings[item.key_strindex]: value_of(item.value) for item in resource_profiles.resource.attributes
        }
        for scope_profiles in resource_profiles.scope_profiles:
            for profile in scope_profiles.profiles:
                samples = [
                    SampleRecord(
                        [location(index) for index in dictionary.stack_table[sample.stack_index].location_indices],
                        list(sample.timestamps_unix_nano),
                        list(sample.values),
                        attributes(sample.attribute_indices),
                        link_of(sample.link_index),
                    )
                    for sample in profile.samples
                ]
                records.append(
                    ProfileRecord(
                        resource,
                        scope_profiles.scope.name,
                        (strings[profile.sample_type.type_strindex], strings[profile.sample_type.unit_strindex]),
                        (strings[profile.period_type.type_strindex], strings[profile.period_type.unit_strindex]),
                        profile.period,
                        profile.time_unix_nano,
                        profile.duration_nano,
                        samples,
                    )
                )
    return records
