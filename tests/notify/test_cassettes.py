"""vcrpy cassettes of the bot-token flow (recorded against the local fake Slack, scrubbed), and the secret guard."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdoctor.notify import Notifier, parse_notify_config
from tests.notify_support.cassettes import (
    RECORD,
    find_secrets,
    recorder,
)
from tests.notify_support.diagnoses import kv_incident
from tests.notify_support.fake_slack import FakeSlack

CASSETTES = Path(__file__).parents[1] / "cassettes"
CASSETTE = CASSETTES / "test_notify_cassettes" / "bot_token_incident.yaml"
# A realistic-looking token, so the scrubbing is proven on the real pattern.
TOKEN = "xoxb-" + "2468013579-1357924680123-QwErTyUiOpAsDfGhJkLzXcVb"


def drive(base_url: str, state: Path) -> None:
    """The healthy → KV-bound → healthy flow, delivered synchronously after every cycle."""
    env = {
        "KVDOCTOR_SLACK_TOKEN": TOKEN,
        "KVDOCTOR_SLACK_CHANNEL": "C0FAKE0001",
        "KVDOCTOR_SLACK_BASE_URL": base_url,
    }
    cfg, errors = parse_notify_config({"slack": {"retries": 0}}, env)
    assert errors == []
    n = Notifier(cfg, state, start=False)
    for d in kv_incident():
        n.observe([d], d.t)
        n.worker.run_once()
    stats = n.status().outbox
    n.close()
    assert stats.pending == 0 and stats.dead == 0


def test_bot_token_flow_replays_from_scrubbed_cassette(tmp_path: Path) -> None:
    if RECORD:
        fake = FakeSlack()
        try:
            with recorder.use_cassette(str(CASSETTE)):
                drive(fake.api_url, tmp_path)
        finally:
            fake.close()
    elif not CASSETTE.exists():
        pytest.skip("cassette not recorded (KVDOCTOR_RECORD_CASSETTES=1)")
    with recorder.use_cassette(str(CASSETTE), record_mode="none", allow_playback_repeats=False) as cass:
        drive(
            "http://127.0.0.1:9/api/", tmp_path / "replay"
        )  # port 9: nothing listens; only the cassette answers
        paths = [r.path for r in cass.requests]
        assert cass.all_played
    assert paths.count("/api/chat.update") == 1
    assert 3 <= paths.count("/api/chat.postMessage") <= 8


def test_no_secrets_in_cassettes() -> None:
    assert find_secrets(CASSETTES) == []


def test_secret_guard_catches_real_looking_values(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(f"headers:\n  Authorization:\n  - Bearer {TOKEN}\n")
    (tmp_path / "b.yaml").write_text("uri: https://hooks.slack.com/services/" + "T0AAAAAAA/B0BBBBBBB/xyz\n")
    (tmp_path / "c.yaml").write_text("uri: http://127.0.0.1:1/services/T0AAAAAAA/B0BBBBBBB/xyz\n")
    (tmp_path / "ok.yaml").write_text("uri: http://127.0.0.1:1/services/T000/B000/REDACTED\n")
    assert sorted({h.split(":")[0] for h in find_secrets(tmp_path)}) == ["a.yaml", "b.yaml", "c.yaml"]
