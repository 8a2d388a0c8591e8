"""Scrape many targets at once with bounded workers; a slow or dead target costs only its own timeout."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import NamedTuple

import requests

from doctor.config import TargetSpec
from doctor.ingest.fetch import ScrapeError, fetch


class ScrapeResult(NamedTuple):
    """One target's scrape: when it started, how long it took, and the body or the error."""

    target: str
    t: float
    duration_s: float
    text: str | None
    error: str | None


class Scraper:
    """A pool of workers, one HTTP session per target (connection reuse)."""

    def __init__(self, workers: int = 16, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock  # stamps each scrape (tests inject one)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="scrape")
        self._sessions: dict[str, requests.Session] = {}

    def _one(self, spec: TargetSpec) -> ScrapeResult:
        session = self._sessions.get(spec.name)
        if session is None:
            session = self._sessions[spec.name] = requests.Session()
        t = self.clock()
        start = time.monotonic()
        try:
            text = fetch(spec.url, spec.http, session)
            return ScrapeResult(spec.name, t, time.monotonic() - start, text, None)
        except ScrapeError as exc:
            return ScrapeResult(
                spec.name, t, time.monotonic() - start, None, str(exc).replace(spec.url, spec.safe_url)
            )
        except Exception as exc:  # a bug in one target's scrape must not stop the others
            return ScrapeResult(
                spec.name, t, time.monotonic() - start, None, f"{spec.safe_url}: {type(exc).__name__}"
            )

    def scrape(self, targets: list[TargetSpec], deadline_s: float) -> list[ScrapeResult]:
        """Scrape every target in parallel; results in target order; stragglers past deadline_s count as failed."""
        futures = {self.pool.submit(self._one, t): t for t in targets}
        done, _ = wait(futures, timeout=deadline_s)
        out = []
        for fut, spec in futures.items():
            if fut in done:
                out.append(fut.result())
            else:
                out.append(
                    ScrapeResult(
                        spec.name,
                        self.clock(),
                        deadline_s,
                        None,
                        f"{spec.safe_url}: no answer within {deadline_s:g}s",
                    )
                )
        return out

    def forget(self, names: set[str]) -> None:
        """Close the sessions of removed targets."""
        for name in names:
            s = self._sessions.pop(name, None)
            if s is not None:
                s.close()

    def close(self) -> None:
        """Stop the workers."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        for s in self._sessions.values():
            s.close()
