"""A corrupt notify.sqlite is a fresh start, said once; a poison outbox row is quarantined and blocks nothing."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvdoctor.notify import Notifier, parse_notify_config
from kvdoctor.notify.config import NotifyConfig
from kvdoctor.notify.outbox import QUARANTINE_AFTER
from kvdoctor.status.exposition import storage_families
from tests.notify_support.diagnoses import kv_incident
from tests.notify_support.fake_slack import FakeSlack

TOKEN = "xoxb-" + "1234567890-1234567890123-abcdefghijklmnopqrstuvwx"


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack()
    yield fake
    fake.close()


def config(fake: FakeSlack) -> NotifyConfig:
    section = {
        "for": "1m",
        "resolve_after": "1m",
        "retry": {"initial": 0.05, "max": 0.2},
        "slack": {"timeout": 1, "retries": 0},
    }
    env = {
        "KVDOCTOR_SLACK_TOKEN": TOKEN,
        "KVDOCTOR_SLACK_CHANNEL": "#vllm",
        "KVDOCTOR_SLACK_BASE_URL": fake.api_url,
    }
    cfg, errors = parse_notify_config(section, env)
    assert errors == []
    return cfg


def a_used_outbox(fake: FakeSlack, state: Path) -> Path:
    """An outbox that has seen one whole incident (rows, a thread, lifecycle state)."""
    n = Notifier(config(fake), state, slack_retry_backoff=0.01)
    for d in kv_incident():
        n.observe([d], d.t)
    assert n.flush(10)
    n.close()
    return state / "notify.sqlite"


def _truncate(path: Path) -> str:
    data = path.read_bytes()
    assert len(data) > 4096 * 2
    path.write_bytes(data[: len(data) // 2 + 100])
    return "malformed"


def _lifecycle(value: str) -> object:
    def spoil(path: Path) -> str:
        db = sqlite3.connect(path)
        db.execute("UPDATE kv SET v=? WHERE k='lifecycle'", (value,))
        db.commit()
        db.close()
        return "lifecycle state"

    return spoil


SPOILS = {
    "not a database": lambda p: (p.write_bytes(b"hello, I am not sqlite " * 200), "not a database")[1],
    "truncated": _truncate,
    "state row not JSON": _lifecycle("{not json"),
    "state row a list": _lifecycle("[1, 2]"),
    "state row of the wrong shape": _lifecycle(json.dumps({"version": 1, "alerts": 5})),
}


@pytest.mark.parametrize("kind", SPOILS)
def test_a_corrupt_outbox_is_moved_aside_and_notifications_start_fresh(kind, slack, tmp_path, caplog):
    path = a_used_outbox(slack, tmp_path)
    for side in ("-wal", "-shm"):
        (tmp_path / f"notify.sqlite{side}").unlink(missing_ok=True)  # closed cleanly: checkpointed already
    why = SPOILS[kind](path)  # type: ignore[operator]
    caplog.set_level(logging.WARNING)
    slack.requests.clear()
    n = Notifier(config(slack), tmp_path, slack_retry_backoff=0.01)
    warnings = [
        r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "outbox" in r.getMessage()
    ]
    assert len(warnings) == 1, warnings
    assert str(path) in warnings[0] and why in warnings[0] and "starting fresh" in warnings[0]
    assert len(list(tmp_path.glob("notify.sqlite.corrupt-*"))) == 1
    assert n.lifecycle.groups == {} and n.outbox.stats().pending == 0
    for d in kv_incident():  # and it works: a new incident is delivered in full
        n.observe([d], d.t)
    assert n.flush(10)
    n.close()
    assert len([r for r in slack.delivered("/chat.postMessage") if "thread_ts" not in r.body]) == 1


@pytest.mark.parametrize("payload", ["not json {", json.dumps({"event": {"kind": 5}}), "[]"])
def test_a_poison_row_is_quarantined_after_some_attempts_and_blocks_nothing(payload, slack, tmp_path):
    n = Notifier(config(slack), tmp_path, slack_retry_backoff=0.01, start=False)
    seq = kv_incident()
    n.observe([seq[0]], seq[0].t)
    db = sqlite3.connect(tmp_path / "notify.sqlite")
    db.execute(
        "INSERT INTO outbox (key, incident, sink, payload, created) VALUES (?,?,?,?,0)",
        ("slack:poison#0", "target=vllm-a:8000@1", "slack", payload),
    )
    db.commit()
    db.close()
    for d in seq[1:]:
        n.observe([d], d.t)
    for _ in range(QUARANTINE_AFTER + 2):
        n.worker.run_once()
    stats = n.outbox.stats()
    assert stats.pending == 0 and stats.quarantined == 1 and stats.quarantined_total == 1, stats
    roots = [r for r in slack.delivered("/chat.postMessage") if "thread_ts" not in r.body]
    assert len(roots) == 1 and len(slack.delivered("/chat.update")) == 1  # the real incident, all of it
    row = (
        sqlite3.connect(tmp_path / "notify.sqlite")
        .execute("SELECT status, attempts, last_error FROM outbox WHERE key='slack:poison#0'")
        .fetchone()
    )
    assert (
        row[0] == "quarantined" and row[1] == QUARANTINE_AFTER and row[2]
    )  # kept, with why, for a post-mortem
    families = {f.name: f for f in storage_families({"outbox": stats})}
    assert families["kvdoctor_outbox_quarantined"].samples[0].value == 1.0
    n.close()
