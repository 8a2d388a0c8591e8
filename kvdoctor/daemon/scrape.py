"""Scrape every target on its own schedule from one asyncio thread: a bounded connection pool, per-target
timeouts, parsing with limits in a worker thread. A slow or dead target costs only its own slot."""

from __future__ import annotations

import asyncio
import logging
import math
import re
import resource
import threading
import time
import zlib
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, NamedTuple, TypeVar

import aiohttp

from kvdoctor.config import TargetSpec
from kvdoctor.ingest.fetch import ScrapeError, fetch_page_async, new_session
from kvdoctor.ingest.parse import Keep, LimitExceeded, Parsed, ParseError, Parser
from kvdoctor.samples import Scrape

log = logging.getLogger("kvdoctor")
T = TypeVar("T")
_NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")
# Results a target may queue between two evaluations (more means the evaluation is far behind: keep the newest).
MAX_QUEUED = 4


class ScrapeResult(NamedTuple):
    """One target's scrape: when it started, how long it took, the parsed page or the error."""

    target: str
    t: float
    duration_s: float
    page: Parsed | None  # plain tuples while it waits for the cycle (see Parsed)
    error: str | None
    limit: str | None = None  # the limit a refused scrape went over
    # Why it failed, without the values in the message (a byte count, a line's counter): the key a warning
    # about the target is de-duplicated by, so it is said when the cause changes, not on every cycle.
    cause: str | None = None

    @property
    def scrape(self) -> Scrape | None:
        """The parsed samples (made on each call: take them once, when the cycle ingests the page)."""
        return self.page.scrape() if self.page is not None else None


