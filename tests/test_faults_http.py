"""kvdoctor's HTTP surface under slow and broken clients: they cost a socket each, are cut off after a few
seconds, and /metrics and /-/healthy keep answering at once."""

from __future__ import annotations

import http.client
import logging
import socket
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from kvdoctor.diagnosis.target import Target, TargetFacts
from kvdoctor.status.exposition import make_registry
from kvdoctor.status.state import DaemonState
from kvdoctor.web import WebServer
from kvdoctor.web.server import HANDSHAKE_TIMEOUT_S, HEADER_TIMEOUT_S, MAX_PER_CLIENT
from tests.faults import SlowClient
from tests.test_web_config import pki  # noqa: F401  (the test CA and certificates)


@pytest.fixture
def server() -> Iterator[WebServer]:
    state = DaemonState()
    for i in range(200):  # a /metrics page of some size
        target = Target(f"vllm-{i:03d}", TargetFacts(url=f"http://10.0.0.{i}:8000/metrics"))
        target.record(1.0, True, duration_s=0.02, samples=381)
        state.set_target(target)
    state.publish([], 1000.0, 0.01, 0)
    web = WebServer(state, make_registry(state), listen="127.0.0.1:0", reload=lambda: (True, "reloaded"))
    web.start()
    yield web
    web.stop()


def _timed(url: str) -> float:
    start = time.monotonic()
    r = requests.get(url, timeout=10)
    assert r.status_code == 200, r.text
    return time.monotonic() - start


@pytest.mark.parametrize("clients", ["one client", "a hundred clients"])
def test_a_hundred_slow_connections_do_not_delay_metrics_or_health(server: WebServer, clients: str) -> None:
    sources = [f"127.0.0.{2 + i}" if clients == "a hundred clients" else "" for i in range(100)]
    slow = [SlowClient(server.address, every=0.5, source=src) for src in sources]
    try:
        time.sleep(1.0)  # every one of them is mid-request now
        with ThreadPoolExecutor(8) as pool:
            latencies = list(pool.map(_timed, [server.url + p for p in ("metrics", "-/healthy") * 20]))
        assert statistics.median(latencies) < 0.5, latencies
        assert max(latencies) < 1.0, latencies  # the bound: every answer within a second
        deadline = time.monotonic() + HEADER_TIMEOUT_S + 5
        while any(c.closed_after is None for c in slow) and time.monotonic() < deadline:
            time.sleep(0.2)
        # each was cut off: made room for a newer connection, or ran out of time for its headers
        assert all(c.closed_after is not None for c in slow)
        assert max(c.closed_after or 0 for c in slow) < HEADER_TIMEOUT_S + 3
    finally:
        for c in slow:
            c.stop()


def test_one_client_holds_a_bounded_number_of_connections(server: WebServer) -> None:
    idle = [socket.create_connection(server.address, timeout=5) for _ in range(MAX_PER_CLIENT + 10)]
    try:
        assert _timed(server.url + "-/healthy") < 5
        time.sleep(0.3)
        closed = 0
        for s in idle:
            s.setblocking(False)
            try:
                closed += s.recv(1) == b""
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        assert closed >= 11  # the oldest idle ones made room, newest first kept
    finally:
        for s in idle:
            s.close()


def _raw(server: WebServer, data: bytes, half_close: bool) -> tuple[bytes, float]:
    with socket.create_connection(server.address, timeout=15) as s:
        start = time.monotonic()
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
        return reply, time.monotonic() - start


def test_a_body_shorter_than_its_content_length_gets_400_without_a_traceback(
    server: WebServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    head = b"POST /-/reload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc"
    reply, took = _raw(server, head, half_close=True)
    assert reply.startswith(b"HTTP/1.1 400 ") and b"shorter than its Content-Length" in reply and took < 2
    reply, took = _raw(server, head, half_close=False)  # the client just stops sending
    assert reply.startswith(b"HTTP/1.1 400 ") and took < 10
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    ok, _ = _raw(
        server,
        b"POST /-/reload HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
        half_close=False,
    )
    assert ok.startswith(b"HTTP/1.1 200 ")


def test_oversized_and_malformed_requests_get_plain_errors(server: WebServer) -> None:
    big = b"GET / HTTP/1.1\r\n" + b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 200) for i in range(200)) + b"\r\n"
    assert _raw(server, big, half_close=False)[0].startswith(b"HTTP/1.1 431 ")
    body = b"POST /-/reload HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n"
    assert _raw(server, body, half_close=False)[0].startswith(b"HTTP/1.1 413 ")
    chunked = b"POST /-/reload HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    assert _raw(server, chunked, half_close=False)[0].startswith(b"HTTP/1.1 411 ")


def test_idle_connections_to_a_tls_server_are_cut_off_after_the_handshake_timeout(pki, tmp_path) -> None:  # noqa: F811
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"tls_server_config:\n  cert_file: {pki}/server.pem\n  key_file: {pki}/server.key\n")
    state = DaemonState()
    web = WebServer(state, make_registry(state), listen="127.0.0.1:0", web_config=str(cfg))
    web.start()
    idle = [socket.create_connection(web.address, timeout=15, source_address=(f"127.0.0.{2 + i}", 0)) for i in range(50)]  # fmt: skip
    try:
        start = time.monotonic()
        r = requests.get(web.url + "-/healthy", verify=str(pki / "ca.pem"), timeout=10)
        assert r.status_code == 200 and time.monotonic() - start < 1.0
        for s in idle:  # never sent a ClientHello: closed once the handshake timeout runs out
            assert s.recv(1) == b""
        assert time.monotonic() - start < HANDSHAKE_TIMEOUT_S + 3
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
        old, _ = _raw(web, b"GET /-/healthy HTTP/1.0\r\n\r\n", half_close=False)
        assert old.startswith(b"HTTP/1.0 200 ") and b"Connection: close" in old
    finally:
        web.stop()
