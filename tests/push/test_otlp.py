"""--otlp against a real HTTP receiver on 127.0.0.1 that decodes with the
official OTLP package: what a backend reads (resources, stacks as lines of
locations, timestamps, mappings), the receiver's answers, and --push with
--otlp together."""

from __future__ import annotations

import gzip
import time

import pytest

from profiler.push import otlp
from profiler.push.apps import App, AppRegistry
from profiler.push.endpoint import BadEndpoint, Result
from profiler.push.intervals import Interval, Labels, group_samples
from profiler.push.otlp import OtlpExport
from profiler.push.otlp_profiles import export_request
from profiler.push.pusher import Pusher
from profiler.push.spool import Spool
from profiler.run.options import PushOptions
from profiler.run.push_session import OTLP_SPOOL, PushSession
from tests.output.test_formats import sample_profile
from tests.push.otlp_reader import read
from tests.push.receiver import Behaviour, running_receiver, wait_until

LABELS = Labels("web-1", (("env", "prod"),))
NOW = float(int(time.time()) - 600)
BUILD_IDS = {"/usr/bin/node": "0123456789abcdef0123456789abcdef01234567"}
CONTAINER = "4f3c" * 16


@pytest.fixture
def receiver():
    with running_receiver() as started:
        yield started


def interval(start_s: float = NOW) -> Interval:
    profile = sample_profile()
    registry = AppRegistry()
    registry._apps = {
        100: App("checkout", "node", "node", CONTAINER),
        200: App("billing", "node", "node"),
    }
    return Interval(start_s, start_s + 15.0, profile.frames, group_samples(profile.samples, registry))


def exporter(url: str, spool_dir, environ: dict[str, str] | None = None, max_bytes: int = 1 << 20) -> Pusher:
    destination = OtlpExport(otlp.endpoint(url, "tenant-7", environ or {}), LABELS, 99, BUILD_IDS)
    return Pusher(destination, Spool(spool_dir, max_bytes), say=lambda _message: None)


def test_one_request_per_interval_as_a_backend_reads_it(receiver, tmp_path):
    sender = exporter(receiver.url, tmp_path / "spool", environ={"JITPROF_PUSH_TOKEN": "s3cret"})
    sender.start()
    offset_ns = time.time_ns() - time.monotonic_ns()
    sender.submit(interval())
    sender.finish(10)
    [arrived] = receiver.profiles()
    assert arrived.headers["content-type"] == "application/x-protobuf" and arrived.headers["content-encoding"] == "gzip"
    assert arrived.headers["authorization"] == "Bearer s3cret" and arrived.headers["x-scope-orgid"] == "tenant-7"
    profiles = {record.resource["service.name"]: record for record in read(arrived.otlp)}
    assert set(profiles) == {"checkout", "billing"}
    checkout = profiles["checkout"]
    assert checkout.resource == {
        "service.name": "checkout",
        "host.name": "web-1",
        "process.pid": 100,
        "process.executable.name": "node",
        "process.runtime.name": "node",
        "container.id": CONTAINER,
        "env": "prod",
    }
    assert "container.id" not in profiles["billing"].resource
    assert checkout.scope == "jitprof" and checkout.sample_type == ("samples", "count")
    assert checkout.period_type == ("cpu", "nanoseconds") and checkout.period == round(1e9 / 99)
    assert checkout.time_ns == round(NOW * 1e9) and checkout.duration_ns == 15_000_000_000
    assert checkout.count() == 55 and profiles["billing"].count() == 5  # every sample, once
    for sample in checkout.samples:
        assert sample.values == [1] * len(sample.timestamps_ns)
        assert sample.timestamps_ns == sorted(sample.timestamps_ns)
    # the samples' monotonic times, made Unix time
    stamps = sorted(stamp for sample in checkout.samples for stamp in sample.timestamps_ns)
    taken = sorted(sample.time_ns for sample in sample_profile().samples if sample.pid == 100)
    shifts = {stamp - time_ns for stamp, time_ns in zip(stamps, taken)}
    assert len(shifts) == 1 and abs(shifts.pop() - offset_ns) < 1e9
    by_thread = {sample.attributes["thread.id"]: sample for sample in checkout.samples}
    assert set(by_thread) == {100, 101} and by_thread[101].attributes["thread.name"] == "node"
    # leaf first; mid and leaf were inlined into top: one location, three lines, innermost first
    deep = max(checkout.samples, key=lambda sample: sum(len(location.lines) for location in sample.stack))
    jit, main = deep.stack
    assert [line.function for line in jit.lines] == ["leaf app.js:7", "mid app.js:15", "top app.js:19"]
    assert [(line.file, line.line, line.column) for line in jit.lines[:2]] == [("/srv/app.js", 10, 5), ("/srv/app.js", 16, 10)]
    assert jit.lines[0].start_line == 7 and jit.frame_type == "v8js" and jit.mapping == "[jit]"
    assert main.lines[0].function == "main" and main.frame_type == "native"
    assert main.mapping == "/usr/bin/node" and main.build_id == BUILD_IDS["/usr/bin/node"]
    kernel = profiles["billing"].samples[0].stack[0]
    assert kernel.lines[0].function == "ksys_write" and kernel.frame_type == "kernel" and kernel.mapping == "[kernel.kallsyms]"
    # one dictionary for both processes: the frames they share are one entry
    functions = [strings for strings in arrived.otlp.dictionary.function_table]
    assert len(functions) == len({(item.name_strindex, item.filename_strindex, item.start_line) for item in functions})


