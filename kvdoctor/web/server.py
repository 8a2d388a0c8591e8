"""kvdoctor's HTTP(S) server on asyncio: /metrics, the JSON API, lifecycle endpoints and the status page.

One event loop thread holds every connection, so an idle or slow client costs a socket, not a thread; each
connection gets a few seconds for its TLS handshake, its headers and its body, a client holds a bounded number of
connections (its oldest unfinished one makes room for a new one), and handlers run on a small thread pool.
Connections are HTTP/1.1 keep-alive (a TLS scrape pays one handshake, not one per scrape): open for at most
KEEPALIVE_IDLE_S between requests and MAX_REQUESTS_PER_CONN requests; an idle one is the first to be evicted.
"""

from __future__ import annotations

import asyncio
import http.client
import logging
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from prometheus_client.registry import CollectorRegistry

from kvdoctor.config.schema import parse_listen
from kvdoctor.status.health import NotifyStatus
from kvdoctor.status.state import DaemonState
from kvdoctor.web.app import App, Reload, Report, Rules
from kvdoctor.web.conns import Conn, Connections, Timeouts
from kvdoctor.web.framing import frame
from kvdoctor.web.request import MAX_HEADER_BYTES, Head, Refused, keep_alive, read_head
from kvdoctor.web.responses import Response, api_error, text
from kvdoctor.web.webconfig import WebConfig, WebConfigWatcher

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 1024
MAX_PER_CLIENT = 32
MAX_BODY = 64 * 1024
TIMEOUTS = Timeouts()
HANDSHAKE_TIMEOUT_S, HEADER_TIMEOUT_S, BODY_TIMEOUT_S = TIMEOUTS
WRITE_TIMEOUT_S = 10.0
KEEPALIVE_IDLE_S = 60.0  # above the usual 15 s–1 m scrape intervals, so each scrape finds its connection open
MAX_REQUESTS_PER_CONN = 1000
HEALTH_PATHS = ("/-/healthy", "/-/ready")
HANDLER_THREADS = 4


