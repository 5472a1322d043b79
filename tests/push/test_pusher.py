"""Pushing to a real HTTP receiver on 127.0.0.1: what arrives, read by an
independent pprof reader; the store down, slow, failing and refusing."""

from __future__ import annotations

import base64
import shutil
import ssl
import subprocess
import time

import pytest

from profiler.push import ingest
from profiler.push.apps import App, AppRegistry
from profiler.push.endpoint import MAX_RETRY_AFTER_S, BadEndpoint, Result, retry_after
from profiler.push.ingest import PyroscopeIngest
from profiler.push.intervals import Interval, Labels, SeriesKey, group_samples
from profiler.push.pusher import Pusher
from profiler.push.spool import Spool
from profiler.safety import http_exchange
from tests.output.test_formats import sample_profile
from tests.push.receiver import Behaviour, reader_available, running_receiver, wait_until

LABELS = Labels("web-1", (("env", "prod"), ("region", "eu-west")))


@pytest.fixture
def receiver():
    with running_receiver() as started:
        yield started


NOW = float(int(time.time()) - 600)  # stores refuse profiles over an hour old


def interval(start_s: float = NOW, length_s: float = 15.0) -> Interval:
    profile = sample_profile()
    registry = AppRegistry()
    registry._apps = {100: App("checkout", "node"), 200: App("billing", "node")}  # as noted when followed
    return Interval(start_s, start_s + length_s, profile.frames, group_samples(profile.samples, registry))


def pusher(receiver_url: str, spool_dir, max_bytes: int = 1 << 20, environ: dict[str, str] | None = None) -> Pusher:
    destination = PyroscopeIngest(ingest.endpoint(receiver_url, "tenant-7", environ or {}), LABELS, 99)
    return Pusher(destination, Spool(spool_dir, max_bytes), say=lambda _message: None)


def test_endpoint_from_options():
    endpoint = ingest.endpoint("https://profiles.example.com:4040/", None, {"JITPROF_PUSH_TOKEN": "t0ken"})
    assert endpoint.url == "https://profiles.example.com:4040/ingest"
    assert endpoint.headers["Authorization"] == "Bearer t0ken" and "X-Scope-OrgID" not in endpoint.headers
    basic = ingest.endpoint("http://store/pyroscope", "acme", {"JITPROF_PUSH_USER": "u", "JITPROF_PUSH_PASSWORD": "p"})
    assert basic.url == "http://store/pyroscope/ingest" and basic.headers["X-Scope-OrgID"] == "acme"
    assert base64.b64decode(basic.headers["Authorization"].removeprefix("Basic ")) == b"u:p"
    for bad in ("ftp://store", "store:4040", "http://user:secret@store"):
        with pytest.raises(BadEndpoint):
            ingest.endpoint(bad, None, {})


@pytest.mark.skipif(not reader_available(), reason="node and pprof-format are installed by make setup")
def test_one_profile_per_application_read_by_pprof_format(receiver, tmp_path):
    sender = pusher(receiver.url, tmp_path / "spool", environ={"JITPROF_PUSH_TOKEN": "s3cret"})
    sender.start()
    sender.submit(interval())
    sender.finish(10)
    profiles = {item.app: item for item in receiver.profiles()}
    assert set(profiles) == {"checkout", "billing"}
    checkout = profiles["checkout"]
    assert checkout.labels == {"hostname": "web-1", "pid": "100", "runtime": "node", "env": "prod", "region": "eu-west"}
    assert checkout.query["from"] == str(int(NOW)) and checkout.query["until"] == str(int(NOW) + 15)
    assert checkout.query["format"] == "pprof" and checkout.query["sampleRate"] == "99" and checkout.query["spyName"] == "jitprof"
    assert checkout.headers["authorization"] == "Bearer s3cret" and checkout.headers["x-scope-orgid"] == "tenant-7"
    decoded = checkout.decoded()
    assert decoded["sampleTypes"] == [["samples", "count"], ["cpu", "nanoseconds"]]
    assert decoded["timeNanos"] == int(NOW) * 10**9 and decoded["durationNanos"] == 15 * 10**9
    assert sum(sample["values"][0] for sample in decoded["samples"]) == 55  # pid 100's samples
    assert all(sample["labels"] == {} for sample in decoded["samples"])  # one series per profile
    hot = max(decoded["samples"], key=lambda sample: sample["values"][0])
    assert [line["name"] for line in hot["stack"][0]] == ["leaf app.js:7", "mid app.js:15", "top app.js:19"]  # inlined
    assert hot["stack"][-1][0]["name"] == "main"
    assert sender.stats.sent == 2 and sender.stats.samples == 60 and len(sender.spool) == 0


