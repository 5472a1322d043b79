"""One HTTP exchange with a server jitprof does not control (a debuginfod
server, a profile store), bounded as a whole.

A per-read socket timeout does not bound an exchange: a server sending one
header every few seconds, or one byte a second, holds it for ever. Here the
exchange has one deadline, from connecting to the last byte: every read and
write on its socket (TLS included) may wait only for what is left of it.
Only http and https are spoken, at every hop; redirects are followed only
when asked for, and never carry a body or credentials; a malformed answer
(bad status line, endless headers) is a failure with one line of reason,
not a traceback.
"""

from __future__ import annotations

import functools
import http.client
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_REDIRECTS = 5
READ_CHUNK = 1 << 20


class ExchangeFailed(Exception):
    """The exchange did not complete; the message is one line for the log."""


@dataclass
class Reply:
    status: int
    headers: dict[str, str] = field(default_factory=dict)  # lowercase names
    body: bytes = b""  # up to max_body bytes (when no sink took it)
    location: str = ""  # where a redirect not followed pointed


def exchange(
    method: str,
    url: str,
    *,
    deadline_s: float,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    max_body: int = 4096,
    sink: Callable[[bytes], None] | None = None,
    follow_redirects: bool = False,
    tls: ssl.SSLContext | None = None,
) -> Reply:
    """Send one request and read its answer, all within deadline_s. With a
    sink, a 2xx body goes to it in chunks (it may raise to stop); otherwise
    up to max_body bytes are kept. follow_redirects: GETs only, http(s)
    only, no credentials, at most MAX_REDIRECTS, the same deadline."""
    deadline = time.monotonic() + deadline_s
    for _ in range(MAX_REDIRECTS + 1):
        reply = _one(method, url, deadline, headers or {}, body, max_body, sink, tls)
        if not (300 <= reply.status < 400 and reply.location and follow_redirects and method == "GET"):
            return reply
        url = urllib.parse.urljoin(url, reply.location)
        headers = {name: value for name, value in (headers or {}).items() if name.lower() in ("user-agent", "accept")}
    raise ExchangeFailed(f"more than {MAX_REDIRECTS} redirects")


def _one(
    method: str,
    url: str,
    deadline: float,
    headers: dict[str, str],
    body: bytes | None,
    max_body: int,
    sink: Callable[[bytes], None] | None,
    tls: ssl.SSLContext | None,
) -> Reply:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ExchangeFailed(f"not an http(s) URL: {url[:200]}")
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise ExchangeFailed("timed out")
    try:
        port = parsed.port
    except ValueError as error:
        raise ExchangeFailed(f"bad port in {url[:200]}") from error
    connection: http.client.HTTPConnection
    if parsed.scheme == "https":
        context = tls or default_tls()
        context.sslsocket_class = _DeadlineSSLSocket  # type: ignore[assignment]
        connection = _HttpsConnection(deadline, parsed.hostname, port, timeout=remaining, context=context)
    else:
        connection = _HttpConnection(deadline, parsed.hostname, port, timeout=remaining)
    try:
        target = urllib.parse.urlunsplit(("", "", parsed.path or "/", parsed.query, ""))
        connection.request(method, target, body=body, headers=headers)
        response = connection.getresponse()
        reply = Reply(response.status, {name.lower(): value for name, value in response.getheaders()})
        if 300 <= response.status < 400:
            reply.location = reply.headers.get("location", "")
        if sink is not None and 200 <= response.status < 300:
            while chunk := response.read1(READ_CHUNK):
                sink(chunk)
        else:
            reply.body = response.read(max_body)
        return reply
    except ExchangeFailed:
        raise
    except (OSError, http.client.HTTPException, ValueError) as error:
        raise ExchangeFailed(_reason(error)) from error
    finally:
        connection.close()


class _DeadlineSocket(socket.socket):
    """A socket whose every wait ends at the exchange's deadline."""

    deadline = 0.0

    def _arm(self) -> None:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("timed out")
        self.settimeout(remaining)

    def recv_into(self, buffer, nbytes=0, flags=0):  # type: ignore[no-untyped-def,override]  # noqa: ANN001, ANN201
        self._arm()
        return super().recv_into(buffer, nbytes, flags)

    def recv(self, bufsize, flags=0):  # type: ignore[no-untyped-def,override]  # noqa: ANN001, ANN201
        self._arm()
        return super().recv(bufsize, flags)

    def sendall(self, data, flags=0):  # type: ignore[no-untyped-def,override]  # noqa: ANN001, ANN201
        self._arm()  # sendall's timeout bounds the whole call
        return super().sendall(data, flags)


class _DeadlineSSLSocket(ssl.SSLSocket):
    deadline = 0.0
    _arm = _DeadlineSocket._arm

    def recv_into(self, buffer, nbytes=None, flags=0):  # type: ignore[no-untyped-def,override]  # noqa: ANN001, ANN201
        self._arm()
        return super().recv_into(buffer, nbytes, flags)

    def recv(self, buflen=1024, flags=0):  # type: ignore[no-untyped-def,override]  # noqa: ANN001, ANN201
        self._arm()
        return super().recv(buflen, flags)

    def sendall(self, data, flags=0):  # type: ignore[no-untyped-def,override]  # noqa: ANN001, ANN201
        self._arm()
        return super().sendall(data, flags)


def _with_deadline(sock: socket.socket, deadline: float) -> socket.socket:
    if isinstance(sock, _DeadlineSSLSocket):
        sock.deadline = deadline
        return sock
    wrapped = _DeadlineSocket(sock.family, sock.type, sock.proto, fileno=sock.detach())
    wrapped.deadline = deadline
    wrapped.settimeout(max(deadline - time.monotonic(), 0.001))
    return wrapped


class _HttpConnection(http.client.HTTPConnection):
    def __init__(self, deadline: float, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self._deadline = deadline

    def connect(self) -> None:
        super().connect()
        self.sock = _with_deadline(self.sock, self._deadline)


class _HttpsConnection(http.client.HTTPSConnection):
    def __init__(self, deadline: float, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self._deadline = deadline

    def connect(self) -> None:
        super().connect()  # TCP, then the TLS handshake within the socket's timeout (what was left)
        self.sock = _with_deadline(self.sock, self._deadline)


@functools.cache
def default_tls() -> ssl.SSLContext:
    """The system's certificates (SSL_CERT_FILE and SSL_CERT_DIR honoured, as
    by OpenSSL), loaded once: tens of ms each time."""
    return ssl.create_default_context()


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    text = " ".join(str(error).split())[:200]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
