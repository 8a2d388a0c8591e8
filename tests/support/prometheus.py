"""Backfill OpenMetrics into a throw-away TSDB and query it through a real Prometheus on 127.0.0.1."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.wait import until

# No scrape jobs; global defaults, so evaluation_interval (the default subquery step) is 1m.
CONFIG = "scrape_configs: []\n"


class PrometheusError(RuntimeError):
    """Prometheus or promtool failed; the message carries their output."""


def binaries() -> tuple[str, str] | None:
    """Paths of (prometheus, promtool), or None when either is missing."""
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    return (prom, tool) if prom and tool else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def backfill(openmetrics: str | Path, storage: str | Path, *, promtool: str = "promtool") -> str:
    """Create TSDB blocks in `storage` from an OpenMetrics file; returns promtool's block listing."""
    cmd = [promtool, "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=8760h"]
    proc = subprocess.run([*cmd, str(openmetrics), str(storage)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise PrometheusError(f"promtool backfill failed ({proc.returncode}): {proc.stderr or proc.stdout}")
    return proc.stdout


class PrometheusServer:
    """A Prometheus process over a given TSDB directory, with no scrape jobs, on a free loopback port."""

    def __init__(self, storage: str | Path, workdir: str | Path, *, binary: str = "prometheus") -> None:
        self.storage = Path(storage)
        self.workdir = Path(workdir)
        self.binary = binary
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / "prometheus.log"

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:40123."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        """Start Prometheus and wait until /-/ready answers 200."""
        config = self.workdir / "prometheus.yml"
        config.write_text(CONFIG)
        for _attempt in range(3):
            self.port = free_port()
            cmd = [
                self.binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.storage}",
                "--storage.tsdb.retention.time=100y",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ]
            with self.log_path.open("ab") as log:
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
            if self._wait_ready(timeout):
                return
            self.stop()
        raise PrometheusError(f"prometheus did not become ready: {self.log()}")

    def _wait_ready(self, timeout: float) -> bool:
        def state() -> str:
            if self.proc is None or self.proc.poll() is not None:
                return "exited"
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as resp:
                return "ready" if resp.status == 200 else ""

        try:
            return until(state, timeout=timeout, step=0.1, ignore=(urllib.error.URLError, OSError)) == "ready"
        except AssertionError:
            return False

    def log(self) -> str:
        """The tail of Prometheus' log."""
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def api(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        """GET an API path; returns the decoded JSON body (errors included, as Prometheus sends them)."""
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                return json.loads(resp.read())  # type: ignore[no-any-return]
        except urllib.error.HTTPError as exc:  # 400/422 carry a JSON error body
            return json.loads(exc.read())  # type: ignore[no-any-return]

    def query(self, expr: str, t: float) -> dict[str, Any]:
        """The `data` object of /api/v1/query at time t (seconds); raises PrometheusError on an API error."""
        body = self.api("/api/v1/query", {"query": expr, "time": f"{t:.3f}"})
        if body.get("status") != "success":
            raise PrometheusError(f"{expr!r} at {t:.3f}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]  # type: ignore[no-any-return]

    def stop(self) -> None:
        """Terminate the process (kill after 10 s)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
