"""Labels from the OpenTelemetry context a process publishes: the process
context's protobuf and seqlock, the thread record, the TLSDESC descriptor;
and labels through the profile, .jitprof, pprof, --group-by and --label."""

from __future__ import annotations

import gzip
import io
import struct

import pytest

from profiler.kernel.events import WalkEnd
from profiler.labels import otel_process_context, otel_thread_context
from profiler.labels.grouping import grouped_by
from profiler.labels.label_sources import LabelSources, _Published
from profiler.labels.protobuf_fields import MalformedMessage
from profiler.model.profile import Frame, FrameKind, Profile, RunInfo, Sample
from profiler.model.raw import read_raw, write_raw
from profiler.output.folded import fold
from profiler.output.pprof import write_pprof
from profiler.output.report import SampleFilter, filtered
from tests.helpers import ROOT, LaidOutMemory
from tests.output.test_off_cpu_formats import read_pprof


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes([*out, value])


def field(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(data)) + data


def attribute(key: str, value: bytes) -> bytes:
    return field(1, key.encode()) + field(2, value)


def text(value: str) -> bytes:
    return field(1, value.encode())


PAYLOAD = (
    field(
        1,
        field(1, attribute("service.name", text("checkout-api"))) + field(1, attribute("host.cores", varint(3 << 3) + varint(8))),
    )
    + field(2, attribute("threadlocal.schema_version", text("tlsdesc_v1_dev")))
    + field(2, attribute("threadlocal.attribute_key_map", field(5, field(1, text("http.route")) + field(1, text("tenant")))))
)


def test_the_process_context_payload_gives_resource_and_thread_keys():
    context = otel_process_context.decode_process_context(PAYLOAD, 7)
    assert context.resource == (("service.name", "checkout-api"), ("host.cores", "8"))
    assert context.thread_keys == ("http.route", "tenant")
    assert context.schema == "tlsdesc_v1_dev" and context.published_ns == 7


@pytest.mark.parametrize("damaged", [PAYLOAD[:-3], b"\x0a\xff\xff\xff\xff\x0f", b"\x07", b"\x00\x01"])
def test_a_damaged_payload_is_refused(damaged):
    with pytest.raises(MalformedMessage):
        otel_process_context.decode_process_context(damaged)


def published(memory: LaidOutMemory, at: int, payload_at: int, size: int, when: int, version: int = 2) -> None:
    memory.put(at, struct.pack("<8sIIQQ", b"OTEL_CTX", version, size, when, payload_at))


def test_the_process_context_is_read_as_a_seqlock():
    memory = LaidOutMemory()
    memory.put(0x9000, PAYLOAD)
    published(memory, 0x1000, 0x9000, len(PAYLOAD), 123)
    assert otel_process_context.read_process_context(memory, 0x1000).resource[0] == ("service.name", "checkout-api")
    published(memory, 0x1000, 0x9000, len(PAYLOAD), 0)  # being changed: not read
    assert otel_process_context.read_process_context(memory, 0x1000) is None
    published(memory, 0x1000, 0x9000, len(PAYLOAD), 5, version=1)
    assert otel_process_context.read_process_context(memory, 0x1000) is None
    published(memory, 0x1000, 0x9000, 1 << 20, 5)  # past the payload limit
    assert otel_process_context.read_process_context(memory, 0x1000) is None


def record(trace: bytes, span: bytes, attributes: bytes, valid: int = 1) -> bytes:
    return struct.pack("<16s8sBBH", trace, span, valid, 0, len(attributes)) + attributes


def test_a_thread_record_decodes_with_the_process_s_keys():
    attributes = bytes([0, 9]) + b"/checkout" + bytes([1, 4]) + b"acme" + bytes([7, 1]) + b"x"
    decoded = otel_thread_context.decode_record(record(bytes(range(16)), b"\x01" * 8, attributes), ("http.route", "tenant"))
    assert decoded is not None
    assert decoded.trace_id == bytes(range(16)).hex() and decoded.span_id == "01" * 8
    assert decoded.attributes == (("http.route", "/checkout"), ("tenant", "acme"))  # key 7 is no key the process named
    assert otel_thread_context.decode_record(record(bytes(16), bytes(8), b"", valid=0), ()) is None
    # Cut where the kernel's copy ends: the attribute it cuts is left out.
    cut = otel_thread_context.decode_record(record(b"\x01" * 16, b"\x02" * 8, attributes)[:40], ("http.route", "tenant"))
    assert cut is not None and cut.attributes == (("http.route", "/checkout"),)


