"""A misbehaving /metrics server for fault tests: refuse, hang, drip, truncate, garbage, huge, wrong type, a million
series, too many labels; and clients that misbehave against kvdoctor's own server."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GOOD = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 1.0\n'
SERIES = 1_000_000


def million_series() -> bytes:
    """A valid page of a million distinct series, under the default 16 MiB body cap (about 16 MB)."""
    return GOOD.encode() + b"".join(b's{i="%d"} 1\n' % i for i in range(SERIES))


def many_labels(n: int = 200) -> bytes:
    """A valid page whose one sample carries n labels."""
    return GOOD.encode() + b"wide{" + b",".join(b'l%d="v"' % i for i in range(n)) + b"} 1\n"


class FaultServer:
    """Serves one fault mode on 127.0.0.1; `stop()` ends it."""

    def __init__(self, mode: str, body: bytes = b"") -> None:
        # mode "static": serve `body` (a page of the test's own) as text 0.0.4
        self.mode = mode
        self.body = body or (
            million_series() if mode == "million" else many_labels() if mode == "labels" else b""
        )
        self.stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.handle(self)

            def log_message(self, *args: object) -> None:
                return

        ThreadingHTTPServer.request_queue_size = 1024  # many targets on one fault server connect at once
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        mode = self.mode
        try:
            if mode == "hang":
                self.stopping.wait(30)
                return
            if mode == "drip":
                h.send_response(200)
                h.send_header("Content-Type", "text/plain")
                h.end_headers()
                for ch in GOOD * 100:
                    if self.stopping.wait(0.2):
                        return
                    h.wfile.write(ch.encode())
                    h.wfile.flush()
                return
            body = (
                self.body
                or {
                    "garbage": b"\x00\xffnot {a metric exposition}\n<html>",
                    "truncate": GOOD.encode() + b'vllm:num_requests_waiting{model_name="m',
                    "huge": GOOD.encode() + b"# " + b"x" * (50 * 1024 * 1024) + b"\n",
                    "html": b"<html><body>login</body></html>",
                    "nan": b'vllm:kv_cache_usage_perc{model_name="m"} NaN\nvllm:num_requests_running{model_name="m"} +Inf\n',
                    "dupes": (GOOD + GOOD).encode(),
                }[mode]
            )
            h.send_response(200)
            h.send_header("Content-Type", "text/html" if mode == "html" else "text/plain; version=0.0.4")
            h.send_header("Content-Length", str(len(body) + (100 if mode == "truncate" else 0)))
            h.end_headers()
            h.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            return

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class SlowClient:
    """A client that opens a connection and sends its request head one byte at a time, every `every` seconds."""

    def __init__(self, address: tuple[str, int], every: float = 1.0, source: str = "") -> None:
        # source: another loopback address (127.0.0.2, …) makes it look like a client of its own
        self.sock = socket.create_connection(
            address, timeout=5, source_address=(source, 0) if source else None
        )
        self.every = every
        self.closed_after: float | None = None  # seconds until the server closed the connection
        self.sent = 0  # bytes of the request head sent so far
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drip, daemon=True)
        self._thread.start()

    def _drip(self) -> None:
        start = time.monotonic()
        data = b"GET /metrics HTTP/1.1\r\nHost: kvdoctor\r\nX-Slow: " + b"z" * 10_000
        for i in range(len(data)):
            try:
                self.sock.sendall(data[i : i + 1])
                self.sent += 1
            except OSError:
                self.closed_after = time.monotonic() - start
                return
            if self._stop.wait(self.every):
                return

    def stop(self) -> None:
        self._stop.set()
        self.sock.close()


def refused_url() -> str:
    """A URL on which nothing listens."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/metrics"
