"""Opening the outbox's sqlite file: a corrupt one is moved aside for a fresh start, a disk fault is reported."""

from __future__ import annotations

import json
import logging
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvdoctor.diskfiles import set_aside
from kvdoctor.errors import KvdoctorError
from kvdoctor.jsondoc import JsonObject

log = logging.getLogger("kvdoctor.notify.outbox")

SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT UNIQUE NOT NULL, incident TEXT NOT NULL,
    sink TEXT NOT NULL, payload TEXT NOT NULL, created REAL NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT 'pending', last_error TEXT NOT NULL DEFAULT '', done_at REAL);
CREATE TABLE IF NOT EXISTS threads (
    incident TEXT NOT NULL, sink TEXT NOT NULL, channel TEXT NOT NULL, ts TEXT NOT NULL,
    PRIMARY KEY (incident, sink));
CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v TEXT NOT NULL);
"""
# What sqlite says of a file that is not, or no longer, a database it wrote (the others are I/O or disk faults).
CORRUPT = {"SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_FORMAT"}


@dataclass
class Mark:
    """A delivery outcome not yet written: its status, attempts to add, last error."""

    status: str
    attempts: int
    error: str
    at: float | None


@dataclass
class Unsaved:
    """What the disk has not taken yet."""

    items: dict[str, list[Any]] = field(
        default_factory=dict
    )  # key → [id, incident, sink, payload, created, attempts]
    marks: dict[str, Mark] = field(default_factory=dict)
    threads: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    state: JsonObject | None = None

    def __bool__(self) -> bool:
        return bool(self.items or self.marks or self.threads or self.state is not None)


def write(db: sqlite3.Connection, u: Unsaved) -> None:
    """Write what is unsaved in one transaction (the caller rolls back if it raises)."""
    db.execute("BEGIN IMMEDIATE")
    for key, (_, incident, sink, payload, created, attempts) in u.items.items():
        db.execute(
            "INSERT OR IGNORE INTO outbox (key, incident, sink, payload, created, attempts) "
            "VALUES (?,?,?,?,?,?)",
            (key, incident, sink, json.dumps(payload), created, attempts),
        )
    for key, m in u.marks.items():
        db.execute(
            "UPDATE outbox SET status=?, attempts=attempts+?, last_error=?, done_at=? WHERE key=?",
            (m.status, m.attempts, m.error, m.at, key),
        )
    for (incident, sink), (channel, ts) in u.threads.items():
        db.execute(
            "INSERT OR REPLACE INTO threads (incident, sink, channel, ts) VALUES (?,?,?,?)",
            (incident, sink, channel, ts),
        )
    if u.state is not None:
        db.execute("INSERT OR REPLACE INTO kv (k, v) VALUES ('lifecycle', ?)", (json.dumps(u.state),))
    db.execute("COMMIT")


class Corrupt(KvdoctorError):
    """The file is not a usable outbox; the message says why."""


def is_corrupt(exc: sqlite3.Error) -> bool:
    """True for an error that says the file is damaged, False for a disk that is full, read-only or failing."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.split("_(")[0] in CORRUPT or "malformed" in str(exc) or "not a database" in str(exc)


def _connect(path: Path) -> tuple[sqlite3.Connection, JsonObject | None]:
    db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        # FULL: every commit is fsync'd, so an enqueued notification survives a crash or power loss.
        db.execute("PRAGMA synchronous=FULL")
        check = db.execute("PRAGMA quick_check").fetchall()
        if check != [("ok",)]:
            raise Corrupt("quick_check: " + "; ".join(str(r[0]) for r in check[:3]))
        db.executescript(SCHEMA)
        row = db.execute("SELECT v FROM kv WHERE k='lifecycle'").fetchone()
        state = None
        if row is not None:
            try:
                state = json.loads(row[0])
            except ValueError as exc:
                raise Corrupt(f"its lifecycle state is not JSON ({exc})") from exc
            if not isinstance(state, dict):
                raise Corrupt(f"its lifecycle state is {type(state).__name__}, expected an object")
        return db, state
    except BaseException:
        db.close()
        raise


def open_outbox(path: Path) -> tuple[sqlite3.Connection | None, JsonObject | None, str]:
    """(connection, saved lifecycle state, error): a corrupt file is set aside and replaced by a fresh one; on a
    disk fault the connection is None and error says what the disk answered."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            db, state = _connect(path)
        except (Corrupt, sqlite3.DatabaseError) as exc:
            if isinstance(exc, sqlite3.Error) and not is_corrupt(exc):
                raise
            start_over(path, str(exc))
            db, state = _connect(path)
        return db, state, ""
    except (OSError, sqlite3.Error, Corrupt) as exc:
        return None, None, f"{type(exc).__name__}: {exc}"


def start_over(path: Path, why: str) -> None:
    """Move a corrupt outbox (and its -wal/-shm) aside, saying so once, so the next open starts fresh."""
    aside = set_aside(path)
    kept = f"moved to {aside}" if aside else "left in place (it cannot be renamed)"
    log.warning("notification outbox %s is corrupt: %s; %s, starting fresh", path, why, kept)


PENDING = (
    "SELECT id, key, incident, sink, payload, attempts FROM outbox WHERE status='pending' ORDER BY id LIMIT ?"
)


def status_counts(db: sqlite3.Connection) -> tuple[dict[str, int], str]:
    """Rows per status and the newest recorded (redacted) error; empty when the file cannot be read."""
    try:
        counts = dict(db.execute("SELECT status, COUNT(*) FROM outbox GROUP BY status").fetchall())
        row = db.execute(
            "SELECT last_error FROM outbox WHERE last_error != '' ORDER BY id DESC LIMIT 1"
        ).fetchone()
    except sqlite3.Error:
        return {}, ""
    return counts, str(row[0]) if row else ""
