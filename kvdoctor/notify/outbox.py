"""Durable outbox (sqlite3, fsync'd): owed notifications, incident → Slack root message, lifecycle state.

When the disk refuses a write (full, read-only, failing), nothing is lost and nothing stops: what could not be
written is kept in memory and delivered from there, writes are retried with backoff, and the file catches up
(owed items, delivery marks, threads, lifecycle state) on the first write that works.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kvdoctor.jsondoc import JsonObject
from kvdoctor.notify.outboxdb import (
    PENDING,
    Mark,
    Unsaved,
    is_corrupt,
    open_outbox,
    start_over,
    status_counts,
    write,
)
from kvdoctor.status.health import OutboxStats

log = logging.getLogger("kvdoctor.notify.outbox")
OPEN_FAILED = (
    "notification outbox %s cannot be opened (%s): notifications go on from memory and the file is retried"
)
WRITE_FAILED = (
    "cannot write notification outbox %s: %s; keeping owed notifications in memory, retrying with backoff"
)
QUARANTINE_AFTER = 5  # attempts before an item whose payload cannot be read or rendered is put aside
BACKOFF_INITIAL_S, BACKOFF_MAX_S = 1.0, 60.0


@dataclass(frozen=True)
class Item:
    """One owed delivery of one event to one sink; key = sink:incident#seq makes it idempotent."""

    id: int
    key: str
    incident: str
    sink: str
    payload: JsonObject
    attempts: int = 0


