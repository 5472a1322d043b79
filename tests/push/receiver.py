"""A Pyroscope-like ingest receiver and OTLP profiles receiver on 127.0.0.1
for the tests: it keeps what arrives, decoded from the multipart form (at
/ingest) or by the official OTLP package (at /v1development/profiles), and
can be told to fail (answer 500 or 429, be slow, or be down), as a real
store can."""

from __future__ import annotations

import contextlib
import email.parser
import email.policy
import gzip
import http.server
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import (
    ExportProfilesServiceRequest,
    ExportProfilesServiceResponse,
)

TESTS = Path(__file__).resolve().parents[1]
READER = TESTS / "readers" / "read_pprof.js"
PPROF_FORMAT = TESTS.parent / ".nodes" / "tools" / "node_modules" / "pprof-format"


@dataclass
class Received:
    query: dict[str, str]
    headers: dict[str, str]  # names in lower case
    profile: bytes  # the gzipped pprof of the "profile" part (OTLP: the request's body as sent)
    at: float  # time.time() when it arrived
    otlp: ExportProfilesServiceRequest | None = None  # an OTLP request, decoded

    def decoded(self) -> dict:
        """The profile as an independent reader (pprof-format, in node) sees it."""
        completed = subprocess.run(
            ["node", str(READER), str(PPROF_FORMAT), "/dev/stdin"], input=self.profile, capture_output=True, check=True
        )
        return json.loads(completed.stdout)

    @property
    def app(self) -> str:
        return self.query["name"].partition("{")[0].removesuffix(".cpu")

    @property
    def labels(self) -> dict[str, str]:
        inner = self.query["name"].partition("{")[2].rstrip("}")
        return dict(pair.split("=", 1) for pair in inner.split(",") if pair)


@dataclass
class Behaviour:
    """What the receiver does with the next requests (changed by the test)."""

    fail_with: int | None = None  # an HTTP status to answer instead of 200
    retry_after: str | None = None
    delay_s: float = 0.0  # before answering
    failures_left: int | None = None  # fail only this many requests, then take them
    partial_rejection: str | None = None  # OTLP: take the request, saying this of one rejected profile


@dataclass
class Receiver:
    port: int
    received: list[Received] = field(default_factory=list)
    attempts: int = 0
    attempt_times: list[float] = field(default_factory=list)
    behaviour: Behaviour = field(default_factory=Behaviour)
    server: http.server.ThreadingHTTPServer | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls is not None else 'http'}://127.0.0.1:{self.port}"

    tls: ssl.SSLContext | None = None  # serve HTTPS with this context

    def start(self) -> None:
        """Listen (again) on the receiver's port."""
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                with receiver.lock:
                    receiver.attempts += 1
                    receiver.attempt_times.append(time.time())
                    behaviour = receiver.behaviour
                    failing = behaviour.fail_with is not None and (behaviour.failures_left is None or behaviour.failures_left > 0)
                    if failing and behaviour.failures_left is not None:
                        behaviour.failures_left -= 1
                time.sleep(behaviour.delay_s)
                if failing:
                    self.send_response(behaviour.fail_with or 500)
                    if behaviour.retry_after is not None:
                        self.send_header("Retry-After", behaviour.retry_after)
                    self.send_header("Content-Length", "12")
                    self.end_headers()
                    self.wfile.write(b"store busy\r\n")
                    return
                parsed = urllib.parse.urlsplit(self.path)
                headers = {key.lower(): value for key, value in self.headers.items()}
                if parsed.path.endswith("/v1development/profiles"):
                    self._take_otlp(body, headers, behaviour)
                    return
                if parsed.path != "/ingest":
                    self.send_error(404)
                    return
                message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                    b"Content-Type: " + self.headers.get("Content-Type", "").encode() + b"\r\n\r\n" + body
                )
                profile = b""
                for part in message.iter_parts():
                    if part.get_param("name", header="content-disposition") == "profile":
                        payload = part.get_payload(decode=True)
                        profile = payload if isinstance(payload, bytes) else b""
                query = dict(urllib.parse.parse_qsl(parsed.query))
                with receiver.lock:
                    receiver.received.append(Received(query, headers, profile, time.time()))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _take_otlp(self, body: bytes, headers: dict[str, str], behaviour: Behaviour) -> None:
                raw = gzip.decompress(body) if headers.get("content-encoding") == "gzip" else body
                request = ExportProfilesServiceRequest.FromString(raw)
                with receiver.lock:
                    receiver.received.append(Received({}, headers, body, time.time(), request))
                response = ExportProfilesServiceResponse()
                if behaviour.partial_rejection is not None:
                    response.partial_success.rejected_profiles = 1
                    response.partial_success.error_message = behaviour.partial_rejection
                answer = response.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        if self.tls is not None:
            server.socket = self.tls.wrap_socket(server.socket, server_side=True)
        self.server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Down: connections are refused."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def profiles(self) -> list[Received]:
        with self.lock:
            return list(self.received)


@contextlib.contextmanager
def running_receiver(tls: ssl.SSLContext | None = None) -> Iterator[Receiver]:
    """A receiver listening on a free port, stopped at the end."""
    receiver = Receiver(free_port(), tls=tls)
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.stop()


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Poll condition every 50 ms until it holds or timeout_s passes."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def reader_available() -> bool:
    return shutil.which("node") is not None and PPROF_FORMAT.exists()