def test_dictionary_tables_start_with_their_zero_items(receiver, tmp_path):
    sender = exporter(receiver.url, tmp_path / "spool")
    sender.start()
    sender.submit(interval())
    sender.finish(10)
    dictionary = receiver.profiles()[0].otlp.dictionary
    assert dictionary.string_table[0] == ""
    for table in (dictionary.location_table, dictionary.function_table, dictionary.mapping_table, dictionary.stack_table):
        assert table[0].ByteSize() == 0
    assert dictionary.attribute_table[0].ByteSize() == 0 and dictionary.link_table[0].ByteSize() == 0


def test_answers_as_the_specification_has_them(receiver, tmp_path):
    destination = OtlpExport(otlp.endpoint(receiver.url, None, {}), LABELS, 99, {})
    [(query, body)] = destination.package(interval())
    assert gzip.decompress(body)[:1]  # gzipped protobuf
    assert destination.send(query, body, 5).result is Result.SENT
    receiver.behaviour = Behaviour(fail_with=503, retry_after="7")
    outcome = destination.send(query, body, 5)
    assert outcome.result is Result.RETRY and outcome.retry_after_s == 7.0
    receiver.behaviour = Behaviour(fail_with=500)
    assert destination.send(query, body, 5).result is Result.REFUSED  # not retryable in OTLP
    receiver.behaviour = Behaviour(fail_with=429)
    assert destination.send(query, body, 5).result is Result.RETRY
    receiver.behaviour = Behaviour(partial_rejection="too many samples")
    taken = destination.send(query, body, 5)
    assert taken.result is Result.SENT and taken.detail == "1 profiles rejected: too many samples"
    receiver.stop()
    assert destination.send(query, body, 2).result is Result.RETRY


def test_a_receiver_down_then_up_gets_every_interval_in_order(receiver, tmp_path):
    receiver.stop()
    messages: list[str] = []
    destination = OtlpExport(otlp.endpoint(receiver.url, None, {}), LABELS, 99, {})
    sender = Pusher(destination, Spool(tmp_path / "spool", 1 << 20), say=messages.append)
    sender.start()
    for index in range(3):
        sender.submit(interval(NOW + 15 * index))
    assert wait_until(lambda: sender.stats.failed_attempts >= 1, 10)
    receiver.start()
    assert wait_until(lambda: len(receiver.profiles()) == 3, 20)
    sender.finish(10)
    starts = [read(item.otlp)[0].time_ns for item in receiver.profiles()]
    assert starts == sorted(starts) and len(set(starts)) == 3
    assert any("cannot send to" in message for message in messages)
    assert any("takes profiles again" in message for message in messages)


def test_headers_from_the_opentelemetry_variables():
    environ = {"OTEL_EXPORTER_OTLP_HEADERS": "api-key=abc%20def, x-team = core", "JITPROF_PUSH_TOKEN": "t"}
    endpoint = otlp.endpoint("http://collector:4318/", None, environ)
    assert endpoint.url == "http://collector:4318/v1development/profiles" and endpoint.shown == "http://collector:4318"
    assert endpoint.headers["api-key"] == "abc def" and endpoint.headers["x-team"] == "core"
    assert endpoint.headers["Authorization"] == "Bearer t"
    # the profiles' own variable wins; the body's own headers cannot be replaced
    environ["OTEL_EXPORTER_OTLP_PROFILES_HEADERS"] = "only=this,content-encoding=br"
    assert {
        key: value for key, value in otlp.endpoint("http://c:4318", None, environ).headers.items() if key != "User-Agent"
    } == {
        "only": "this",
        "Authorization": "Bearer t",
    }
    assert otlp.endpoint("http://c:4318/v1development/profiles", None, {}).url == "http://c:4318/v1development/profiles"
    for bad in ("novalue", "bad name=x", "x=a%0Db"):
        with pytest.raises(BadEndpoint):
            otlp.endpoint("http://c:4318", None, {"OTEL_EXPORTER_OTLP_HEADERS": bad})


