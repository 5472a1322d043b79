"""One HTTP exchange with a server that misbehaves on purpose: each on
127.0.0.1, sending exactly the bytes of the attack."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from profiler.safety.http_exchange import ExchangeFailed, exchange


class RawServer:
    """Accepts connections and answers each with `script(connection)`."""

    def __init__(self, script):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests: list[bytes] = []
        self._script = script
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self._stop:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection):
        with connection:
            try:
                self.requests.append(connection.recv(65536))
                self._script(connection)
            except OSError:
                pass

    def close(self):
        self._stop = True
        self.listener.close()


@pytest.fixture
def server():
    started = []

    def start(script) -> RawServer:
        started.append(RawServer(script))
        return started[-1]

    yield start
    for one in started:
        one.close()


def drip(pieces, every_s):
    def script(connection):
        for piece in pieces:
            connection.sendall(piece)
            time.sleep(every_s)

    return script


def timed(call):
    started = time.monotonic()
    try:
        return call(), time.monotonic() - started
    except ExchangeFailed as error:
        return error, time.monotonic() - started


def test_a_header_every_few_seconds_ends_at_the_deadline(server):
    """One header every 3 s held `jitprof report` 150 s."""
    headers = [b"HTTP/1.1 200 OK\r\n"] + [b"X-%d: y\r\n" % number for number in range(50)]
    slow = server(drip(headers, 0.3))
    result, elapsed = timed(lambda: exchange("GET", slow.url, deadline_s=1.0))
    assert isinstance(result, ExchangeFailed) and "timed out" in str(result)
    assert elapsed < 1.5


def test_a_byte_a_second_body_ends_at_the_deadline(server):
    body = [b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"] + [b"x"] * 100
    slow = server(drip(body, 0.05))
    result, elapsed = timed(lambda: exchange("GET", slow.url, deadline_s=1.0, sink=lambda chunk: None))
    assert isinstance(result, ExchangeFailed) and elapsed < 1.5


@pytest.mark.parametrize(
    "answer",
    [
        b"NOT HTTP AT ALL\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: y\r\n" % number for number in range(150)) + b"\r\n",
        b"HTTP/1.1 200 OK\r\nX-Long: " + b"y" * 100_000 + b"\r\n\r\n",
        b"",
    ],
    ids=["bad status line", "150 headers", "a 100 kB header", "nothing"],
)
def test_a_malformed_answer_is_one_line_of_reason(server, answer):
    bad = server(lambda connection: connection.sendall(answer))
    with pytest.raises(ExchangeFailed) as failure:
        exchange("GET", bad.url, deadline_s=5.0)
    assert "\n" not in str(failure.value) and len(str(failure.value)) <= 250


def test_redirects_only_to_http_and_only_when_asked(server):
    target = server(lambda connection: connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
    hop = server(
        lambda connection: connection.sendall(
            b"HTTP/1.1 302 Found\r\nLocation: %s/x\r\nContent-Length: 0\r\n\r\n" % target.url.encode()
        )
    )
    reply = exchange("GET", hop.url, deadline_s=5.0, follow_redirects=True, headers={"Authorization": "Bearer secret"})
    assert reply.status == 200 and reply.body == b"ok"
    assert b"Bearer" not in target.requests[0]  # credentials never follow a redirect
    kept = exchange("GET", hop.url, deadline_s=5.0)
    assert kept.status == 302 and kept.location.endswith("/x") and len(target.requests) == 1
    ftp = server(
        lambda connection: connection.sendall(b"HTTP/1.1 302 Found\r\nLocation: ftp://127.0.0.1/x\r\nContent-Length: 0\r\n\r\n")
    )
    with pytest.raises(ExchangeFailed, match="not an http"):
        exchange("GET", ftp.url, deadline_s=5.0, follow_redirects=True)


def test_only_http_and_https_are_spoken():
    for url in ("ftp://127.0.0.1/x", "file:///etc/passwd", "gopher://127.0.0.1/"):
        with pytest.raises(ExchangeFailed, match="not an http"):
            exchange("GET", url, deadline_s=1.0)