def test_store_down_then_up_gets_everything_in_order(receiver, tmp_path):
    receiver.stop()
    sender = pusher(receiver.url, tmp_path / "spool")
    sender.start()
    for index in range(3):
        sender.submit(interval(NOW + 15 * index))
    wait_until(lambda: sender.stats.failed_attempts > 0, 5)
    assert sender.stats.failed_attempts >= 1 and sender.stats.sent == 0
    assert len(sender.spool) == 6  # two applications, three intervals, on disk
    receiver.start()
    sender.finish(15)
    starts = [item.query["from"] for item in receiver.profiles()]
    assert starts == sorted(starts) and len(starts) == 6
    assert sender.stats.sent == 6 and sender.spool.stats.dropped == 0


def test_500_then_success_is_retried_with_backoff(receiver, tmp_path):
    receiver.behaviour = Behaviour(fail_with=500, failures_left=2)
    sender = pusher(receiver.url, tmp_path / "spool")
    sender.start()
    sender.submit(interval())
    wait_until(lambda: len(receiver.profiles()) >= 2, 10)
    sender.finish(5)
    assert len(receiver.profiles()) == 2 and sender.stats.failed_attempts == 2
    gaps = [later - earlier for earlier, later in zip(receiver.attempt_times, receiver.attempt_times[1:])]
    assert gaps[0] >= 0.9 and gaps[1] >= 1.9  # 1 s, then 2 s


def test_429_retry_after_is_honoured(receiver, tmp_path):
    receiver.behaviour = Behaviour(fail_with=429, retry_after="3", failures_left=1)
    sender = pusher(receiver.url, tmp_path / "spool")
    sender.start()
    sender.submit(interval())
    wait_until(lambda: len(receiver.profiles()) >= 2, 10)
    sender.finish(5)
    assert len(receiver.profiles()) == 2
    assert receiver.attempt_times[1] - receiver.attempt_times[0] >= 2.9


def test_refused_profiles_are_dropped_not_retried(receiver, tmp_path):
    receiver.behaviour = Behaviour(fail_with=400)
    sender = pusher(receiver.url, tmp_path / "spool")
    sender.start()
    sender.submit(interval())
    sender.finish(5)
    assert sender.stats.refused == 2 and receiver.attempts == 2 and len(sender.spool) == 0


def test_profiles_over_an_hour_old_are_given_up(receiver, tmp_path):
    sender = pusher(receiver.url, tmp_path / "spool")
    sender.start()
    sender.submit(interval(time.time() - 7200))
    sender.finish(5)
    assert sender.stats.expired == 2 and receiver.attempts == 0


@pytest.mark.parametrize("header", ["nan", "NaN", "inf", "-5", "1e400", "3.5", "0x10", "Wed, 21 Oct 2026 07:28:00 GMT", "١٢"])
def test_a_retry_after_that_is_not_delta_seconds_leaves_it_to_the_backoff(receiver, header):
    """A store answering `Retry-After: nan` made the pusher busy-spin (16 s of
    CPU in a 20 s run): NaN passed min/max into queue.get's timeout."""
    endpoint = ingest.endpoint(receiver.url, None, {})
    receiver.behaviour = Behaviour(fail_with=503, retry_after=header)
    outcome = ingest.send(endpoint, {"name": "a.cpu{}"}, b"x")
    assert outcome.result is Result.RETRY and outcome.retry_after_s is None


def test_a_retry_after_is_capped():
    assert retry_after(" 12 ") == 12 and retry_after("999999999") == MAX_RETRY_AFTER_S and retry_after("0") == 0


def test_outcomes_of_one_request(receiver):
    endpoint = ingest.endpoint(receiver.url, None, {})
    assert ingest.send(endpoint, {"name": "a.cpu{}"}, b"x").result is Result.SENT
    receiver.behaviour = Behaviour(fail_with=503, retry_after="7")
    outcome = ingest.send(endpoint, {"name": "a.cpu{}"}, b"x")
    assert outcome.result is Result.RETRY and outcome.retry_after_s == 7 and "HTTP 503: store busy" in outcome.detail
    receiver.behaviour = Behaviour(delay_s=2)
    started = time.monotonic()
    slow = ingest.send(endpoint, {"name": "a.cpu{}"}, b"x", timeout_s=0.5)
    assert slow.result is Result.RETRY and time.monotonic() - started < 1.5
    receiver.stop()
    down = ingest.send(endpoint, {"name": "a.cpu{}"}, b"x")
    assert down.result is Result.RETRY and "refused" in down.detail.lower()


def test_a_slow_store_does_not_hold_the_end_past_its_budget(receiver, tmp_path):
    receiver.behaviour = Behaviour(delay_s=30)
    sender = pusher(receiver.url, tmp_path / "spool")
    sender.start()
    sender.submit(interval())
    started = time.monotonic()
    sender.finish(2)
    assert time.monotonic() - started < 3.5
    assert sender.stats.sent == 0


