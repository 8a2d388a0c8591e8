"""End to end against a local fake Slack: one root per incident, threaded updates, resolve, restarts, outages."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvdoctor.notify import Notifier, parse_notify_config
from kvdoctor.notify.config import NotifyConfig
from tests.notify_support.diagnoses import MODEL, TARGET, kv_incident
from tests.notify_support.fake_slack import CHANNEL_ID, FakeSlack, wait_for

TOKEN = "xoxb-" + "1234567890-1234567890123-abcdefghijklmnopqrstuvwx"


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack()
    yield fake
    fake.close()


def bot_config(fake: FakeSlack, **extra: object) -> NotifyConfig:
    section = {
        "for": "1m",
        "resolve_after": "1m",
        "retry": {"initial": 0.05, "max": 0.2},
        "slack": {"timeout": 1, "retries": 1},
        "status_page_url": "http://kvdoctor.local:9400",
        "grafana_url": "http://grafana.local/d/kvdoctor",
        **extra,
    }
    env = {
        "KVDOCTOR_SLACK_TOKEN": TOKEN,
        "KVDOCTOR_SLACK_CHANNEL": "#vllm-alerts",
        "KVDOCTOR_SLACK_BASE_URL": fake.api_url,
    }
    cfg, errors = parse_notify_config(section, env)
    assert errors == []
    return cfg


def notifier(cfg: NotifyConfig, state: Path) -> Notifier:
    return Notifier(cfg, state, slack_retry_backoff=0.01)


def run(n: Notifier, diagnoses: list, flush: bool = True) -> None:
    for d in diagnoses:
        n.observe([d], d.t)
    if flush:
        assert n.flush(10)


def posts(fake: FakeSlack) -> list:
    return fake.delivered("/chat.postMessage")


def check_incident(fake: FakeSlack) -> None:
    """Exactly one root with evidence and flags, a few thread replies, one chat.update resolving the root."""
    msgs = posts(fake)
    roots = [r for r in msgs if "thread_ts" not in r.body]
    assert len(roots) == 1
    root = roots[0]
    assert root.body["channel"] == "#vllm-alerts"
    assert root.headers["Authorization"] == f"Bearer {TOKEN}"
    blob = str(root.body["blocks"])
    assert "KV cache full" in root.body["blocks"][0]["text"]["text"] and TARGET in blob and MODEL in blob
    for shown in (
        "KV usage, 1m peak",
        "95 %",
        "Running / cap",
        "42 / 256",
        "Waiting",
        "0.4/s",
        "1.2 s",
        "45 ms",
        "31 %",
    ):
        assert shown in blob, shown
    assert (
        "--gpu-memory-utilization 0.95" in blob
        and "+18 % KV capacity" in blob
        and "--max-num-seqs 48" in blob
    )
    assert "http://kvdoctor.local:9400/" in blob and "http://grafana.local/d/kvdoctor?" in blob
    root_ts = fake.requests[fake.requests.index(root)].response["ts"]
    replies = [r for r in msgs if r.body.get("thread_ts") == root_ts]
    assert len(replies) == len(msgs) - 1
    assert 2 <= len(replies) <= 6, [r.body["text"] for r in replies]
    assert any("preemption_storm started" in r.body["text"] for r in replies)
    assert any("severity warning → critical" in r.body["text"] for r in replies)
    updates = fake.delivered("/chat.update")
    assert len(updates) == 1
    up = updates[0].body
    assert up["channel"] == CHANNEL_ID and up["ts"] == root_ts
    assert "Resolved" in up["text"] and "lasted 5m 45s" in up["text"]
    assert "Resolved" in replies[-1].body["text"]


def test_bot_token_incident_one_root_thread_updates_one_resolution(slack: FakeSlack, tmp_path: Path) -> None:
    n = notifier(bot_config(slack), tmp_path)
    run(n, kv_incident())
    n.close()
    check_incident(slack)
    texts = [r.body["text"] for r in posts(slack)]
    assert texts[0].startswith("KV cache full on vllm-a:8000")


def test_restart_in_the_middle_loses_and_duplicates_nothing(slack: FakeSlack, tmp_path: Path) -> None:
    seq = kv_incident()
    cfg = bot_config(slack)
    for cut in (13, 20, 35):
        slack.requests.clear()
        state = tmp_path / f"cut{cut}"
        first = notifier(cfg, state)
        run(first, seq[:cut], flush=False)
        first.close()  # items may still be owed: they are on disk
        second = notifier(cfg, state)
        run(second, seq[cut:])
        second.close()
        check_incident(slack)


def test_slack_outage_then_rate_limit_delivers_everything_once_in_order(
    slack: FakeSlack, tmp_path: Path
) -> None:
    seq = kv_incident()
    ok = FakeSlack()
    n = notifier(bot_config(ok), tmp_path / "ok")
    run(n, seq)
    n.close()
    expected = [(r.path, r.body.get("text")) for r in ok.delivered()]
    ok.close()

    slack.set_mode("500")
    n = notifier(bot_config(slack), tmp_path / "outage")
    run(n, seq, flush=False)
    assert wait_for(lambda: len(slack.requests) >= 6)
    assert not slack.delivered()
    slack.fail("429", 2)
    slack.set_mode("ok")
    assert n.flush(15)
    n.close()
    assert sum(r.status == 429 for r in slack.requests) == 2
    assert [(r.path, r.body.get("text")) for r in slack.delivered()] == expected
    check_incident(slack)


def test_hanging_slack_times_out_and_is_retried(slack: FakeSlack, tmp_path: Path) -> None:
    slack.fail("hang", 1)
    slack.hang_for = 1.5
    n = notifier(bot_config(slack, **{"slack": {"timeout": 1, "retries": 0}}), tmp_path)
    run(n, kv_incident()[:14], flush=True)
    n.close()
    assert len([r for r in posts(slack) if "thread_ts" not in r.body]) == 1


def test_permanent_error_is_dropped_not_retried_forever(slack: FakeSlack, tmp_path: Path) -> None:
    slack.fail("error:channel_not_found", 1)
    n = notifier(bot_config(slack), tmp_path)
    run(n, kv_incident()[:14])
    st = n.status().outbox
    n.close()
    assert st.dead == 1 and st.pending == 0 and "channel_not_found" in st.last_error


def test_webhook_mode_sends_firing_and_resolved(slack: FakeSlack, tmp_path: Path) -> None:
    url = slack.webhook_url()
    cfg, errors = parse_notify_config({"retry": {"initial": 0.05}}, {"KVDOCTOR_SLACK_WEBHOOK_URL": url})
    assert errors == []
    n = notifier(cfg, tmp_path)
    run(n, kv_incident())
    n.close()
    got = slack.delivered("/services/T0AAAAAAA/B0BBBBBBB/" + "c" * 24)
    assert [r.body["text"].split(":")[0] for r in got] == ["KV cache full on vllm-a", "Resolved"]
    assert "--gpu-memory-utilization 0.95" in str(got[0].body["blocks"])
    assert "lasted 5m 45s" in got[1].body["text"]


def test_silence_suppresses_slack(slack: FakeSlack, tmp_path: Path) -> None:
    silence = [{"matchers": ['target=~"vllm-.*"', 'finding!="target_down"'], "comment": "maintenance"}]
    n = notifier(bot_config(slack, silences=silence), tmp_path)
    run(n, kv_incident())
    n.close()
    assert slack.requests == []


def test_repeat_after_four_hours_is_broadcast_in_thread(slack: FakeSlack, tmp_path: Path) -> None:
    seq = kv_incident(bound=24, healthy_after=0)
    n = notifier(bot_config(slack, update_interval="10h"), tmp_path)
    run(n, seq)
    last = seq[-1]
    for _k in range(1, 4 * 60 * 4 + 2):  # four more hours at 15 s
        last.t += 15
        n.observe([last], last.t)
    assert n.flush(10)
    n.close()
    repeats = [r for r in posts(slack) if r.body.get("reply_broadcast")]
    assert len(repeats) == 1 and "Still firing" in str(repeats[0].body["blocks"])


def test_secrets_never_logged(slack: FakeSlack, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = slack.webhook_url(secret="s3cretS3cretS3cretS3cret")
    cfg, _ = parse_notify_config(
        {"retry": {"initial": 0.05}, "slack": {"retries": 1}}, {"KVDOCTOR_SLACK_WEBHOOK_URL": url}
    )
    slack.fail("500", 3)
    with caplog.at_level(logging.DEBUG):
        n = notifier(cfg, tmp_path)
        run(n, kv_incident()[:14])
        status = str(n.status())
        n.close()
    text = caplog.text + repr(cfg) + str(cfg) + status
    assert "s3cretS3cret" not in text and "/services/T0AAAAAAA" not in text
    assert "url: REDACTED" in caplog.text  # slack-sdk's own debug log, redacted
