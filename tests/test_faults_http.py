"""kvdoctor's HTTP surface under slow and broken clients: they cost a socket each, are cut off after a few
seconds, and /metrics and /-/healthy keep answering at once."""

from __future__ import annotations

import http.client
import logging
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
import requests

from kvdoctor.diagnosis.target import Target, TargetFacts
from kvdoctor.status.exposition import make_registry
from kvdoctor.status.state import DaemonState
from kvdoctor.web import WebServer
from kvdoctor.web.conns import Timeouts
from kvdoctor.web.server import MAX_PER_CLIENT
from tests.faults import SlowClient
from tests.support.pki import pki_fixture  # noqa: F401  (the `pki` fixture: the test CA and certificates)
from tests.support.wait import until

# short enough that a test need not wait out the 5 s defaults, long enough for a busy machine to answer within
SHORT = Timeouts(handshake=1.0, header=3.0, body=1.0)


@contextmanager
def web_server(timeouts: Timeouts = SHORT) -> Iterator[WebServer]:
    """A kvdoctor web server with a /metrics page of some size (200 targets)."""
    state = DaemonState()
    for i in range(200):
        target = Target(f"vllm-{i:03d}", TargetFacts(url=f"http://10.0.0.{i}:8000/metrics"))
        target.record(1.0, True, duration_s=0.02, samples=381)
        state.set_target(target)
    state.publish([], 1000.0, 0.01, 0)
    web = WebServer(
        state,
        make_registry(state),
        listen="127.0.0.1:0",
        reload=lambda: (True, "reloaded"),
        timeouts=timeouts,
    )
    web.start()
    try:
        yield web
    finally:
        web.stop()


@pytest.fixture
def server() -> Iterator[WebServer]:
    with web_server() as web:
        yield web


def _ok(url: str) -> None:
    r = requests.get(url, timeout=10)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("clients", ["one client", "a hundred clients"])
def test_a_hundred_slow_connections_do_not_delay_metrics_or_health(server: WebServer, clients: str) -> None:
    # how fast the answers come is measured by benchmarks/bench_web_slow_clients.py; this checks they come at all
    sources = [f"127.0.0.{2 + i}" if clients == "a hundred clients" else "" for i in range(100)]
    slow = [SlowClient(server.address, every=0.2, source=src) for src in sources]
    try:
        until(
            lambda: all(c.sent >= 2 or c.closed_after is not None for c in slow),
            timeout=20,
            what="every slow client to be mid-request",
        )
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(_ok, [server.url + p for p in ("metrics", "-/healthy") * 20]))
        # each is cut off: made room for a newer connection, or ran out of time for its headers
        until(
            lambda: all(c.closed_after is not None for c in slow),
            timeout=SHORT.header + 10,
            what="the server to cut off every slow client",
        )
    finally:
        for c in slow:
            c.stop()


def _closed(idle: list[socket.socket]) -> int:
    """How many of the sockets the server has closed (a closed one reads EOF or fails, every time it is read)."""
    closed = 0
    for s in idle:
        s.setblocking(False)
        try:
            closed += s.recv(1) == b""
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    return closed


def test_one_client_holds_a_bounded_number_of_connections(server: WebServer) -> None:
    idle = [socket.create_connection(server.address, timeout=5) for _ in range(MAX_PER_CLIENT + 10)]
    try:
        _ok(server.url + "-/healthy")
        # the oldest idle ones made room, newest first kept
        until(lambda: _closed(idle) >= 11, timeout=10, what="eleven idle connections to be closed")
    finally:
        for s in idle:
            s.close()


def _raw(server: WebServer, data: bytes, half_close: bool) -> bytes:
    # a reply that takes longer than the socket timeout (15 s) fails the test with socket.timeout
    with socket.create_connection(server.address, timeout=15) as s:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
        return reply


def test_a_body_shorter_than_its_content_length_gets_400_without_a_traceback(
    server: WebServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    head = b"POST /-/reload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc"
    # the end of the body is seen at once: the reply comes although the body timeout (60 s) is far off
    with web_server(Timeouts(body=60.0)) as patient:
        reply = _raw(patient, head, half_close=True)
    assert reply.startswith(b"HTTP/1.1 400 ") and b"shorter than its Content-Length" in reply
    reply = _raw(server, head, half_close=False)  # the client just stops sending: the 1 s body timeout
    assert reply.startswith(b"HTTP/1.1 400 ")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    ok = _raw(
        server,
        b"POST /-/reload HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
        half_close=False,
    )
    assert ok.startswith(b"HTTP/1.1 200 ")


def test_oversized_and_malformed_requests_get_plain_errors(server: WebServer) -> None:
    big = b"GET / HTTP/1.1\r\n" + b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 200) for i in range(200)) + b"\r\n"
    assert _raw(server, big, half_close=False).startswith(b"HTTP/1.1 431 ")
    body = b"POST /-/reload HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n"
    assert _raw(server, body, half_close=False).startswith(b"HTTP/1.1 413 ")
    chunked = b"POST /-/reload HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    assert _raw(server, chunked, half_close=False).startswith(b"HTTP/1.1 411 ")


def test_idle_connections_to_a_tls_server_are_cut_off_after_the_handshake_timeout(pki, tmp_path) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"tls_server_config:\n  cert_file: {pki}/server.pem\n  key_file: {pki}/server.key\n")
    state = DaemonState()
    # a handshake timeout longer than the client's: an answer proves the idle connections do not hold it up
    web = WebServer(
        state,
        make_registry(state),
        listen="127.0.0.1:0",
        web_config=str(cfg),
        timeouts=Timeouts(handshake=5.0),
    )
    web.start()
    idle = [
        socket.create_connection(web.address, timeout=15, source_address=(f"127.0.0.{2 + i}", 0))
        for i in range(50)
    ]
    try:
        r = requests.get(web.url + "-/healthy", verify=str(pki / "ca.pem"), timeout=4)
        assert r.status_code == 200
        for s in (
            idle
        ):  # never sent a ClientHello: closed once the handshake timeout runs out (else socket.timeout)
            assert s.recv(1) == b""
    finally:
        for s in idle:
            s.close()
        web.stop()


def test_keep_alive_ends_after_its_idle_timeout_and_its_request_limit() -> None:
    state = DaemonState()
    web = WebServer(state, make_registry(state), listen="127.0.0.1:0", idle_timeout=0.5, max_requests=2)
    web.start()
    try:
        conn = http.client.HTTPConnection(*web.address, timeout=10)
        conn.request("GET", "/-/healthy")
        first = conn.getresponse()
        assert first.read() and first.getheader("Connection") == "keep-alive"
        assert first.getheader("Keep-Alive") == "timeout=0.5"
        conn.request("GET", "/-/healthy")
        second = conn.getresponse()
        assert second.read() and second.getheader("Connection") == "close"  # the second of at most two
        conn.close()
        with socket.create_connection(web.address, timeout=10) as s:
            s.sendall(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = b""
            while chunk := s.recv(65536):  # the server closes the idle connection (else: socket timeout)
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 200 ") and b"Connection: keep-alive" in reply
        old = _raw(web, b"GET /-/healthy HTTP/1.0\r\n\r\n", half_close=False)
        assert old.startswith(b"HTTP/1.0 200 ") and b"Connection: close" in old
    finally:
        web.stop()
