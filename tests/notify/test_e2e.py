"""End to end on real vLLM recordings: `kvdoctor replay --notify` through the real pipeline to a fake Slack."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import requests

from kvdoctor.cli import main
from tests.notify_support.alertmanager import running_alertmanager
from tests.notify_support.cassettes import RECORD, find_secrets, recorder
from tests.notify_support.fake_slack import FakeSlack, Request
from tests.notify_support.http_recorder import Recorder
from tests.notify_support.recordings import concat, split

pytestmark = pytest.mark.usefixtures(
    "shared_predictions"
)  # each replay of `incident` asks the same questions

TOKEN = "xoxb-" + "3141592653-5897932384626-PiPiPiPiPiPiPiPiPiPiPiPi"
LIMITS_ELSEWHERE = ("Batch cap hit", "Compute bound")
RESOLVED = re.compile(r"Resolved: KV cache full on gpu-1 · tiny \(lasted \d+m( \d+s)?\)")


Spans = list[tuple[float, float]]


@pytest.fixture(scope="module")
def incident(shared_032: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Spans]:
    """One target, gpu-1: healthy → KV-bound → healthy (two healthy runs, so the incident can resolve)."""
    parts = ["healthy", "kv_bound", "healthy", "healthy_closed_c2"]
    out = tmp_path_factory.mktemp("rec") / "gpu-1.jsonl.gz"
    return out, concat([shared_032 / f"{p}.jsonl.gz" for p in parts], out)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("TOKEN", "WEBHOOK_URL", "CHANNEL", "BASE_URL"):
        monkeypatch.delenv(f"KVDOCTOR_SLACK_{var}", raising=False)


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack(retry_after=1, hang_for=3.0)
    yield fake
    fake.close()


def bot_config(tmp_path: Path, extra: str = "") -> str:
    """Bot-token config; token, channel and Slack base URL come from the environment."""
    path = tmp_path / "kvdoctor.yml"
    path.write_text(f"notify:\n  slack: {{retries: 2{extra}}}\n")
    return str(path)


def replay(rec: Path, cfg: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    rc = main(["replay", str(rec), "--notify", "--config", cfg, *extra])
    out, err = capsys.readouterr()
    assert TOKEN not in out + err and "/services/T" not in out + err
    return rc, out + err


def bot_env(monkeypatch: pytest.MonkeyPatch, slack: FakeSlack) -> None:
    monkeypatch.setenv("KVDOCTOR_SLACK_TOKEN", TOKEN)
    monkeypatch.setenv("KVDOCTOR_SLACK_CHANNEL", "#vllm-alerts")
    monkeypatch.setenv("KVDOCTOR_SLACK_BASE_URL", slack.api_url)


def text_of(r: Request) -> str:
    return str(r.body.get("text", "")) + str(r.body.get("blocks", ""))


def assert_one_incident(slack: FakeSlack) -> tuple[Request, list[Request], Request]:
    """Exactly one root naming the KV-cache limit with evidence and flags, a few replies, one resolution."""
    posts = slack.delivered("/chat.postMessage")
    roots = [r for r in posts if "thread_ts" not in r.body]
    updates = slack.delivered("/chat.update")
    assert len(roots) == 1, [r.body["text"] for r in roots]
    assert len(updates) == 1, [r.body["text"] for r in updates]
    root, resolved = roots[0], updates[0]
    ts = root.response["ts"]
    replies = [r for r in posts if r is not root]
    assert all(r.body["thread_ts"] == ts for r in replies)
    assert 1 <= len(replies) <= 4
    header = root.body["blocks"][0]["text"]["text"]
    assert header == "KV cache full · gpu-1 · tiny" and root.body["channel"] == "#vllm-alerts"
    fields = " ".join(f["text"] for b in root.body["blocks"] for f in b.get("fields", []))
    for label in ("KV usage", "Waiting", "Preemptions", "TTFT p95"):
        assert f"*{label}" in fields, fields
    assert "`--kv-cache-dtype`" in text_of(root) and "`--data-parallel-size`" in text_of(root)
    assert resolved.body["ts"] == ts and resolved.body["channel"] == root.response["channel"]
    assert RESOLVED.fullmatch(resolved.body["text"])
    assert resolved.body["blocks"][0]["text"]["text"] == "✅ Resolved: KV cache full · gpu-1 · tiny"
    assert "numbers from when it fired" in text_of(resolved)
    assert "*KV usage, 1m peak*\\n100 %" in text_of(resolved)
    assert replies[-1].body["text"] == resolved.body["text"]  # the resolution also lands in the thread
    assert not any(limit in text_of(r) for r in slack.requests for limit in LIMITS_ELSEWHERE)
    return root, replies, resolved


def test_bot_token_real_recording_one_root_updates_one_resolution(
    incident: tuple[Path, list],
    slack: FakeSlack,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bot_env(monkeypatch, slack)
    rc, output = replay(incident[0], bot_config(tmp_path), capsys)
    assert rc == 0, output
    assert "kv_cache (was healthy)" in output and "healthy (was kv_cache)" in output
    assert "notify: Slack: 4 delivered, 0 pending, 0 rejected" in output
    assert_one_incident(slack)
    assert all(r.status == 200 for r in slack.requests)
    assert slack.requests[0].headers["Authorization"] == f"Bearer {TOKEN}"


def test_webhook_one_firing_one_resolved(
    incident: tuple[Path, list], slack: FakeSlack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "kvdoctor.yml"
    cfg.write_text(f"notify:\n  slack: {{webhook_url: '{slack.webhook_url()}'}}\n")
    rc, output = replay(incident[0], str(cfg), capsys)
    assert rc == 0, output
    firing, resolved = slack.requests
    assert firing.path == resolved.path == "/services/T0AAAAAAA/B0BBBBBBB/" + "c" * 24
    assert firing.body["blocks"][0]["text"]["text"] == "KV cache full · gpu-1 · tiny"
    assert "`--kv-cache-dtype`" in text_of(firing) and "*Waiting*" in text_of(firing)
    assert RESOLVED.fullmatch(resolved.body["text"])


def test_restart_in_the_middle_loses_and_duplicates_nothing(
    incident: tuple[Path, list],
    slack: FakeSlack,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bot_env(monkeypatch, slack)
    rec, spans = incident
    kv_to = spans[1][1]
    first, second = tmp_path / "a" / "gpu-1.jsonl.gz", tmp_path / "b" / "gpu-1.jsonl.gz"
    first.parent.mkdir()
    second.parent.mkdir()
    split(rec, kv_to - 30, first, second)  # kvdoctor stops mid-incident, after the root went out
    state, cfg = str(tmp_path / "state"), bot_config(tmp_path)
    rc, output = replay(first, cfg, capsys, "--notify-state", state)
    assert rc == 0, output
    assert len(slack.delivered("/chat.postMessage")) >= 1 and not slack.delivered("/chat.update")
    rc, output = replay(second, cfg, capsys, "--notify-state", state)
    assert rc == 0, output
    root, replies, _ = assert_one_incident(slack)
    assert slack.requests[0] is root and not any("started" in r.body["text"] for r in replies[-2:])


@pytest.mark.parametrize("retries", [2, 0], ids=["slack-sdk-retries", "outbox-retries"])
def test_slack_outage_still_one_root_and_one_resolution(
    incident: tuple[Path, list],
    slack: FakeSlack,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    retries: int,
) -> None:
    bot_env(monkeypatch, slack)
    slack.fail("500", 2)
    slack.fail("429", 2)
    slack.fail("hang", 1)  # the client times out; the fake never processes it
    cfg = tmp_path / "kvdoctor.yml"
    cfg.write_text(
        f"notify:\n  slack: {{retries: {retries}, timeout: 1s}}\n  retry: {{initial: 0.2, max: 1}}\n"
    )
    rc, output = replay(incident[0], str(cfg), capsys)
    assert rc == 0, output
    assert [r.status for r in slack.requests[:4]] == [500, 500, 429, 429]
    assert slack.requests[4].status in (0, 504)  # 0: still hanging when the replay finished
    assert_one_incident(slack)
    assert "retrying" in caplog.text and TOKEN not in caplog.text


CASSETTE = Path(__file__).parents[1] / "cassettes" / "test_notify_e2e" / "replay_bot_token.yaml"


def test_replay_bot_token_flow_from_scrubbed_cassette(
    incident: tuple[Path, list],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Recorded (KVDOCTOR_RECORD_CASSETTES=1) against the fake Slack; CI replays it with nothing listening."""
    monkeypatch.setenv("KVDOCTOR_SLACK_TOKEN", TOKEN)
    monkeypatch.setenv("KVDOCTOR_SLACK_CHANNEL", "#vllm-alerts")
    if RECORD:
        fake = FakeSlack()
        monkeypatch.setenv("KVDOCTOR_SLACK_BASE_URL", fake.api_url)
        try:
            with recorder.use_cassette(str(CASSETTE)):
                assert replay(incident[0], bot_config(tmp_path), capsys)[0] == 0
        finally:
            fake.close()
    elif not CASSETTE.exists():
        pytest.skip("cassette not recorded (KVDOCTOR_RECORD_CASSETTES=1)")
    monkeypatch.setenv("KVDOCTOR_SLACK_BASE_URL", "http://127.0.0.1:9/api/")  # nothing listens there
    with recorder.use_cassette(str(CASSETTE), record_mode="none", allow_playback_repeats=False) as cass:
        rc, output = replay(incident[0], bot_config(tmp_path, ", timeout: 2s"), capsys)
        assert cass.all_played and rc == 0, output
    requests = [(r.path, "thread_ts" in (r.body or b"").decode()) for r in cass.requests]
    assert requests.count(("/api/chat.postMessage", False)) == 1
    assert requests.count(("/api/chat.update", False)) == 1
    text = CASSETTE.read_text()
    assert TOKEN not in text and "Bearer REDACTED" in text and "KV cache full" in text
    assert find_secrets(CASSETTE.parent) == []