def test_push_and_otlp_together_each_get_every_interval(receiver, tmp_path):
    with running_receiver() as second:
        options = PushOptions(url=receiver.url, otlp_url=second.url, interval_s=15, spool_dir=tmp_path / "spool")
        session = PushSession(options, {}, 99, keep_samples=False, build_ids=dict(BUILD_IDS))
        profile = sample_profile()
        for pid in (100, 200):
            session.apps._apps[pid] = App("checkout" if pid == 100 else "billing", "node", "node")
        session.cut(profile, lambda: None, time.time())
        session.finish(profile, lambda: None, lambda: False, lambda _text: None)
        assert sorted(item.app for item in receiver.profiles()) == ["billing", "checkout"]
        [request] = second.profiles()
        assert sorted(record.resource["service.name"] for record in read(request.otlp)) == ["billing", "checkout"]
        assert (tmp_path / "spool" / OTLP_SPOOL).is_dir()  # each destination keeps its own spool
        summary = session.summary()
        assert summary[0].startswith(f"jitprof: --push to {receiver.url}: 2 of 2 profiles sent")
        assert summary[1].startswith(f"jitprof: --otlp to {second.url}: 1 of 1 requests sent (2 profiles")


def test_off_cpu_time_goes_as_a_second_profile_of_nanoseconds():
    from profiler.push.otlp_profiles import export_request  # noqa: PLC0415
    from profiler.symbolize.waits import OFF_CPU  # noqa: PLC0415
    from tests.output.test_off_cpu_formats import PERIOD_NS, off_cpu_profile  # noqa: PLC0415

    profile = off_cpu_profile(cpu_samples=4, waits=[200_000_000, 50_000_000])
    registry = AppRegistry()
    registry._apps = {7: App("worker", "native", "native")}
    request = export_request(
        Interval(NOW, NOW + 15.0, profile.frames, group_samples(profile.samples, registry)), LABELS, 99, 0, {}
    )
    profiles = {record.sample_type: record for record in read(request)}
    assert set(profiles) == {("cpu", "nanoseconds"), ("off_cpu", "nanoseconds")}
    cpu, waits = profiles[("cpu", "nanoseconds")], profiles[("off_cpu", "nanoseconds")]
    assert sorted(value for sample in cpu.samples for value in sample.values) == [PERIOD_NS] * 4
    assert sorted(value for sample in waits.samples for value in sample.values) == [50_000_000, 200_000_000]
    assert all(sample.stack[0].lines[0].function == OFF_CPU.name for sample in waits.samples)  # leaf first
    assert cpu.resource == waits.resource and cpu.resource["service.name"] == "worker"


def test_a_labelled_sample_links_to_its_span_and_carries_its_attributes():
    """A sample labelled with a trace and span (the OpenTelemetry thread
    context) links to that span; its other labels are its attributes."""
    profile = sample_profile()
    labelled = profile.intern_labels((("trace_id", "ab" * 16), ("span_id", "cd" * 8), ("http.route", "/checkout")))
    profile.samples[0].labels = labelled
    registry = AppRegistry()
    registry._apps = {100: App("checkout", "node", "node"), 200: App("billing", "node", "node")}
    sent = Interval(NOW, NOW + 15.0, profile.frames, group_samples(profile.samples, registry), profile.label_sets)
    request = export_request(sent, LABELS, 99, 0, {})
    links = request.dictionary.link_table
    assert len(links) == 2 and links[1].trace_id == bytes.fromhex("ab" * 16) and links[1].span_id == bytes.fromhex("cd" * 8)
    samples = [
        sample
        for resource in request.resource_profiles
        for scope in resource.scope_profiles
        for profile in scope.profiles
        for sample in profile.samples
    ]
    linked = [sample for sample in samples if sample.link_index]
    assert len(linked) == 1 and sum(len(sample.timestamps_unix_nano) for sample in linked) == 1
    strings = request.dictionary.string_table
    attributes = {
        strings[request.dictionary.attribute_table[index].key_strindex]: request.dictionary.attribute_table[
            index
        ].value.string_value
        for index in linked[0].attribute_indices
    }
    assert attributes["http.route"] == "/checkout" and "trace_id" not in attributes
