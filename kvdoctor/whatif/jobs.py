"""The what-if workers' queue and thread: a FIFO holding a key once until it is done, dropping (and counting) its
oldest when full, and the one thread that serves it.

A fleet slower to simulate than its cycles would otherwise grow the queue without end; the oldest request is the
one a newer cycle asks again.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
MAX_QUEUE = 4096  # a few requests per target (the advice's change and each relief) of a 1,000-target fleet


class Jobs(Generic[K]):
    """A FIFO of keys for one worker thread: a key is queued once until done; when full, the oldest is dropped."""

    def __init__(self, maxlen: int = MAX_QUEUE) -> None:
        self.maxlen = maxlen
        self._cv = threading.Condition()
        self._queue: deque[tuple[K, float]] = deque()
        # queued or being computed: asked again meanwhile, it is not queued twice
        self._pending: set[K] = set()
        self.dropped_total = 0
        self.closed = False  # close(): no more requests; a waiting get() returns None

    def put(self, key: K, t: float) -> bool:
        """Queue key (asked at t) unless it is pending already or the queue is closed; False when so."""
        with self._cv:
            if key in self._pending or self.closed:
                return False
            if len(self._queue) >= self.maxlen:
                old, _ = self._queue.popleft()  # the oldest request is the one a newer cycle will ask again
                self._pending.discard(old)
                self.dropped_total += 1
            self._queue.append((key, t))
            self._pending.add(key)
            self._cv.notify()
            return True

    def get(self, timeout: float | None = None) -> tuple[K, float] | None:
        """The oldest request, waiting up to timeout for one (None when none came, or closed); pending until done()."""
        with self._cv:
            if not self._cv.wait_for(lambda: bool(self._queue) or self.closed, timeout) or self.closed:
                return None
            return self._queue.popleft()

    def close(self) -> None:
        """Take no more requests and drop those queued; a worker waiting in get() returns None."""
        with self._cv:
            self.closed = True
            self._queue.clear()
            self._pending.clear()
            self._cv.notify_all()

    def take(self, group: Hashable, of: Callable[[K], Hashable]) -> list[tuple[K, float]]:
        """Every queued request whose key is of this group, oldest first, out of the queue (pending until done())."""
        with self._cv:
            out = [job for job in self._queue if of(job[0]) == group]
            if out:
                self._queue = deque(job for job in self._queue if of(job[0]) != group)
            return out

    def done(self, key: K) -> None:
        """The request for key is computed: it may be queued again."""
        with self._cv:
            self._pending.discard(key)

    def __len__(self) -> int:
        with self._cv:
            return len(self._queue)

    def __contains__(self, key: object) -> bool:
        with self._cv:  # queued or being computed
            return key in self._pending


class JobsThread(Generic[K]):
    """The thread that serves one Jobs queue through `work_once`: started by the first request, again if it died,
    and ended with the queue (`close`)."""

    def __init__(self, jobs: Jobs[K], work_once: Callable[[], bool], name: str) -> None:
        self.jobs, self.work_once, self.name = jobs, work_once, name
        self.thread: threading.Thread | None = None
        # False: requests are only queued, and whoever steps the queue serves them with work_once (a benchmark
        # that drives the worker from its own loop)
        self.threaded = True

    def submit(self, key: K, t: float) -> bool:
        """Queue key (asked at t), starting the thread where none is alive; False when it was pending or closed."""
        queued = self.jobs.put(key, t)
        alive = self.thread is not None and self.thread.is_alive()
        if self.threaded and not self.jobs.closed and not alive:
            self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self.thread.start()
        return queued

    def _run(self) -> None:
        while not self.jobs.closed:
            self.work_once()

    def close(self, timeout: float = 5.0) -> None:
        """Take no more requests and drop those queued; the request under way ends first (up to timeout)."""
        self.jobs.close()
        if self.thread is not None:
            self.thread.join(timeout)
