"""A local stand-in for Slack's Web API and incoming webhooks that records every request."""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from tests.support.wait import until

CHANNEL_ID = "C0FAKE0001"


@dataclass
class Request:
    """One request as the fake saw it, and what it answered."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    status: int = 200
    response: dict[str, Any] = field(default_factory=dict)


class FakeSlack:
    """ThreadingHTTPServer on 127.0.0.1:0; script answers with ok(), fail(kind, n) or set_mode(kind).

    Kinds: "ok", "500", "429" (Retry-After: retry_after), "hang" (sleep hang_for, then 504 unprocessed),
    "error:<code>" (HTTP 200 with ok=false, e.g. channel_not_found).
    """

    def __init__(self, retry_after: int = 0, hang_for: float = 2.0) -> None:
        self.requests: list[Request] = []
        self.retry_after, self.hang_for = retry_after, hang_for
        self.mode = "ok"
        self._script: deque[str] = deque()
        self._lock = threading.Lock()
        self._ts = 1_760_000_000
        self._release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                fake._handle(self)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    @property
    def api_url(self) -> str:
        """base_url for WebClient."""
        return f"http://127.0.0.1:{self.port}/api/"

    def webhook_url(self, team: str = "T0AAAAAAA", bot: str = "B0BBBBBBB", secret: str = "c" * 24) -> str:
        """An incoming-webhook URL pointing at the fake."""
        return f"http://127.0.0.1:{self.port}/services/{team}/{bot}/{secret}"

    def fail(self, kind: str, n: int = 1) -> None:
        """Answer the next n requests with kind, then fall back to the mode."""
        with self._lock:
            self._script.extend([kind] * n)

    def set_mode(self, kind: str) -> None:
        """Answer every request with kind until changed."""
        self.mode = kind

    def delivered(self, path_suffix: str = "") -> list[Request]:
        """Requests answered with success, optionally only those whose path ends with path_suffix."""
        return [
            r
            for r in self.requests
            if r.status == 200 and r.response.get("ok", True) and r.path.endswith(path_suffix)
        ]

    def close(self) -> None:
        """Stop serving (hanging handlers are released)."""
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    def _next_kind(self) -> str:
        with self._lock:
            return self._script.popleft() if self._script else self.mode

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0)).decode()
        ctype = h.headers.get("Content-Type", "")
        body: dict[str, Any]
        body = json.loads(raw or "{}") if "json" in ctype else {k: v[0] for k, v in parse_qs(raw).items()}
        req = Request("POST", h.path, dict(h.headers.items()), body)
        kind = self._next_kind()
        with self._lock:
            self.requests.append(req)
        if kind == "hang":
            # Never processed: after hanging, answer as a gateway that gave up (client has timed out by then).
            req.status = 0
            self._release.wait(self.hang_for)
            req.status = 504
            self._send(h, 504, b"Gateway Timeout", "text/plain")
            return
        if kind == "500":
            req.status = 500
            self._send(h, 500, b"Internal Server Error", "text/plain")
            return
        if kind == "429":
            req.status = 429
            payload = json.dumps({"ok": False, "error": "ratelimited"}).encode()
            self._send(h, 429, payload, "application/json", {"Retry-After": str(self.retry_after)})
            return
        if h.path.startswith("/services/"):
            self._send(h, 200, b"ok", "text/plain")
            return
        if kind.startswith("error:"):
            req.response = {"ok": False, "error": kind.split(":", 1)[1]}
        elif h.path.endswith("/chat.postMessage"):
            with self._lock:
                self._ts += 1
                ts = f"{self._ts}.000100"
            req.response = {
                "ok": True,
                "channel": CHANNEL_ID,
                "ts": ts,
                "message": {"text": body.get("text", "")},
            }
        elif h.path.endswith("/chat.update"):
            req.response = {
                "ok": True,
                "channel": body.get("channel"),
                "ts": body.get("ts"),
                "text": body.get("text"),
            }
        else:
            req.response = {"ok": False, "error": "unknown_method"}
        self._send(h, 200, json.dumps(req.response).encode(), "application/json")

    @staticmethod
    def _send(
        h: BaseHTTPRequestHandler, status: int, payload: bytes, ctype: str, extra: dict | None = None
    ) -> None:
        try:
            h.send_response(status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(payload)))
            for k, v in (extra or {}).items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout): what a hanging Slack looks like from here


def wait_for(pred: Any, timeout: float = 5.0, step: float = 0.02) -> bool:
    """Poll pred() until true or timeout."""
    try:
        until(pred, timeout=timeout, step=step)
    except AssertionError:
        return False
    return True
