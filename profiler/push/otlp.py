"""OTLP/HTTP for profiles (--otlp): each interval, every process in one
ExportProfilesServiceRequest, protobuf and gzipped, POSTed to
BASE/v1development/profiles, as an OpenTelemetry Collector's OTLP receiver
and Grafana Pyroscope take it.

Answers as the OTLP specification has them: 429, 502, 503 and 504 are tried
again (after Retry-After when given); any other failure is final; a 2xx with
a partial success is sent, and what was rejected is said.
Headers may also come from OTEL_EXPORTER_OTLP_PROFILES_HEADERS or
OTEL_EXPORTER_OTLP_HEADERS (key=value,..., values percent-encoded), as the
OpenTelemetry SDKs read them.
"""

from __future__ import annotations

import gzip
import re
import time
import urllib.parse

from profiler.push.endpoint import BadEndpoint, Endpoint, Outcome, Result, retry_after
from profiler.push.intervals import Interval, Labels
from profiler.safety.http_exchange import ExchangeFailed, exchange
from profiler.safety.terminal import printable

PATH = "/v1development/profiles"
HEADERS_VARIABLES = ("OTEL_EXPORTER_OTLP_PROFILES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
RETRIED_STATUSES = frozenset({429, 502, 503, 504})
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
_FORBIDDEN_HEADERS = frozenset({"content-type", "content-encoding", "content-length", "host", "transfer-encoding"})


def endpoint(base_url: str, tenant: str | None, environ: dict[str, str]) -> Endpoint:
    return Endpoint.from_options(base_url, tenant, environ, PATH, extra_headers(environ))


def extra_headers(environ: dict[str, str]) -> dict[str, str]:
    """The headers the OpenTelemetry variables name (the profiles' own first)."""
    text = next((environ[name] for name in HEADERS_VARIABLES if environ.get(name)), "")
    headers: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, equals, value = item.partition("=")
        name, value = name.strip(), urllib.parse.unquote(value.strip())
        if not equals or not _HEADER_NAME.match(name) or any(ord(char) < 32 or ord(char) == 127 for char in value):
            raise BadEndpoint(f"{HEADERS_VARIABLES[1]}: {printable(item.strip()[:60])!r} is not name=value")
        if name.lower() not in _FORBIDDEN_HEADERS:
            headers[name] = value
    return headers


class OtlpExport:
    """The --otlp destination: one request per interval."""

    option = "--otlp"
    sends = "OTLP profiles"
    unit = "OTLP requests"

    def __init__(self, endpoint: Endpoint, labels: Labels, frequency_hz: int, build_ids: dict[str, str]) -> None:
        self.endpoint = endpoint
        self._labels = labels
        self._frequency_hz = frequency_hz
        self._build_ids = build_ids  # the run's, filled as native modules are met

    @property
    def shown(self) -> str:
        return self.endpoint.shown

    def package(self, interval: Interval) -> list[tuple[dict[str, str], bytes]]:
        # protobuf's modules load with the first interval, not at every jitprof start (30 ms)
        from profiler.push.otlp_profiles import export_request

        wall_offset_ns = time.time_ns() - time.monotonic_ns()
        request = export_request(interval, self._labels, self._frequency_hz, wall_offset_ns, self._build_ids)
        stamp = time.strftime("%H:%M:%S", time.localtime(interval.start_s))
        query = {
            "name": f"{stamp} +{interval.end_s - interval.start_s:.0f} s, {len(interval.series)} processes",
            "until": str(max(int(interval.end_s), int(interval.start_s) + 1)),
        }
        return [(query, gzip.compress(request.SerializeToString(), compresslevel=6, mtime=0))]

    def send(self, query: dict[str, str], body: bytes, timeout_s: float) -> Outcome:
        """POST one request; a redirect is not followed (the credentials and
        the body stay with the receiver named)."""
        try:
            reply = exchange(
                "POST",
                self.endpoint.url,
                deadline_s=timeout_s,
                headers={**self.endpoint.headers, "Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
                body=body,
            )
        except ExchangeFailed as error:
            return Outcome(Result.RETRY, str(error))
        if 200 <= reply.status < 300:
            return Outcome(Result.SENT, _partial_success(reply.body))
        detail = f"HTTP {reply.status}{': ' + _error_text(reply.body) if reply.body else ''}"
        if 300 <= reply.status < 400:
            return Outcome(Result.REFUSED, f"HTTP {reply.status}: a redirect, not followed (give --otlp the receiver's own URL)")
        if reply.status in RETRIED_STATUSES:
            return Outcome(Result.RETRY, detail, retry_after(reply.headers.get("retry-after")))
        return Outcome(Result.REFUSED, detail)


def _partial_success(body: bytes) -> str:
    """What the receiver said it rejected, or "" (an empty body is all taken)."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import ExportProfilesServiceResponse

    try:
        response = ExportProfilesServiceResponse.FromString(body)
    except DecodeError:
        return ""
    partial = response.partial_success
    if not partial.rejected_profiles and not partial.error_message:
        return ""
    return f"{partial.rejected_profiles} profiles rejected: {printable(partial.error_message[:200])}"


def _error_text(body: bytes) -> str:
    """The readable part of an error body (google.rpc.Status in protobuf, or text)."""
    runs = re.findall(rb"[ -~]{6,}", body[:2000])
    return printable(" ".join(run.decode("ascii") for run in runs)[:200])
