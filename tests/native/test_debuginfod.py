"""The debuginfod client against a local HTTP server: what it accepts, what
it refuses (hostile answers), and that it remembers."""

import http.server
import threading
import time

import pytest

from profiler.native import debuginfod, elf

BUILD_ID = "ab" * 20


class Server:
    def __init__(self, body: bytes, drip_s: float = 0.0):
        self.requests = 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                owner.requests += 1
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if drip_s:
                    for byte in body:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(drip_s)
                else:
                    self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve(monkeypatch):
    monkeypatch.setattr(debuginfod, "_asked", set())  # each test is a run of its own
    servers = []

    def start(body: bytes, drip_s: float = 0.0) -> Server:
        server = Server(body, drip_s)
        servers.append(server)
        monkeypatch.setenv("DEBUGINFOD_URLS", server.url)
        return server

    yield start
    for server in servers:
        server.close()


def fake_build_id(handle):
    data = handle.read()
    if not data.startswith(b"\x7fELF"):
        raise ValueError("not ELF")
    return data[4:].decode()


def test_a_matching_file_is_kept_and_not_asked_for_again(serve):
    server = serve(b"\x7fELF" + BUILD_ID.encode())
    found = debuginfod.debug_file(BUILD_ID, fake_build_id)
    assert found is not None and found.read_bytes().endswith(BUILD_ID.encode())
    assert debuginfod.debug_file(BUILD_ID, fake_build_id) == found and server.requests == 1


@pytest.mark.parametrize("body", [b"\x7fELF" + b"cd" * 20, b"<html>not found</html>"])
def test_another_files_answer_is_refused_and_remembered(serve, body):
    server = serve(body)
    assert debuginfod.debug_file(BUILD_ID, fake_build_id) is None
    assert debuginfod.debug_file(BUILD_ID, fake_build_id) is None and server.requests == 1  # "not found", for a while


def test_size_cap_and_deadline(serve, monkeypatch):
    monkeypatch.setattr(debuginfod, "MAX_BYTES", 16)
    serve(b"\x7fELF" + BUILD_ID.encode())
    assert debuginfod.debug_file(BUILD_ID, fake_build_id) is None
    monkeypatch.setattr(debuginfod, "MAX_BYTES", 1 << 20)
    monkeypatch.setattr(debuginfod, "DEADLINE_S", 1.0)
    serve(b"\x7fELF" + ("ef" * 20).encode(), drip_s=0.1)  # a byte every 0.1 s: 4.4 s in all
    started = time.monotonic()
    assert debuginfod.debug_file("ef" * 20, fake_build_id) is None
    assert time.monotonic() - started < 3


def test_off_or_unset_asks_nobody(serve, monkeypatch):
    server = serve(b"\x7fELF" + BUILD_ID.encode())
    monkeypatch.setattr(debuginfod, "enabled", False)
    assert debuginfod.debug_file(BUILD_ID, fake_build_id) is None and not debuginfod.configured()
    monkeypatch.setattr(debuginfod, "enabled", True)
    monkeypatch.setenv("DEBUGINFOD_URLS", "")
    assert debuginfod.debug_file(BUILD_ID, fake_build_id) is None
    monkeypatch.setenv("DEBUGINFOD_URLS", "file:///etc")  # only http(s)
    assert debuginfod.debug_file(BUILD_ID, fake_build_id) is None
    assert server.requests == 0
    assert debuginfod.debug_file("../../etc", fake_build_id) is None  # not a build-id


def test_the_real_reader_refuses_what_is_not_elf(tmp_path):
    path = tmp_path / "junk"
    path.write_bytes(b"junk" * 100)
    with open(path, "rb") as handle, pytest.raises(ValueError):
        elf._build_id_of(handle)


@pytest.mark.parametrize(
    "answer",
    [
        b"NOT HTTP\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 150 + b"\r\n",
        b"HTTP/1.1 302 Found\r\nLocation: ftp://127.0.0.1/x\r\n\r\n",
    ],
    ids=["bad status line", "150 headers", "redirect to ftp"],
)
def test_a_misbehaving_server_is_asked_once_per_run_and_raises_nothing(monkeypatch, answer):
    """A bad status line or 100+ headers ended `report` with a traceback, and
    a live run asked once per sample (630 requests in two runs)."""
    from tests.safety.test_http_exchange import RawServer

    monkeypatch.setattr(debuginfod, "_asked", set())
    server = RawServer(lambda connection: connection.sendall(answer))
    monkeypatch.setenv("DEBUGINFOD_URLS", server.url)
    monkeypatch.setattr(debuginfod.cache, "write_entry", lambda *args: None)  # the cache cannot remember it either
    try:
        for _ in range(5):
            assert debuginfod.debug_file(BUILD_ID, fake_build_id) is None
        assert len(server.requests) == 1
    finally:
        server.close()


def test_the_whole_exchange_has_one_deadline(monkeypatch):
    """One header every 3 s held `jitprof report` 150 s (10 s a server is promised)."""
    from tests.safety.test_http_exchange import RawServer, drip

    monkeypatch.setattr(debuginfod, "_asked", set())
    monkeypatch.setattr(debuginfod, "DEADLINE_S", 1.0)
    server = RawServer(drip([b"HTTP/1.1 200 OK\r\n"] + [b"X: y\r\n"] * 50, 0.3))
    monkeypatch.setenv("DEBUGINFOD_URLS", server.url)
    try:
        started = time.monotonic()
        assert debuginfod.debug_file(BUILD_ID, fake_build_id) is None
        assert time.monotonic() - started < 1.6
    finally:
        server.close()
