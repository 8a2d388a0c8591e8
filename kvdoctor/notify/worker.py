"""Delivery worker: drains the outbox off the evaluation path, in order per incident, with capped backoff."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kvdoctor.notify.outbox import QUARANTINE_AFTER, Item, Outbox
from kvdoctor.notify.redact import redacting_logger

log = redacting_logger("kvdoctor.notify.worker")


@dataclass(frozen=True)
class Result:
    """Outcome of one delivery attempt: ok, or an error that is transient (retry) or permanent (drop)."""

    ok: bool
    transient: bool = False
    error: str = ""
    poison: bool = False  # the item itself cannot be rendered: retried a few times, then quarantined


class Sink(Protocol):
    """A channel that delivers outbox items (Slack today)."""

    name: str

    def deliver(self, item: Item, outbox: Outbox) -> Result:
        """Send one item; never raises."""
        ...


class Worker:
    """A daemon thread that delivers pending items; a failing incident waits, the others proceed."""

    def __init__(
        self,
        outbox: Outbox,
        sinks: dict[str, Sink],
        *,
        initial: float = 2.0,
        cap: float = 300.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.outbox, self.sinks = outbox, sinks
        self.initial, self.cap, self.monotonic = initial, cap, monotonic
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._retry_at: dict[str, tuple[int, float]] = {}  # incident → (failures, next attempt)
        self._thread: threading.Thread | None = None
        self.last_error = ""

    def start(self) -> None:
        """Start the thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kvdoctor-notify", daemon=True)
            self._thread.start()

    def wake(self) -> None:
        """Tell the worker new items are waiting."""
        self._idle.clear()
        self._wake.set()

    def run_once(self) -> float | None:
        """Try every deliverable item once; returns seconds until the next retry is due, None if nothing left."""
        blocked: set[str] = set()
        next_due: float | None = None
        for item in self.outbox.pending():
            if self._stop.is_set():
                break
            if item.incident in blocked:
                continue
            failures, due = self._retry_at.get(item.incident, (0, 0.0))
            wait = due - self.monotonic()
            if wait > 0:
                blocked.add(item.incident)
                next_due = wait if next_due is None else min(next_due, wait)
                continue
            sink = self.sinks.get(item.sink)
            if sink is None:
                self.outbox.dead(item.id, f"no sink {item.sink!r} configured")
                continue
            res = sink.deliver(item, self.outbox)
            if res.ok:
                self.outbox.done(item.id)
                self._retry_at.pop(item.incident, None)
            elif res.poison:  # not the sink's fault: it blocks neither its incident nor the others
                if item.attempts + 1 >= QUARANTINE_AFTER:
                    self.outbox.quarantine(item.id, res.error)
                    log.error(
                        "notification %s quarantined after %d attempts: %s",
                        item.key,
                        item.attempts + 1,
                        res.error,
                    )
                else:
                    self.outbox.failed(item.id, res.error)
                    next_due = self.initial if next_due is None else min(next_due, self.initial)
                self.last_error = res.error
            elif res.transient:
                # Keep order per incident: later items of this incident wait behind this one.
                delay = min(self.cap, self.initial * 2**failures)
                self._retry_at[item.incident] = (failures + 1, self.monotonic() + delay)
                self.outbox.failed(item.id, res.error)
                self.last_error = res.error
                log.warning("notification %s failed (%s), retrying in %.1fs", item.key, res.error, delay)
                blocked.add(item.incident)
                next_due = delay if next_due is None else min(next_due, delay)
            else:
                self.outbox.dead(item.id, res.error)
                self.last_error = res.error
                log.error("notification %s rejected for good: %s", item.key, res.error)
        return next_due

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                next_due = self.run_once()
            except Exception as e:
                log.exception("notify worker error: %s", type(e).__name__)
                next_due = self.initial
            if next_due is None and not self.outbox.pending(1):
                self._idle.set()
            self._wake.wait(next_due if next_due is not None else 30.0)

    def flush(self, timeout: float) -> bool:
        """Wait until the outbox is empty; False if items are still owed after timeout."""
        deadline = time.monotonic() + timeout
        self.wake()
        while time.monotonic() < deadline:
            if not self.outbox.pending(1):
                return True
            self._idle.wait(min(0.05, max(0.0, deadline - time.monotonic())))
        return not self.outbox.pending(1)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread (an item in flight finishes first)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
