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
