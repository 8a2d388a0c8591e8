"""A local HTTP server that records JSON POSTs: a fake Alertmanager API, or Alertmanager's webhook receiver."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.wait import until


class Recorder:
    """ThreadingHTTPServer on 127.0.0.1:0 answering every POST with `status`; keeps (path, JSON body)."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.posts: list[tuple[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.posts.append((self.path, json.loads(raw or b"null")))
                body = b"{}" if outer.status == 200 else b'{"error": "boom"}'
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def bodies(self, path: str = "") -> list[Any]:
        """JSON bodies of the POSTs whose path ends with path."""
        return [b for p, b in self.posts if p.endswith(path)]

    def wait(self, pred: Any, timeout: float = 30.0) -> Any:
        """Poll until pred(bodies) returns something truthy; returns it (AssertionError on timeout)."""
        return until(
            lambda: pred(self.bodies()), timeout=timeout, step=0.1, what=f"a matching POST (got {self.posts})"
        )

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()
