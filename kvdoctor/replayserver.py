"""Serve recordings as a live vLLM `/metrics` endpoint, in real time, one recording after another."""

from __future__ import annotations

import itertools
import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from kvdoctor.ingest.recording import Frame, load_frames

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
POLL_S = 0.05  # how often serve_forever looks for shutdown(): stop() returns within it


class Playlist:
    """Recordings laid end to end on one timeline (seconds from the start of the first)."""

    def __init__(self, paths: list[str | Path], start_offset_s: float = 0.0, loop: bool = False) -> None:
        self.offsets: list[float] = []
        self.frames: list[Frame] = []
        pos = 0.0
        for path in paths:
            frames = load_frames(path)
            if not frames:
                continue
            t0 = frames[0].t
            # the pause before the next recording (or the loop) is one scrape step: the first positive one, else
            # 1 s (frames that all share one time would otherwise make a playlist of length 0)
            gap = next((b.t - a.t for a, b in itertools.pairwise(frames) if b.t > a.t), 1.0)
            for f in frames:
                self.offsets.append(pos + f.t - t0)
                self.frames.append(f)
            pos = self.offsets[-1] + gap
        if not self.frames:
            raise ValueError("no frames in " + ", ".join(str(p) for p in paths))
        self.length = pos
        self.start_offset = start_offset_s
        self.loop = loop

    def at(self, elapsed_s: float) -> Frame | None:
        """The frame to serve elapsed_s after playback started; None once a non-looping playlist has ended."""
        pos = self.start_offset + elapsed_s
        if pos >= self.length:
            if not self.loop:
                return None
            pos %= self.length
        i = bisect_right(self.offsets, pos)
        return self.frames[max(0, i - 1)]


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = (
        1024  # many scrapers at once (a fleet replayed from one server) must not see SYN drops
    )


class ReplayServer:
    """A tiny HTTP server answering GET /metrics from a Playlist on the wall clock (times speed)."""

    def __init__(
        self,
        playlist: Playlist,
        listen: str = "127.0.0.1:0",
        speed: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        host, _, port = listen.rpartition(":")
        self.playlist, self.speed, self.clock = (
            playlist,
            speed,
            clock,
        )  # tests inject a clock instead of sleeping
        self.started = clock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] not in ("/metrics", "/metrics/"):
                    self._send(404, b"not found\n", "text/plain")
                    return
                frame = server.current()
                if frame is None:
                    self._send(503, b"recording ended\n", "text/plain")
                elif frame.text is None:
                    self._send(503, (frame.error or "down").encode() + b"\n", "text/plain")
                else:
                    self._send(200, frame.text.encode("utf-8"), CONTENT_TYPE)

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        self.httpd = _HTTPServer((host or "127.0.0.1", int(port or 0)), Handler)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The /metrics URL being served."""
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/metrics"

    def current(self) -> Frame | None:
        """The frame served now."""
        return self.playlist.at((self.clock() - self.started) * self.speed)

    def start(self) -> ReplayServer:
        """Serve from a background thread."""
        self.started = self.clock()
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, args=(POLL_S,), name="replay-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self.httpd.shutdown()
        self.httpd.server_close()