class WebServer:
    """Serves kvdoctor's web endpoints from an event loop thread, optionally with TLS and basic auth."""

    def __init__(
        self,
        state: DaemonState,
        registry: CollectorRegistry,
        *,
        listen: str = "127.0.0.1:9860",
        web_config: str | None = None,
        reload: Reload | None = None,
        notify_status: Callable[[], NotifyStatus | None] | None = None,
        rules: Rules | None = None,
        report: Report | None = None,
        idle_timeout: float = KEEPALIVE_IDLE_S,
        max_requests: int = MAX_REQUESTS_PER_CONN,
        health_only: bool = False,
        timeouts: Timeouts = TIMEOUTS,  # tests inject short ones instead of waiting out the defaults
    ) -> None:
        self.app = App(state, registry, reload, notify_status, rules, report)
        self.idle_timeout, self.max_requests, self.timeouts = idle_timeout, max_requests, timeouts
        # the health listener: plain HTTP without auth (no web_config), /-/healthy and /-/ready only
        self.health_only = health_only
        self.listen = parse_listen(listen)
        self.watcher = WebConfigWatcher(web_config) if web_config else None
        self._path = web_config
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(HANDLER_THREADS, thread_name_prefix="kvdoctor-web")
        self._conns = Connections(MAX_CONNECTIONS, MAX_PER_CLIENT)

    def config(self) -> WebConfig | None:
        """The web config in force (re-read when its files change), or None."""
        return self.watcher.get() if self.watcher else None

    def use_web_config(self, path: str | None) -> None:
        """Switch to another web config file (a reload); raises WebConfigError and keeps the old one if it is bad."""
        if path != self._path:
            self.watcher = WebConfigWatcher(path) if path else None
            self._path = path

    @property
    def tls(self) -> bool:
        """True when serving HTTPS."""
        cfg = self.config()
        return bool(cfg and cfg.ssl_context)

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port); valid after start()."""
        if self._server is None:
            raise RuntimeError("WebServer not started")
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    @property
    def bound(self) -> str:
        """The bound address as HOST:PORT ([HOST]:PORT for IPv6), as a listen address is written."""
        host, port = self.address
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def url(self) -> str:
        """The base URL of the status page."""
        host, port = self.address
        host = "127.0.0.1" if host == "0.0.0.0" else f"[{host}]" if ":" in host else host
        return f"{'https' if self.tls else 'http'}://{host}:{port}/"

    def start(self) -> None:
        """Bind and serve from a daemon thread; raises OSError if the address is taken."""
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(
            lambda _, ctx: log.debug("web: %s", ctx.get("message"), exc_info=ctx.get("exception"))
        )
        self._thread = threading.Thread(target=loop.run_forever, name="kvdoctor-web", daemon=True)
        self._thread.start()
        host, port = self.listen
        bind = asyncio.start_server(
            self._client, host, port, reuse_address=True, limit=MAX_HEADER_BYTES, backlog=512
        )
        try:
            self._server = asyncio.run_coroutine_threadsafe(bind, loop).result(10)
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(timeout=5)
            loop.close()
            raise
        self._loop = loop
        log.info("%s listening on %s", "health listener" if self.health_only else "web server", self.url)

    def stop(self) -> None:
        """Stop accepting, close every connection and wait for the serving thread."""
        if self._loop is None or self._server is None:
            return
        loop, server = self._loop, self._server

        async def close() -> None:
            server.close()
            for c in self._conns.all():
                c.writer.transport.abort()
            await server.wait_closed()

        try:
            asyncio.run_coroutine_threadsafe(close(), loop).result(5)
        except Exception:
            log.debug("web server did not close cleanly", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread:
            self._thread.join(timeout=5)
        loop.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._loop, self._server, self._thread = None, None, None

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        conn = Conn(str(peer[0]), reader, writer)
        if not self._conns.admit(conn):
            writer.transport.abort()
            return
        try:
            await self._serve(conn)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError, OSError) as exc:
            log.debug("connection from %s ended: %s", peer, type(exc).__name__)
        finally:
            self._conns.release(conn)
            writer.close()

    async def _serve(self, conn: Conn) -> None:
        reader, writer = conn.reader, conn.writer
        cfg = self.config()
        if cfg is not None and cfg.ssl_context is not None:
            await writer.start_tls(cfg.ssl_context, ssl_handshake_timeout=self.timeouts.handshake)
            if not cfg.peer_allowed(writer.get_extra_info("peercert")):
                log.info("client %s refused: certificate SAN not in client_allowed_sans", conn.client)
                return
        first = b""
        for served in range(self.max_requests):
            if served:  # idle between requests: evictable, and closed after idle_timeout
                conn.waiting, conn.since = True, time.monotonic()
                try:
                    first = await asyncio.wait_for(reader.read(1), self.idle_timeout)
                except TimeoutError:
                    return
                if not first:
                    return
            if not await self._exchange(conn, first, served + 1 < self.max_requests):
                return

    async def _exchange(self, conn: Conn, first: bytes, more: bool) -> bool:
        """One request and its response; True when the connection stays open for another."""
        cfg = self.config()  # per request: a reloaded web config applies to open connections too
        head = Head("GET", "/", "HTTP/1.1", http.client.HTTPMessage())
        try:
            try:
                head = await asyncio.wait_for(read_head(conn.reader, first), self.timeouts.header)
            except TimeoutError:
                raise Refused(408, f"request headers not received within {self.timeouts.header:g}s") from None
            resp = await self._respond(conn, head, cfg)
            # a 401 leaves any request body unread on the socket: close rather than parse it as a request
            keep = more and keep_alive(head) and resp.status != 401
        except Refused as exc:
            resp, keep = text(exc.status, str(exc)), False
        await asyncio.wait_for(self._write(conn, resp, head, cfg, keep), WRITE_TIMEOUT_S)
        log.debug("%s %s %s %d", conn.client, head.method, head.target, resp.status)
        return keep

    async def _respond(self, conn: Conn, head: Head, cfg: WebConfig | None) -> Response:
        method, target, headers = head.method, head.target, head.headers
        loop = asyncio.get_running_loop()
        if (
            cfg is not None
            and cfg.users
            and not await loop.run_in_executor(self._pool, cfg.authorized, headers.get("Authorization"))
        ):
            return text(
                401, "Unauthorized", **{"WWW-Authenticate": 'Basic realm="kvdoctor", charset="UTF-8"'}
            )
        if headers.get("Transfer-Encoding"):
            raise Refused(411, "send the request body with a Content-Length")
        length = (headers.get("Content-Length") or "").strip()
        if length:
            if not length.isdigit():
                raise Refused(400, "invalid Content-Length")
            if int(length) > MAX_BODY:
                raise Refused(413, "request body too large")
            try:
                await asyncio.wait_for(conn.reader.readexactly(int(length)), self.timeouts.body)
            except (asyncio.IncompleteReadError, TimeoutError):
                raise Refused(
                    400, f"request body shorter than its Content-Length of {length} bytes"
                ) from None
        conn.waiting = False
        if self.health_only and urlsplit(target).path not in HEALTH_PATHS:
            return text(404, "404 page not found: this listener serves /-/healthy and /-/ready only")
        if urlsplit(target).path == "/-/healthy" and method in ("GET", "HEAD"):
            return self.app.handle(method, target, headers)  # type: ignore[arg-type]  # on the loop: no queue
        return await loop.run_in_executor(self._pool, self._handle, method, target, headers)

    def _handle(self, method: str, target: str, headers: http.client.HTTPMessage) -> Response:
        try:
            return self.app.handle(method, target, headers)  # type: ignore[arg-type]
        except Exception:
            log.exception("error serving %s %s", method, target)
            return api_error(500, "internal", "internal server error")

    async def _write(self, conn: Conn, resp: Response, head: Head, cfg: WebConfig | None, keep: bool) -> None:
        conn.writer.write(frame(resp, head, cfg.headers if cfg else {}, self.idle_timeout if keep else None))
        await conn.writer.drain()


def health_listener(state: DaemonState, registry: CollectorRegistry, listen: str) -> WebServer:
    """The plain-HTTP listener for probes: GET /-/healthy and /-/ready without TLS or auth, 404 for the rest."""
    return WebServer(state, registry, listen=listen, health_only=True)