def test_the_thread_pointer_offset_is_the_static_descriptor_s_argument():
    memory = LaidOutMemory()
    memory.put(0x4000, struct.pack("<Qq", 0x7F00_0000_1000, -648))
    assert otel_thread_context.thread_pointer_offset(memory, 0x4000) == -648
    memory.put(0x4000, struct.pack("<Qq", 0x7F00_0000_1000, 0x5555_0000_0000))  # dynamic TLS: a pointer
    assert otel_thread_context.thread_pointer_offset(memory, 0x4000) is None


def test_the_descriptor_of_the_fixture_s_library_is_found(fixture_library):
    with open(fixture_library, "rb") as handle:
        found = otel_thread_context.descriptor_address(handle)
    assert found is not None and found > 0


@pytest.fixture
def fixture_library():
    path = ROOT / "fixtures" / "build" / "libotel_context.so"
    if not path.exists():
        pytest.skip("the C fixtures are not built")
    return path


def labelled_profile() -> Profile:
    profile = Profile(RunInfo(["server"], [7], 99))
    handler = profile.intern(Frame("handler", "server", FrameKind.NATIVE))
    checkout = profile.intern_labels((("trace_id", "ab" * 16), ("span_id", "cd" * 8), ("http.route", "/checkout")))
    search = profile.intern_labels((("trace_id", "ef" * 16), ("span_id", "01" * 8), ("http.route", "/search")))
    for index, labels in enumerate([checkout] * 3 + [search] * 2 + [0]):
        profile.samples.append(Sample(index, 7, 7, "server", (handler,), WalkEnd.COMPLETE, 0, labels))
    return profile


def test_labels_survive_a_jitprof_file(tmp_path):
    path = tmp_path / "out.jitprof"
    with open(path, "wb") as stream:
        write_raw(labelled_profile(), stream)
    read = read_raw(path)
    assert [read.labels_of(sample).get("http.route") for sample in read.samples] == ["/checkout"] * 3 + ["/search"] * 2 + [None]


def test_pprof_samples_carry_their_labels_and_a_store_keeps_the_span_alone():
    stream = io.BytesIO()
    write_pprof(labelled_profile(), stream)
    assert b"/checkout" in read_pprof_strings(stream.getvalue())
    stream = io.BytesIO()
    write_pprof(labelled_profile(), stream, sample_labels=False)
    strings = read_pprof_strings(stream.getvalue())
    assert b"span_id" in strings and b"/checkout" not in strings and b"trace_id" not in strings
    assert len(read_pprof(stream.getvalue())["samples"]) == 3  # one series per span, and one without


def read_pprof_strings(data: bytes) -> bytes:
    return gzip.decompress(data)


def test_grouped_by_a_label_each_stack_starts_with_its_value():
    stacks = {stack.frames: stack.count for stack in fold(grouped_by(labelled_profile(), "http.route"))}
    assert stacks == {
        ("server", "http.route=/checkout", "handler"): 3,
        ("server", "http.route=/search", "handler"): 2,
        ("server", "http.route=(none)", "handler"): 1,
    }


def test_a_report_selects_samples_by_label():
    shown = filtered(labelled_profile(), SampleFilter(labels=(("http.route", "/search"),)))
    assert len(shown.samples) == 2 and all(shown.labels_of(sample)["http.route"] == "/search" for sample in shown.samples)


def test_a_sample_s_labels_are_its_process_s_and_its_record_s():
    profile = Profile(RunInfo(["server"], [7], 99))
    sources = LabelSources(profile, None)
    context = otel_process_context.decode_process_context(PAYLOAD)
    sources._published[7] = _Published(process=context, thread_offset=-648)
    attributes = bytes([0, 7]) + b"/search"
    label_id = sources.label_id(7, record(b"\x0a" * 16, b"\x0b" * 8, attributes))
    assert profile.label_sets[label_id] == (
        ("service.name", "checkout-api"),
        ("host.cores", "8"),
        ("trace_id", "0a" * 16),
        ("span_id", "0b" * 8),
        ("http.route", "/search"),
    )
    assert profile.label_sets[sources.label_id(7, b"")] == (("service.name", "checkout-api"), ("host.cores", "8"))
    assert sources.label_id(8, record(b"\x0a" * 16, b"\x0b" * 8, b"")) == 0  # a process that publishes nothing
    assert any("pid" not in line and "7 (checkout-api)" in line for line in sources.warnings())
