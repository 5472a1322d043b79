"""Where profiles go (--push, --otlp): the URL, checked, and the headers
every request carries; and what came of a request.

Credentials come from the environment, never the command line (where `ps`
shows them): JITPROF_PUSH_TOKEN (a bearer token), or JITPROF_PUSH_USER and
JITPROF_PUSH_PASSWORD (basic auth). TLS uses the system's certificates
(SSL_CERT_FILE and SSL_CERT_DIR are honoured, as by OpenSSL).
"""

from __future__ import annotations

import base64
import enum
import urllib.parse
from dataclasses import dataclass, field

from profiler import __version__

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
    """How one send to a store went."""

    result: Result
    detail: str = ""  # for the log: "HTTP 500: ...", "connection refused"
    retry_after_s: float | None = None  # what the store asked for (429/503)


@dataclass(frozen=True)
class Endpoint:
    """Where a signal is sent, with its headers."""

    url: str  # the store's base URL + the signal's path
    headers: dict[str, str] = field(default_factory=dict)
    signal_path: str = ""  # "/ingest", "/v1development/profiles"

    @classmethod
    def from_options(
        cls,
        base_url: str,
        tenant: str | None,
        environ: dict[str, str],
        signal_path: str,
        extra_headers: dict[str, str] | None = None,
    ) -> Endpoint:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise BadEndpoint(f"{base_url}: give an http:// or https:// URL of the store")
        if parsed.username or parsed.password:
            raise BadEndpoint(
                f"{parsed.scheme}://...@{parsed.hostname}: credentials in the URL would show in `ps`; "
                f"put them in {USER_VARIABLE} and {PASSWORD_VARIABLE} instead"
            )
        path = parsed.path.rstrip("/")
        if not path.endswith(signal_path):
            path += signal_path
        headers = {"User-Agent": f"jitprof/{__version__}", **(extra_headers or {})}
        if environ.get(TOKEN_VARIABLE):
            headers["Authorization"] = f"Bearer {environ[TOKEN_VARIABLE]}"
        elif environ.get(USER_VARIABLE):
            pair = f"{environ[USER_VARIABLE]}:{environ.get(PASSWORD_VARIABLE, '')}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        if tenant:
            headers["X-Scope-OrgID"] = tenant
        return cls(urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, path, "", "")), headers, signal_path)

    @property
    def shown(self) -> str:
        """The URL for logs."""
        return self.url.removesuffix(self.signal_path)


def retry_after(value: str | None) -> float | None:
    """A store's Retry-After as RFC 9110 has it: delta-seconds, digits only
    (float() would take "nan", which passes min/max and made the pusher's
    wait a busy spin). An HTTP date or anything else: the backoff decides."""
    text = (value or "").strip()
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        return None
    return min(float(text), MAX_RETRY_AFTER_S)