class Scraper:
    """Owns the event loop thread, the connection pool, one parser per target and each target's schedule."""

    def __init__(
        self,
        max_connections: int = 1024,
        clock: Callable[[], float] = time.time,
        keep: Callable[[], Keep | None] = lambda: None,
    ) -> None:
        self.clock = clock  # stamps each scrape (tests inject one instead of sleeping)
        self.keep = keep  # the families to parse now (the pipeline's, which a reload changes); None: all
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="kvdoctor-scrape", daemon=True)
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._retired: set[aiohttp.ClientSession] = set()  # pools a resize replaced, until they are closed
        self._start_lock = threading.Lock()
        self._parse_pool = ThreadPoolExecutor(1, thread_name_prefix="kvdoctor-parse")
        self._parsers: dict[str, Parser] = {}
        self._busy: dict[str, asyncio.Lock] = {}
        self._plan: dict[str, tuple[TargetSpec, float]] = {}  # target -> (spec in force, interval)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._inbox: dict[str, list[ScrapeResult]] = {}
        self._inbox_lock = threading.Lock()
        self.arrived = threading.Condition(self._inbox_lock)

    def _ensure(self) -> None:
        # The loop and the pool start on first use: a daemon on the Prometheus source never scrapes.
        with self._start_lock:
            if not self._thread.is_alive():
                _raise_fd_limit(2 * self.max_connections + 256)
                self._thread.start()

    async def _pool(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = new_session(self.max_connections)
        return self._session

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        self._ensure()
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def resize(self, max_connections: int) -> None:
        """Use a pool of a new size from the next scrape on (scrapes in flight finish on the old one)."""
        if max_connections == self.max_connections:
            return
        self.max_connections = max_connections
        old, self._session = self._session, None
        if old is not None:
            self._retired.add(old)  # closed a minute on, or by close() if that comes first
            self.loop.call_soon_threadsafe(self.loop.call_later, 60, self._retire, old)

    def _retire(self, session: aiohttp.ClientSession) -> None:
        self._retired.discard(session)
        self.loop.create_task(session.close())

    # -- one scrape --------------------------------------------------------------------------------------
    async def _one(self, spec: TargetSpec) -> ScrapeResult:
        lock = self._busy.setdefault(spec.name, asyncio.Lock())
        async with lock:
            t, start = self.clock(), time.monotonic()
            try:
                page = await fetch_page_async(await self._pool(), spec.url, spec.http)
                parser = self._parsers.setdefault(spec.name, Parser())
                parsed = await self.loop.run_in_executor(
                    self._parse_pool, parser.read, page.text, spec.limits, page.openmetrics, self.keep()
                )
                del page
                return ScrapeResult(spec.name, t, time.monotonic() - start, parsed, None)
            except ScrapeError as exc:
                error, limit = str(exc).replace(spec.url, spec.safe_url), None
                cause = _NUMBER_RE.sub("N", error)
            except ParseError as exc:
                error, limit = f"{spec.safe_url}: bad exposition: {exc}", None
                cause = f"bad exposition: {exc.cause}"
            except LimitExceeded as exc:
                error, limit = f"{spec.safe_url}: scrape refused: {exc}", exc.limit
                cause = exc.limit
            except Exception as exc:  # a bug in one target's scrape must not stop the others
                log.debug("scrape of %s failed", spec.name, exc_info=True)
                error = (
                    f"{spec.safe_url}: {type(exc).__name__}: {_short(exc).replace(spec.url, spec.safe_url)}"
                )
                limit = None
                cause = type(exc).__name__
            return ScrapeResult(spec.name, t, time.monotonic() - start, None, error, limit, cause)

    def scrape(self, targets: list[TargetSpec]) -> list[ScrapeResult]:
        """Scrape every target now, all at once; results in target order (each bounded by its own timeout)."""

        async def run() -> list[ScrapeResult]:
            return list(await asyncio.gather(*(self._one(s) for s in targets)))

        return self._call(run())

    # -- schedules ----------------------------------------------------------------------------------------
    def schedule(self, targets: list[TargetSpec], interval_s: float) -> None:
        """Scrape each target every interval_s at its own offset; call again with the new plan on any change."""
        plan = {s.name: (s, interval_s) for s in targets}
        self._ensure()
        self.loop.call_soon_threadsafe(self._replan, plan)

    def _replan(self, plan: dict[str, tuple[TargetSpec, float]]) -> None:
        for gone in set(self._plan) - set(plan):
            self._tasks.pop(gone).cancel()
            self._wake.pop(gone, None)
        for name, entry in plan.items():
            old = self._plan.get(name)
            self._plan[name] = entry
            if old is None:
                self._wake[name] = asyncio.Event()
                self._tasks[name] = self.loop.create_task(self._run(name), name=f"scrape {name}")
            elif old[1] != entry[1]:
                self._wake[name].set()  # the interval changed: work out the next slot again
        for gone in set(self._plan) - set(plan):
            del self._plan[gone]

    async def _run(self, name: str) -> None:
        first = True
        while name in self._plan:
            spec, interval = self._plan[name]
            if not first:
                # Prometheus spreads targets over the interval by a hash of the target, so they do not all
                # arrive at once; the slot after now, never the one just used.
                offset = zlib.crc32(name.encode()) / 2**32 * interval
                now = time.time()
                slot = math.floor((now - offset) / interval + 1) * interval + offset
                wake = self._wake[name]
                wake.clear()
                try:
                    await asyncio.wait_for(wake.wait(), timeout=max(0.0, slot - now))
                    continue  # replanned while waiting
                except TimeoutError:
                    pass
                if name not in self._plan:
                    return
                spec, interval = self._plan[name]
            first = False
            self._deliver(await self._one(spec))

    def _deliver(self, result: ScrapeResult) -> None:
        with self.arrived:
            queue = self._inbox.setdefault(result.target, [])
            queue.append(result)
            del queue[:-MAX_QUEUED]
            self.arrived.notify_all()

    def drain(self) -> list[ScrapeResult]:
        """Every scheduled result that arrived since the last drain, oldest first."""
        with self._inbox_lock:
            out = [r for q in self._inbox.values() for r in q]
            self._inbox.clear()
        return sorted(out, key=lambda r: r.t)

    def wait_first(self, names: set[str], timeout: float) -> None:
        """Block until each of names has a result waiting (or timeout): the first evaluation has data."""
        deadline = time.monotonic() + timeout
        with self.arrived:
            while not names <= set(self._inbox):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.arrived.wait(left)

    # -- teardown ---------------------------------------------------------------------------------------
    def forget(self, names: set[str]) -> None:
        """Drop the parsers of removed targets."""
        for name in names:
            self._parsers.pop(name, None)
            self._busy.pop(name, None)

    def close(self) -> None:
        """Cancel the schedules, close the pool and stop the loop thread."""

        async def stop() -> None:
            for task in self._tasks.values():
                task.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            for session in filter(None, [self._session, *self._retired]):
                await session.close()

        if self.loop.is_running():
            try:
                self._call(stop(), timeout=10)
            except Exception:
                log.debug("scraper did not stop cleanly", exc_info=True)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        self._parse_pool.shutdown(wait=False, cancel_futures=True)


def capped(
    specs: dict[str, TargetSpec], interval: float, warned: set[tuple[str, float, float]]
) -> dict[str, TargetSpec]:
    """The specs as scraped: a timeout longer than the interval is cut to it (said once per target and setting)."""
    out = {}
    news: dict[float, list[str]] = {}
    for name, spec in specs.items():
        h = spec.http
        if h.total_timeout > interval:
            key = (name, h.total_timeout, interval)
            if key not in warned:
                warned.add(key)
                news.setdefault(h.total_timeout, []).append(name)
            h = replace(
                h,
                total_timeout=interval,
                read_timeout=min(h.read_timeout, interval),
                connect_timeout=min(h.connect_timeout, interval),
            )
            spec = replace(spec, http=h)
        out[name] = spec
    for timeout, names in news.items():  # one line per setting, not one per target of a large fleet
        more = ", …" if len(names) > 3 else ""
        who = (
            f"target {names[0]}"
            if len(names) == 1
            else f"{len(names)} targets ({', '.join(names[:3])}{more})"
        )
        log.warning(
            "%s: scrape timeout %gs is longer than the %gs interval; using %gs (set the target's "
            "`timeout:` or `scrape.timeout` to at most the interval)",
            who,
            timeout,
            interval,
            interval,
        )
    return out


def _short(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:197] + "..."


def _raise_fd_limit(need: int) -> None:
    # A pool of 1,024 connections beside the web server's outgrows the common soft limit of 1,024 descriptors;
    # the hard limit is what the operator allows, so go up to it (as Go programs do) and say so if short.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need or soft == resource.RLIM_INFINITY:
        return
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        target = soft
    if target < need:
        log.warning("open-file limit %d is below the %d the scrape pool may need (ulimit -n)", target, need)
