"""Durable outbox (sqlite3, fsync'd): owed notifications, incident → Slack root message, lifecycle state."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT UNIQUE NOT NULL, incident TEXT NOT NULL,
    sink TEXT NOT NULL, payload TEXT NOT NULL, created REAL NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT 'pending', last_error TEXT NOT NULL DEFAULT '', done_at REAL);
CREATE TABLE IF NOT EXISTS threads (
    incident TEXT NOT NULL, sink TEXT NOT NULL, channel TEXT NOT NULL, ts TEXT NOT NULL,
    PRIMARY KEY (incident, sink));
CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v TEXT NOT NULL);
"""


@dataclass(frozen=True)
class Item:
    """One owed delivery of one event to one sink; key = sink:incident#seq makes it idempotent."""

    id: int
    key: str
    incident: str
    sink: str
    payload: dict[str, Any]
    attempts: int = 0


class Outbox:
    """A small sqlite3 store shared by the evaluation thread (enqueue) and the delivery worker."""

    def __init__(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        # FULL: every commit is fsync'd, so an enqueued notification survives a crash or power loss.
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def commit(self, items: list[tuple[str, str, str, dict[str, Any]]], state: dict[str, Any] | None) -> int:
        """Atomically enqueue (key, incident, sink, payload) items and save lifecycle state; returns new rows."""
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                added = 0
                for key, incident, sink, payload in items:
                    cur = self._db.execute(
                        "INSERT OR IGNORE INTO outbox (key, incident, sink, payload, created) VALUES (?,?,?,?,?)",
                        (key, incident, sink, json.dumps(payload), now),
                    )
                    added += cur.rowcount
                if state is not None:
                    self._db.execute(
                        "INSERT OR REPLACE INTO kv (k, v) VALUES ('lifecycle', ?)", (json.dumps(state),)
                    )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return added

    def pending(self, limit: int = 500) -> list[Item]:
        """Undelivered items, oldest first (the worker keeps per-incident order)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, key, incident, sink, payload, attempts FROM outbox WHERE status='pending' ORDER BY id LIMIT ?",
                (limit,),
            ).fetchall()
        return [Item(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in rows]

    def _set(self, item_id: int, status: str, error: str = "") -> None:
        with self._lock:
            self._db.execute(
                "UPDATE outbox SET status=?, attempts=attempts+1, last_error=?, done_at=? WHERE id=?",
                (status, error, time.time() if status != "pending" else None, item_id),
            )

    def done(self, item_id: int) -> None:
        """Mark delivered."""
        self._set(item_id, "done")

    def failed(self, item_id: int, error: str) -> None:
        """Record a transient failure (stays pending); error must already be redacted."""
        self._set(item_id, "pending", error)

    def dead(self, item_id: int, error: str) -> None:
        """Give up on an item Slack rejected for good (bad channel, invalid blocks…)."""
        self._set(item_id, "dead", error)

    def thread(self, incident: str, sink: str) -> tuple[str, str] | None:
        """(channel id, root ts) of an incident's root message, if posted."""
        with self._lock:
            row = self._db.execute(
                "SELECT channel, ts FROM threads WHERE incident=? AND sink=?", (incident, sink)
            ).fetchone()
        return (row[0], row[1]) if row else None

    def set_thread(self, incident: str, sink: str, channel: str, ts: str) -> None:
        """Remember an incident's root message so later updates (even after a restart) thread under it."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO threads (incident, sink, channel, ts) VALUES (?,?,?,?)",
                (incident, sink, channel, ts),
            )

    def load_state(self) -> dict[str, Any] | None:
        """The lifecycle state saved by the last commit()."""
        with self._lock:
            row = self._db.execute("SELECT v FROM kv WHERE k='lifecycle'").fetchone()
        return json.loads(row[0]) if row else None

    def stats(self) -> dict[str, Any]:
        """Counts per status and the last (redacted) error, for /api and `kvdoctor notify status`."""
        with self._lock:
            counts = dict(self._db.execute("SELECT status, COUNT(*) FROM outbox GROUP BY status").fetchall())
            err = self._db.execute(
                "SELECT last_error FROM outbox WHERE last_error != '' ORDER BY id DESC LIMIT 1"
            ).fetchone()
        return {"pending": counts.get("pending", 0), "done": counts.get("done", 0),
                "dead": counts.get("dead", 0), "last_error": err[0] if err else ""}  # fmt: skip

    def prune(self, older_than: float) -> None:
        """Drop delivered rows older than a cutoff (unix seconds) so the file stays small."""
        with self._lock:
            self._db.execute("DELETE FROM outbox WHERE status != 'pending' AND done_at < ?", (older_than,))

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()