def test_spool_bound_holds_while_the_store_is_down(receiver, tmp_path):
    receiver.stop()
    sender = pusher(receiver.url, tmp_path / "spool", max_bytes=4000)
    sender.start()
    for index in range(10):
        sender.submit(interval(NOW + 15 * index))
    sender.finish(3)
    assert sender.spool.stats.dropped > 0 and sender.stats.profiles == 20
    on_disk = sum(path.stat().st_size for path in (tmp_path / "spool").iterdir())
    assert on_disk <= 4000
    # The next run sends what this one left, oldest first.
    receiver.start()
    later = pusher(receiver.url, tmp_path / "spool", max_bytes=4000)
    later.start()
    later.finish(5)
    starts = [int(item.query["from"]) for item in receiver.profiles()]
    assert starts and starts == sorted(starts) and starts[-1] == int(NOW) + 15 * 9


def test_series_name():
    key = SeriesKey(App("checkout", "node"), 4242)
    assert LABELS.series_name(key) == "checkout.cpu{hostname=web-1,pid=4242,runtime=node,env=prod,region=eu-west}"
    kernel = SeriesKey(App("kernel", "kernel"), None)
    assert Labels("h", (("note", "a,b}c"),)).series_name(kernel) == "kernel.cpu{hostname=h,runtime=kernel,note=a_b_c}"


def _certificates(directory) -> tuple[str, str, str]:
    """A CA of the test's own and a server certificate it signed for 127.0.0.1 (openssl)."""
    ca_key, ca, key, request, cert = (
        str(directory / name) for name in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem")
    )
    quiet = {"check": True, "capture_output": True}
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            ca_key,
            "-out",
            ca,
            "-days",
            "1",
            "-subj",
            "/CN=jitprof test CA",
        ],
        **quiet,
    )
    subprocess.run(
        ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", request, "-subj", "/CN=127.0.0.1"], **quiet
    )
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    subprocess.run(
        [
            "openssl",
            "x509",
            "-req",
            "-in",
            request,
            "-CA",
            ca,
            "-CAkey",
            ca_key,
            "-CAcreateserial",
            "-out",
            cert,
            "-days",
            "1",
            "-extfile",
            str(directory / "san.ext"),
        ],
        **quiet,
    )
    return ca, cert, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test's certificates")
def test_https_with_the_systems_certificates(tmp_path, monkeypatch):
    ca, cert, key = _certificates(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    try:
        with running_receiver(tls=context) as secure:
            endpoint = ingest.endpoint(secure.url, None, {})
            http_exchange.default_tls.cache_clear()
            untrusted = ingest.send(endpoint, {"name": "a.cpu{}"}, b"x")
            assert untrusted.result is Result.RETRY and "certificate verify failed" in untrusted.detail
            monkeypatch.setenv("SSL_CERT_FILE", ca)  # how a system's trust store is pointed elsewhere
            http_exchange.default_tls.cache_clear()
            assert ingest.send(endpoint, {"name": "a.cpu{}"}, b"x").result is Result.SENT
            assert len(secure.profiles()) == 1
    finally:
        http_exchange.default_tls.cache_clear()  # no later test trusts the test's CA


def test_a_redirect_is_not_followed_and_takes_no_credentials_along(tmp_path):
    """A store answering 302 to another port: that port got the bearer token
    and the tenant, the POST became a bodiless GET, and "7 of 7 sent"."""
    from tests.safety.test_http_exchange import RawServer

    elsewhere = RawServer(lambda connection: connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
    store = RawServer(
        lambda connection: connection.sendall(
            b"HTTP/1.1 302 Found\r\nLocation: %s/ingest\r\nContent-Length: 0\r\n\r\n" % elsewhere.url.encode()
        )
    )
    try:
        sender = pusher(store.url, tmp_path / "spool", environ={"JITPROF_PUSH_TOKEN": "s3cret"})
        messages: list[str] = []
        sender._say = messages.append
        sender.start()
        sender.submit(interval())
        sender.finish(5)
        assert elsewhere.requests == [] and b"s3cret" in store.requests[0]
        assert sender.stats.sent == 0 and sender.stats.refused == sender.stats.profiles == 2
        assert any("redirected to" in message and "not followed" in message for message in messages)
    finally:
        store.close()
        elsewhere.close()


def test_a_trickling_store_is_given_only_what_is_left_of_the_budget(tmp_path):
    """One byte every 0.2 s held the sender for the whole run, and the end
    took 20 s after SIGTERM."""
    from tests.safety.test_http_exchange import RawServer, drip

    store = RawServer(drip([b"HTTP/1.1 200 OK\r\n"] + [b"X: y\r\n"] * 500, 0.2))
    try:
        sender = pusher(store.url, tmp_path / "spool")
        sender.start()
        sender.submit(interval())
        started = time.monotonic()
        sender.finish(2)
        assert time.monotonic() - started < 2.4
        assert not sender._thread.is_alive()  # the request ended with the budget, not abandoned
        assert sender.stats.sent == 0
    finally:
        store.close()
