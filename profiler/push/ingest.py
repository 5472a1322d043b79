"""Pyroscope's ingest API (Grafana Alloy's receiver speaks it too):
`POST /ingest?name=APP.cpu{labels}&from=&until=&format=pprof&...` with the
gzipped pprof as the "profile" part of a multipart form, as Pyroscope's own
agents send it.

Credentials come from the environment, never the command line (where `ps`
shows them): JITPROF_PUSH_TOKEN (a bearer token), or JITPROF_PUSH_USER and
JITPROF_PUSH_PASSWORD (basic auth). TLS uses the system's certificates
(SSL_CERT_FILE and SSL_CERT_DIR are honoured, as by OpenSSL).
"""

from __future__ import annotations

import base64
import enum
import secrets
import urllib.parse
from dataclasses import dataclass, field

from profiler import __version__
from profiler.safety.http_exchange import ExchangeFailed, exchange

REQUEST_TIMEOUT_S = 10.0
MAX_RETRY_AFTER_S = 300.0
TOKEN_VARIABLE = "JITPROF_PUSH_TOKEN"
USER_VARIABLE = "JITPROF_PUSH_USER"
PASSWORD_VARIABLE = "JITPROF_PUSH_PASSWORD"


class BadEndpoint(ValueError):
    pass


class Result(enum.Enum):
    SENT = "sent"
    RETRY = "retry"  # the store is down, slow, overloaded: try again later
    REFUSED = "refused"  # the store will not take this one: trying again would not help


@dataclass(frozen=True)
class Outcome:
    result: Result
    detail: str = ""  # for the log: "HTTP 500: ...", "connection refused"
    retry_after_s: float | None = None  # what the store asked for (429/503)


@dataclass(frozen=True)
class Endpoint:
    url: str  # the ingest URL: base + /ingest
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_options(cls, base_url: str, tenant: str | None, environ: dict[str, str]) -> Endpoint:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise BadEndpoint(f"{base_url}: give an http:// or https:// URL of the store")
        if parsed.username or parsed.password:
            raise BadEndpoint(
                f"{parsed.scheme}://...@{parsed.hostname}: credentials in the URL would show in `ps`; "
                f"put them in {USER_VARIABLE} and {PASSWORD_VARIABLE} instead"
            )
        path = parsed.path.rstrip("/")
        if not path.endswith("/ingest"):
            path += "/ingest"
        headers = {"User-Agent": f"jitprof/{__version__}"}
        if environ.get(TOKEN_VARIABLE):
            headers["Authorization"] = f"Bearer {environ[TOKEN_VARIABLE]}"
        elif environ.get(USER_VARIABLE):
            pair = f"{environ[USER_VARIABLE]}:{environ.get(PASSWORD_VARIABLE, '')}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        if tenant:
            headers["X-Scope-OrgID"] = tenant
        return cls(urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, path, "", "")), headers)

    @property
    def shown(self) -> str:
        """The URL for logs."""
        return self.url.removesuffix("/ingest")


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
        return Outcome(Result.RETRY, detail, _retry_after(reply.headers.get("retry-after")))
    return Outcome(Result.REFUSED, detail)


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: the backoff decides
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)
