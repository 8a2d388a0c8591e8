"""Answer times of /metrics and /-/healthy while slow clients hold connections, against the same server idle.

usage: python benchmarks/bench_web_slow_clients.py [--slow 100] [--requests 40] [--check]

A kvdoctor web server with a 200-target /metrics page; first `--requests` GETs (8 at a time) with nobody else
connected (the reference), then the same with `--slow` clients from as many loopback addresses, each sending its
request head a byte every 0.5 s. Prints the median and the slowest answer of each run and their ratio. `--check`
exits 1 when an answer under slow clients took over a second (the bound of the issue that moved this out of
tests/test_faults_http.py). Takes a few seconds; not run in CI.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvdoctor.diagnosis.target import Target, TargetFacts  # noqa: E402
from kvdoctor.status.exposition import make_registry  # noqa: E402
from kvdoctor.status.state import DaemonState  # noqa: E402
from kvdoctor.web import WebServer  # noqa: E402
from tests.faults import SlowClient  # noqa: E402


def _server() -> WebServer:
    state = DaemonState()
    for i in range(200):
        target = Target(f"vllm-{i:03d}", TargetFacts(url=f"http://10.0.0.{i}:8000/metrics"))
        target.record(1.0, True, duration_s=0.02, samples=381)
        state.set_target(target)
    state.publish([], 1000.0, 0.01, 0)
    web = WebServer(state, make_registry(state), listen="127.0.0.1:0")
    web.start()
    return web


def _timed(url: str) -> float:
    start = time.monotonic()
    r = requests.get(url, timeout=10)
    r.raise_for_status()
    return time.monotonic() - start


def _round(web: WebServer, n: int) -> list[float]:
    urls = [web.url + p for p in ("metrics", "-/healthy")] * (n // 2)
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(_timed, urls))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slow", type=int, default=100)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    web = _server()
    try:
        idle = _round(web, args.requests)
        slow = [
            SlowClient(web.address, every=0.5, source=f"127.0.{1 + i // 250}.{2 + i % 250}")
            for i in range(args.slow)
        ]
        try:
            deadline = time.monotonic() + 10
            while any(c.sent < 2 for c in slow) and time.monotonic() < deadline:
                time.sleep(0.05)  # a benchmark may pause: every slow client is mid-request before the round
            busy = _round(web, args.requests)
        finally:
            for c in slow:
                c.stop()
    finally:
        web.stop()
    for label, xs in (("idle", idle), (f"{args.slow} slow clients", busy)):
        print(f"{label:>18}: median {statistics.median(xs) * 1e3:7.1f} ms, slowest {max(xs) * 1e3:7.1f} ms")
    print(f"ratio slow/idle: median {statistics.median(busy) / statistics.median(idle):.2f}")
    return 1 if args.check and max(busy) > 1.0 else 0


if __name__ == "__main__":
    sys.exit(main())
