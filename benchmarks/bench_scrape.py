"""Scrape cost at fleet size: the daemon's asyncio scraper against the thread pool it replaced, on one fleet.

usage: python benchmarks/bench_scrape.py [--targets 1000] [--rounds 3] [--slow 0.1] [--timeout 2]

N targets (`?i=` URLs on a few `kvdoctor replay-server` processes serving real vLLM 0.32 expositions; a share
--slow of them on a server that accepts and never answers). Each round scrapes and parses every target once; the
numbers are this process's CPU seconds per target (fetch + parse, the servers run elsewhere) and the round's wall
time, for
  * asyncio: kvdoctor.daemon.scrape.Scraper (one event loop, aiohttp's bounded pool, parse in a worker thread);
  * threads: the previous design, requests sessions on a pool of 16 threads, parse on the pool.
The ratios (threads / asyncio) are what to read; absolute times depend on the machine. Not run in CI.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvdoctor.config import TargetSpec  # noqa: E402
from kvdoctor.daemon.scrape import Scraper  # noqa: E402
from kvdoctor.ingest.fetch import HttpOptions  # noqa: E402
from kvdoctor.ingest.parse import Parser  # noqa: E402

RECORDINGS = ("kv_bound", "batch_cap", "healthy", "compute_bound")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def hang_server() -> tuple[socket.socket, str]:
    """A listener that accepts connections and never answers."""
    srv = socket.create_server(("127.0.0.1", 0), backlog=1024)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(srv.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.getsockname()[1]}/metrics"


def threads_round(
    specs: list[TargetSpec],
    sessions: dict[str, requests.Session],
    parsers: dict[str, Parser],
    pool: ThreadPoolExecutor,
) -> int:
    def one(spec: TargetSpec) -> bool:
        s = sessions.setdefault(spec.name, requests.Session())
        try:
            r = s.get(spec.url, timeout=spec.http.total_timeout)
            parsers.setdefault(spec.name, Parser()).parse(r.text, spec.limits)
            return True
        except requests.RequestException:
            return False

    return sum(pool.map(one, specs))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--slow", type=float, default=0.1)
    ap.add_argument("--timeout", type=float, default=2.0)
    args = ap.parse_args()
    rec = ROOT.parent / "shared" / "recordings" / "vllm-0.32-cpu"
    rec = rec if (rec / "kv_bound.jsonl.gz").exists() else ROOT / "kvdoctor" / "demo"
    ports = [free_port() for _ in RECORDINGS]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kvdoctor",
                "replay-server",
                str(rec / f"{r}.jsonl.gz"),
                "--loop",
                "--from",
                "40",
                "--listen",
                f"127.0.0.1:{p}",
            ],
            cwd=ROOT,
        )
        for r, p in zip(RECORDINGS, ports, strict=True)
    ]
    hang, hang_url = hang_server()
    try:
        for p in ports:
            deadline = time.monotonic() + 20
            while True:
                try:
                    requests.get(f"http://127.0.0.1:{p}/metrics", timeout=1)
                    break
                except requests.RequestException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        opts = HttpOptions(connect_timeout=1.0, read_timeout=args.timeout, total_timeout=args.timeout)
        n_slow = int(args.targets * args.slow)
        specs = [
            TargetSpec(
                url=f"http://127.0.0.1:{ports[i % len(ports)]}/metrics?i={i}", name=f"t{i:05d}", http=opts
            )
            for i in range(args.targets - n_slow)
        ] + [TargetSpec(url=f"{hang_url}?i={i}", name=f"slow{i:05d}", http=opts) for i in range(n_slow)]
        scraper = Scraper(1024)
        sessions: dict[str, requests.Session] = {}
        parsers: dict[str, Parser] = {}
        pool = ThreadPoolExecutor(16)
        results: dict[str, list[tuple[float, float, int]]] = {"asyncio": [], "threads": []}
        for _ in range(args.rounds + 1):  # the first round warms connections and parser caches
            for kind in results:
                cpu, wall = time.process_time(), time.monotonic()
                if kind == "asyncio":
                    ok = sum(r.error is None for r in scraper.scrape(specs))
                else:
                    ok = threads_round(specs, sessions, parsers, pool)
                results[kind].append((time.process_time() - cpu, time.monotonic() - wall, ok))
        scraper.close()
        pool.shutdown(wait=False, cancel_futures=True)
    finally:
        hang.close()
        for p in procs:
            p.terminate()
    print(
        f"{args.targets} targets ({n_slow} never answer, timeout {args.timeout:g}s), median of {args.rounds} rounds"
    )
    med = {}
    for kind, rows in results.items():
        rows = rows[1:]
        cpu = statistics.median(r[0] for r in rows)
        wall = statistics.median(r[1] for r in rows)
        med[kind] = (cpu, wall)
        print(
            f"  {kind:8s} cpu {1000 * cpu / args.targets:6.2f} ms/target   round {wall:6.2f} s   "
            f"scraped {rows[-1][2]}/{args.targets}"
        )
    print(
        f"  threads/asyncio: cpu x{med['threads'][0] / med['asyncio'][0]:.2f}, "
        f"wall x{med['threads'][1] / med['asyncio'][1]:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
