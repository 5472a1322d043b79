"""Pyroscope's ingest API (Grafana Alloy's receiver speaks it too):
`POST /ingest?name=APP.cpu{labels}&from=&until=&format=pprof&...` with the
gzipped pprof as the "profile" part of a multipart form, as Pyroscope's own
agents send it.
"""

from __future__ import annotations

import secrets
import urllib.parse

from profiler.push.endpoint import REQUEST_TIMEOUT_S, Endpoint, Outcome, Result, retry_after
from profiler.push.intervals import Interval, Labels, encode, query
from profiler.safety.http_exchange import ExchangeFailed, exchange

PATH = "/ingest"


def endpoint(base_url: str, tenant: str | None, environ: dict[str, str]) -> Endpoint:
    return Endpoint.from_options(base_url, tenant, environ, PATH)


class PyroscopeIngest:
    """The --push destination: a profile per application process and interval."""

    option = "--push"
    sends = "a profile per application"
    unit = "profiles"

    def __init__(self, endpoint: Endpoint, labels: Labels, frequency_hz: int) -> None:
        self.endpoint = endpoint
        self._labels = labels
        self._frequency_hz = frequency_hz

    @property
    def shown(self) -> str:
        return self.endpoint.shown

    def package(self, interval: Interval) -> list[tuple[dict[str, str], bytes]]:
        return [
            (query(self._labels, key, interval, self._frequency_hz), encode(interval, key, self._frequency_hz))
            for key in interval.series
        ]

    def send(self, query: dict[str, str], body: bytes, timeout_s: float) -> Outcome:
        return send(self.endpoint, query, body, timeout_s)


def multipart(profile: bytes) -> tuple[bytes, str]:
    """The body and its content type."""
    boundary = "jitprof-" + secrets.token_hex(12)
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="profile"; filename="profile.pprof"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    return head + profile + f"\r\n--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def send(endpoint: Endpoint, query: dict[str, str], profile: bytes, timeout_s: float = REQUEST_TIMEOUT_S) -> Outcome:
    """POST one profile; only a 2xx answer to it counts as sent. A redirect is
    not followed: the credentials and the body stay with the store named."""
    body, content_type = multipart(profile)
    url = endpoint.url + "?" + urllib.parse.urlencode(query)
    try:
        reply = exchange(
            "POST",
            url,
            deadline_s=timeout_s,
            headers={**endpoint.headers, "Content-Type": content_type},
            body=body,
        )
    except ExchangeFailed as error:
        return Outcome(Result.RETRY, str(error))
    if 200 <= reply.status < 300:
        return Outcome(Result.SENT)
    text = " ".join(reply.body[:300].decode("utf-8", "replace").split())[:200]
    detail = f"HTTP {reply.status}{': ' + text if text else ''}"
    if 300 <= reply.status < 400:
        where = urllib.parse.urljoin(url, reply.location).split("?", 1)[0][:200] if reply.location else "nowhere"
        return Outcome(
            Result.REFUSED, f"HTTP {reply.status}: redirected to {where}, not followed (give --push the store's own URL)"
        )
    if reply.status in (408, 429) or reply.status >= 500:
        return Outcome(Result.RETRY, detail, retry_after(reply.headers.get("retry-after")))
    return Outcome(Result.REFUSED, detail)