class Outbox:
    """A small sqlite3 store shared by the evaluation thread (enqueue) and the delivery worker."""

    def __init__(self, path: str | Path, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.path, self.monotonic = Path(path), monotonic
        self._lock = threading.Lock()
        self._unsaved = Unsaved()
        self._keys: dict[int, str] = {}  # ids handed out by pending() → their key
        self._next_mem_id = -1
        self.write_failures_total = self.quarantined_total = 0
        self.last_write_error = ""
        self.failing_since: float | None = None  # wall time of the first failed write of the current outage
        self._failures = 0
        self._retry_at = 0.0
        self._db, self._state, error = open_outbox(self.path)
        if self._db is None:
            self._failed(error)
            log.warning(OPEN_FAILED, self.path, error)

    # -- writes ------------------------------------------------------------------------------------------------
    def _failed(self, error: str) -> None:
        self.write_failures_total += 1
        self._failures += 1
        self.failing_since = self.failing_since or time.time()
        delay = min(BACKOFF_MAX_S, BACKOFF_INITIAL_S * 2 ** (self._failures - 1))
        self._retry_at = self.monotonic() + delay
        if error != self.last_write_error:  # said once per cause, not on every cycle
            log.error(WRITE_FAILED, self.path, error)
        self.last_write_error = error

    def _flush(self) -> bool:
        """Write everything unsaved in one transaction, if the disk is due a try; True when nothing is left."""
        if not self._unsaved:
            return True
        if self.monotonic() < self._retry_at:
            return False
        if self._db is None:
            self._db, state, error = open_outbox(self.path)
            if self._db is None:
                self._failed(error)
                return False
            self._state = self._state or state
        db, u = self._db, self._unsaved
        try:
            write(db, u)
        except sqlite3.Error as exc:
            if db.in_transaction:  # sqlite already rolled back on a full disk: a second ROLLBACK would raise
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            self._failed(
                f"{type(exc).__name__}: {exc}" + (" (the file is corrupt)" if is_corrupt(exc) else "")
            )
            return False
        if self.failing_since is not None:
            log.warning(
                "notification outbox %s written again: %d owed items caught up", self.path, len(u.items)
            )
        self._unsaved, self._failures, self.failing_since, self._retry_at = Unsaved(), 0, None, 0.0
        return True

    def commit(self, items: list[tuple[str, str, str, JsonObject]], state: JsonObject | None) -> int:
        """Atomically enqueue (key, incident, sink, payload) items and save lifecycle state; returns new rows.

        Never raises: what the disk refuses stays in memory (and is delivered from there) until a write works."""
        now = time.time()
        with self._lock:
            added = 0
            for key, incident, sink, payload in items:
                if key in self._unsaved.items or self._known(key):
                    continue
                self._unsaved.items[key] = [self._next_mem_id, incident, sink, payload, now, 0]
                self._keys[self._next_mem_id] = key
                self._next_mem_id -= 1
                added += 1
            if state is not None:
                self._unsaved.state = state
            self._flush()
        return added

    def _known(self, key: str) -> bool:
        if self._db is None:
            return False
        try:
            return self._db.execute("SELECT 1 FROM outbox WHERE key=?", (key,)).fetchone() is not None
        except sqlite3.Error:
            return False

    def _set(self, item_id: int, status: str, error: str = "") -> None:
        with self._lock:
            self._mark(item_id, status, error)

    def _mark(self, item_id: int, status: str, error: str) -> None:
        key = self._keys.get(item_id)
        if key is None:
            return
        if status != "pending":
            self._keys.pop(item_id, None)
        held = self._unsaved.items.get(key)
        if held is not None:  # never written: its outcome lives in memory too
            held[5] += 1
            if status != "pending":
                del self._unsaved.items[key]  # delivered or given up: nothing is owed, nothing to write
            return
        mark = self._unsaved.marks.get(key) or Mark(status, 0, error, None)
        mark.status, mark.attempts, mark.error = status, mark.attempts + 1, error
        mark.at = time.time() if status != "pending" else None
        self._unsaved.marks[key] = mark
        self._flush()

    # -- reads -------------------------------------------------------------------------------------------------
    def pending(self, limit: int = 500) -> list[Item]:
        """Undelivered items, oldest first (the worker keeps per-incident order): the file's, then memory's."""
        with self._lock:
            rows: list[tuple[int, str, str, str, str, int]] = []  # PENDING's columns
            if self._db is not None:
                try:
                    rows = self._db.execute(PENDING, (limit,)).fetchall()
                except sqlite3.Error as exc:
                    self._failed(f"{type(exc).__name__}: {exc}")
            out = []
            for item_id, key, incident, sink, payload, attempts in rows:
                mark = self._unsaved.marks.get(key)
                if mark is not None and mark.status != "pending":
                    continue  # delivered already; the file has not been told yet
                try:
                    decoded = json.loads(payload)
                    if not isinstance(decoded, dict):
                        raise ValueError(f"payload is {type(decoded).__name__}, expected an object")
                except ValueError as exc:
                    self._poisoned(item_id, key, attempts, f"payload is not JSON: {exc}")
                    continue
                self._keys[item_id] = key
                out.append(
                    Item(item_id, key, incident, sink, decoded, attempts + (mark.attempts if mark else 0))
                )
            for key, (mem_id, incident, sink, payload, _, attempts) in self._unsaved.items.items():
                out.append(Item(mem_id, key, incident, sink, payload, attempts))
        return out[:limit]

    def _poisoned(self, item_id: int, key: str, attempts: int, error: str) -> None:
        """A row no sink can ever read: counted as an attempt each time it is met, quarantined after a few."""
        status = "quarantined" if attempts + 1 >= QUARANTINE_AFTER else "pending"
        self._keys[item_id] = key
        self._mark(item_id, status, error)
        if status == "quarantined":
            self.quarantined_total += 1
            log.error("notification %s quarantined after %d attempts: %s", key, attempts + 1, error)

    def thread(self, incident: str, sink: str) -> tuple[str, str] | None:
        """(channel id, root ts) of an incident's root message, if posted."""
        with self._lock:
            held = self._unsaved.threads.get((incident, sink))
            if held is not None or self._db is None:
                return held
            try:
                row = self._db.execute(
                    "SELECT channel, ts FROM threads WHERE incident=? AND sink=?", (incident, sink)
                ).fetchone()
            except sqlite3.Error:
                return None
        return (row[0], row[1]) if row else None

    def load_state(self) -> JsonObject | None:
        """The lifecycle state saved by the last commit() (read when the file was opened)."""
        with self._lock:
            return self._unsaved.state or self._state

    def stats(self) -> OutboxStats:
        """Counts per status, the last (redacted) error and the disk's health, for /api and `notify status`."""
        with self._lock:
            counts, last_error = status_counts(self._db) if self._db is not None else ({}, "")
            held = len(self._unsaved.items)
            return OutboxStats(
                pending=counts.get("pending", 0) + held,
                done=counts.get("done", 0),
                dead=counts.get("dead", 0),
                quarantined=counts.get("quarantined", 0),
                last_error=last_error,
                unsaved=held,
                write_failures_total=self.write_failures_total,
                quarantined_total=self.quarantined_total,
                write_error=self.last_write_error if self.failing_since is not None else "",
                failing_since=self.failing_since,
            )

    # -- marks -------------------------------------------------------------------------------------------------
    def done(self, item_id: int) -> None:
        """Mark delivered."""
        self._set(item_id, "done")

    def failed(self, item_id: int, error: str) -> None:
        """Record a transient failure (stays pending); error must already be redacted."""
        self._set(item_id, "pending", error)

    def dead(self, item_id: int, error: str) -> None:
        """Give up on an item Slack rejected for good (bad channel, invalid blocks…)."""
        self._set(item_id, "dead", error)

    def quarantine(self, item_id: int, error: str) -> None:
        """Put aside an item no sink can render (kept in the file for a post-mortem), so it blocks nothing."""
        self._set(item_id, "quarantined", error)
        with self._lock:
            self.quarantined_total += 1

    def set_thread(self, incident: str, sink: str, channel: str, ts: str) -> None:
        """Remember an incident's root message so later updates (even after a restart) thread under it."""
        with self._lock:
            self._unsaved.threads[(incident, sink)] = (channel, ts)
            self._flush()

    def prune(self, older_than: float) -> None:
        """Drop delivered rows older than a cutoff (unix seconds) so the file stays small."""
        with self._lock:
            if self._db is None or self._unsaved:
                return  # not while the disk refuses writes
            try:
                self._db.execute(
                    "DELETE FROM outbox WHERE status != 'pending' AND done_at < ?", (older_than,)
                )
            except sqlite3.Error as exc:
                self._failed(f"{type(exc).__name__}: {exc}")

    def retry_writes(self) -> bool:
        """Try to write what is held in memory now if a retry is due; True when nothing is left unsaved."""
        with self._lock:
            return self._flush()

    def start_over(self, why: str) -> None:
        """The file's content is unusable (its state has the wrong shape): move it aside and open a fresh one."""
        with self._lock:
            if self._db is not None:
                self._db.close()
            start_over(self.path, why)
            self._db, self._state, error = open_outbox(self.path)
            if self._db is None:
                self._failed(error)

    def close(self) -> None:
        """Write what is held if the disk takes it now, then close the database."""
        with self._lock:
            self._retry_at = 0.0
            self._flush()
            if self._db is not None:
                self._db.close()
                self._db = None
