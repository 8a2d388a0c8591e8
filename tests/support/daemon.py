"""The daemon in tests: built in-process and always shut down (`Daemons`), or `kvdoctor serve` as a process for
fault tests (`Serve`: its config file, its HTTP surface, its RSS and its cadence)."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import requests

from kvdoctor.daemon.runner import Daemon
from tests.support.wait import until

ROOT = Path(__file__).resolve().parents[2]


class Daemons:
    """Builds a test's daemons and shuts each one down when the test ends, however it ends (the `daemons` fixture).

    A daemon's first cycle freezes the whole process's collector (gc.freeze, a raised threshold) until its
    shutdown() thaws it: one never shut down leaves every later test of its xdist worker with garbage collected at
    other moments than it would be (an earlier test's unclosed aiohttp session logged in the middle of another).
    """

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()

    def __call__(self, *args: Any, **kw: Any) -> Daemon:
        """Daemon(*args, **kw), shut down on exit.

        A test may shut down a daemon it never started itself first (a restart): the second shutdown only writes
        its state file again.
        """
        d = Daemon(*args, **kw)
        self._stack.callback(d.shutdown)
        return d

    def __enter__(self) -> Daemons:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        return self._stack.__exit__(kind, exc, tb)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Serve:
    """A running daemon with a config the test rewrites and reloads."""

    def __init__(self, tmp: Path, config: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.config = tmp / "kvdoctor.yml"
        self.log = (tmp / "serve.log").open("w+")
        self.write(config)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kvdoctor", "serve", "--config", str(self.config)],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def write(self, config: str) -> None:
        self.config.write_text(f"listen: 127.0.0.1:{self.port}\n{config}")

    def get(self, path: str, **kw: Any) -> requests.Response:
        return requests.get(self.base + path, timeout=kw.pop("timeout", 5), **kw)

    def wait_ready(self, timeout: float = 30.0) -> None:
        def ready() -> bool:
            assert self.proc.poll() is None, self.output()
            return self.get("/-/ready", timeout=1).status_code == 200

        try:
            until(ready, timeout=timeout, step=0.2, ignore=(requests.RequestException,))
        except AssertionError as exc:
            raise AssertionError("kvdoctor never became ready:\n" + self.output()) from exc

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def history(self, target: str) -> list[float]:
        """Times of the evaluations that diagnosed target (one point per cycle)."""
        data = self.get("/api/v1/history", params={"target": target}).json()["data"]
        return sorted(p["t"] for s in data for p in s["points"])

    def diagnoses(self) -> dict[str, Any]:
        return {d["target"]: d for d in self.get("/api/v1/diagnoses").json()["data"]}

    def reload(self) -> requests.Response:
        return requests.post(self.base + "/-/reload", timeout=30)

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def gaps(times: list[float]) -> list[float]:
    """Seconds between consecutive times."""
    return [b - a for a, b in itertools.pairwise(times)]


def watched(d: Any, name: str, server: Any, seconds: int = 20) -> Any:
    """As if the daemon had scraped `name` every second for `seconds` already: a verdict needs a 15 s window."""
    now = time.time()
    for k in range(seconds, 0, -1):
        frame = server.playlist.at(-k)
        if frame is not None and frame.text is not None:
            d.pipeline.observe(name, now - k, frame.text)
    return d