@pytest.fixture
def am_stack(tmp_path: Path) -> Iterator[tuple[str, Recorder]]:
    with running_alertmanager(tmp_path) as stack:
        yield stack


def firing_alerts(payloads: list[dict]) -> list[dict]:
    return [a for p in payloads if p and p.get("status") == "firing" for a in p["alerts"]]


@pytest.mark.integration
def test_real_alertmanager_gets_the_kv_alert_with_advice_moved_to_now(
    incident: tuple[Path, list],
    am_stack: tuple[str, Recorder],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, rx = am_stack
    cfg = tmp_path / "kvdoctor.yml"
    cfg.write_text(f"notify:\n  alertmanager: {{url: '{url}', generator_url: 'http://kvdoctor:9860/'}}\n")
    before = time.time()
    rc, output = replay(incident[0], str(cfg), capsys)
    assert rc == 0 and "notify: Alertmanager: ok" in output, output
    alerts = rx.wait(firing_alerts)
    names = {a["labels"]["alertname"] for a in alerts}
    assert "VLLMKVCacheBound" in names
    assert not names & {"VLLMBatchCapBound", "VLLMComputeBound"}
    kv = next(a for a in alerts if a["labels"]["alertname"] == "VLLMKVCacheBound")
    assert (
        kv["labels"]["instance"] == "gpu-1"
        and kv["labels"]["job"] == "vllm"
        and kv["labels"]["model_name"] == "tiny"
    )
    assert "--kv-cache-dtype: `--kv-cache-dtype fp8` doubles the cache" in kv["annotations"]["advice"]
    assert kv["annotations"]["runbook_url"].endswith("#kv_cache")
    assert kv["generatorURL"] == "http://kvdoctor:9860/?target=gpu-1&model_name=tiny"
    # Moved to now: it starts when the replay reached it and resolves as long after as it lasted (~3 min).
    listed = requests.get(f"{url}/api/v2/alerts", params={"filter": "finding=kv_cache"}, timeout=5).json()
    starts, ends = (parse_rfc3339(listed[0][k]) for k in ("startsAt", "endsAt"))
    assert before - 1 <= starts <= time.time() + 1 and 120 <= ends - starts <= 300
    assert listed[0]["status"]["state"] == "active"


def parse_rfc3339(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
