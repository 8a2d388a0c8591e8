"""kvdoctor's HTTP(S) server: /metrics, the JSON API, lifecycle endpoints and the status page."""

from __future__ import annotations

import gzip
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from prometheus_client.exposition import gzip_accepted
from prometheus_client.registry import CollectorRegistry

from doctor import __version__
from doctor.status.state import DaemonState
from doctor.web.app import TEXT, App, Reload, Response, Rules, api_error, text
from doctor.web.webconfig import WebConfig, WebConfigWatcher

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 64
MAX_BODY = 64 * 1024
HANDSHAKE_TIMEOUT_S = 10.0
GZIP_MIN_BYTES = 1024
DEFAULT_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'",
}


def parse_listen(listen: str) -> tuple[str, int]:
    """Split HOST:PORT ([v6]:PORT, :PORT for every interface); raises ValueError."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"listen address {listen!r}: expected HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


class WebServer:
    """Serves kvdoctor's web endpoints from a daemon thread, optionally with TLS and basic auth."""

    def __init__(
        self,
        state: DaemonState,
        registry: CollectorRegistry,
        *,
        listen: str = "127.0.0.1:9860",
        web_config: str | None = None,
        reload: Reload | None = None,
        extra_status: Callable[[], dict[str, Any]] | None = None,
        rules: Rules | None = None,
    ) -> None:
        self.app = App(state, registry, reload, extra_status, rules)
        self.listen = parse_listen(listen)
        self.watcher = WebConfigWatcher(web_config) if web_config else None
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def config(self) -> WebConfig | None:
        """The web config in force (re-read when its files change), or None."""
        return self.watcher.get() if self.watcher else None

    @property
    def tls(self) -> bool:
        """True when serving HTTPS."""
        cfg = self.config()
        return bool(cfg and cfg.ssl_context)

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port); valid after start()."""
        if self._httpd is None:
            raise RuntimeError("WebServer not started")
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        """The base URL of the status page."""
        host, port = self.address
        host = "127.0.0.1" if host == "0.0.0.0" else f"[{host}]" if ":" in host else host
        return f"{'https' if self.tls else 'http'}://{host}:{port}/"

    def start(self) -> None:
        """Bind and serve from a daemon thread; raises OSError if the address is taken."""
        self._httpd = _Server(self.listen, self)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="kvdoctor-web", daemon=True)
        self._thread.start()
        log.info("web server listening on %s", self.url)

    def stop(self) -> None:
        """Stop accepting, close the socket and wait for the serving thread."""
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)
        self._httpd, self._thread = None, None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], web: WebServer) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.web = web
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        # Bound the threads a flood of connections can create; extra connections are closed at once.
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        cfg = self.web.config()
        if cfg is None or cfg.ssl_context is None:
            self.RequestHandlerClass(request, client_address, self)  # type: ignore[arg-type]
            return
        # The handshake runs here, in the connection's thread, so a slow client cannot stall accept().
        request.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            conn = cfg.ssl_context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.debug("TLS handshake with %s failed: %s", client_address, exc)
            return
        try:
            if cfg.peer_allowed(conn.getpeercert()):
                self.RequestHandlerClass(conn, client_address, self)  # type: ignore[arg-type]
            else:
                log.info("client %s refused: certificate SAN not in client_allowed_sans", client_address)
        finally:
            self.shutdown_request(conn)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 30
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        """Serve a GET."""
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        """Serve a HEAD (as GET, without the body)."""
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        """Serve a POST."""
        self._dispatch("POST")

    def do_PUT(self) -> None:
        """Serve a PUT."""
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        """Refuse or route a DELETE."""
        self._dispatch("DELETE")

    def do_PATCH(self) -> None:
        """Refuse or route a PATCH."""
        self._dispatch("PATCH")

    def do_OPTIONS(self) -> None:
        """Refuse or route an OPTIONS."""
        self._dispatch("OPTIONS")

    def _dispatch(self, method: str) -> None:
        cfg = None
        try:
            cfg = self.server.web.config()
            resp = self._respond(method, cfg)
        except Exception:
            log.exception("error serving %s %s", method, self.path)
            resp = api_error(500, "internal", "internal server error")
        self._send(resp, method, cfg)

    def _respond(self, method: str, cfg: WebConfig | None) -> Response:
        if cfg is not None and not cfg.authorized(self.headers.get("Authorization")):
            return text(
                401, "Unauthorized", **{"WWW-Authenticate": 'Basic realm="kvdoctor", charset="UTF-8"'}
            )
        length = self.headers.get("Content-Length")
        if length:
            if not length.isdigit() or int(length) > MAX_BODY:
                return text(413, "request body too large")
            self.rfile.read(int(length))
        return self.server.web.app.handle(method, self.path, self.headers)  # type: ignore[arg-type]

    def _send(self, resp: Response, method: str, cfg: WebConfig | None) -> None:
        body = resp.body
        headers = {**DEFAULT_HEADERS, **(cfg.headers if cfg else {}), **resp.headers}
        if resp.status != 304:
            headers["Content-Type"] = resp.content_type
            if len(body) >= GZIP_MIN_BYTES or urlsplit(self.path).path == "/metrics":
                headers["Vary"] = "Accept-Encoding"
                if gzip_accepted(self.headers.get("Accept-Encoding", "")):
                    body = gzip.compress(body, compresslevel=6)
                    headers["Content-Encoding"] = "gzip"
        headers["Cache-Control"] = resp.cache
        headers["Content-Length"] = str(len(body))
        self.send_response(resp.status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if method != "HEAD" and resp.status != 304:
            self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Answer a malformed request in plain text (the stdlib default is an HTML page)."""
        self.close_connection = True
        # Nobody speaks HTTP/0.9; left at that default the stdlib would send no status line or headers.
        self.request_version = "HTTP/1.0"
        body = f"{code} {message or 'bad request'}\n".encode()
        try:
            self.send_response(code)
            for k, v in {**DEFAULT_HEADERS, "Content-Type": TEXT, "Cache-Control": "no-store"}.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError:
            pass

    def version_string(self) -> str:
        """The Server header."""
        return f"kvdoctor/{__version__}"

    def log_message(self, format: str, *args: Any) -> None:
        """Access log at debug level, not on stderr."""
        log.debug("%s %s", self.address_string(), format % args)
