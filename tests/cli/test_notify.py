"""`kvdoctor notify test` against the local fake Slack and a fake Alertmanager; config errors; no sinks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kvdoctor.cli import main
from tests.notify_support.fake_slack import FakeSlack
from tests.notify_support.http_recorder import Recorder

TOKEN = "xoxb-" + "1111111111-2222222222222-AbCdEfGhIjKlMnOpQrStUvWx"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("TOKEN", "WEBHOOK_URL", "CHANNEL", "BASE_URL"):
        monkeypatch.delenv(f"KVDOCTOR_SLACK_{var}", raising=False)


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack()
    yield fake
    fake.close()


@pytest.fixture
def am() -> Iterator[Recorder]:
    rec = Recorder()
    yield rec
    rec.close()


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "kvdoctor.yml"
    path.write_text(text)
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    rc = main(["notify", "test", *argv])
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err


def test_bot_and_alertmanager_one_line_each(
    tmp_path: Path, slack: FakeSlack, am: Recorder, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write(
        tmp_path,
        f"notify:\n  slack: {{token: {TOKEN}, channel: '#vllm', base_url: '{slack.api_url}'}}\n"
        f"  alertmanager: {{url: '{am.url}'}}\n",
    )
    rc, lines, err = run(capsys, "--config", cfg)
    assert rc == 0, err
    assert lines == [
        "slack (bot): ok, posted to C0FAKE0001 at ts 1760000001.000100",
        f"alertmanager {am.url}: ok (1 alerts)",
    ]
    (req,) = slack.requests
    assert req.path == "/api/chat.postMessage" and req.body["channel"] == "#vllm"
    assert req.headers["Authorization"] == f"Bearer {TOKEN}"
    assert "test notification" in req.body["text"]
    (alerts,) = am.bodies("/api/v2/alerts")
    assert alerts[0]["labels"] == {"alertname": "KvdoctorTest", "severity": "info"}
    assert TOKEN not in "\n".join(lines) + err


def test_webhook_from_environment_is_never_printed(
    slack: FakeSlack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = slack.webhook_url()
    monkeypatch.setenv("KVDOCTOR_SLACK_WEBHOOK_URL", url)
    rc, lines, err = run(capsys)
    assert (rc, lines) == (0, ["slack (webhook): ok"])
    assert slack.requests[0].path.startswith("/services/T0AAAAAAA/")
    slack.set_mode("500")
    rc, lines, err = run(capsys)
    assert rc == 3 and lines[0].startswith("slack (webhook): failed")
    assert "/services/" not in "\n".join(lines) + err and "c" * 24 not in "\n".join(lines) + err


def test_one_failing_sink_exits_3(
    tmp_path: Path, slack: FakeSlack, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = Recorder(status=500)
    try:
        slack.set_mode("error:channel_not_found")
        cfg = write(
            tmp_path,
            f"notify:\n  slack: {{token: {TOKEN}, channel: '#nope', base_url: '{slack.api_url}'}}\n"
            f"  alertmanager: {{urls: ['{broken.url}', 'http://admin:hunter22@127.0.0.1:9']}}\n",
        )
        rc, lines, err = run(capsys, "--config", cfg)
    finally:
        broken.close()
    assert rc == 3
    assert lines[0] == "slack (bot): failed: Slack API error 200 channel_not_found"
    assert lines[1].startswith(f"alertmanager {broken.url}: failed: HTTPError: 500")
    assert lines[2].startswith("alertmanager http://REDACTED@127.0.0.1:9: failed: ConnectionError")
    assert "hunter22" not in "\n".join(lines) + err and TOKEN not in "\n".join(lines) + err


def test_no_sink_configured_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, lines, err = run(capsys, "--config", write(tmp_path, "interval: 15s\n"))
    assert rc == 2 and lines == []
    assert "no notification sinks configured" in err and "KVDOCTOR_SLACK_TOKEN" in err
    rc, _, err = run(capsys)  # no config at all
    assert rc == 2 and "no notification sinks configured" in err


def test_every_config_error_listed_with_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write(
        tmp_path,
        "interval: 15s\n"
        "notify:\n"
        f"  slack: {{token: {TOKEN}}}\n"
        "  alertmanager:\n"
        "    url: not-a-url\n"
        "  repeat_interval: soon\n"
        "  silences:\n"
        "    - comment: no matchers\n",
    )
    monkeypatch.setenv("KVDOCTOR_SLACK_BASE_URL", "ftp://proxy")
    rc, lines, err = run(capsys, "--config", cfg)
    assert rc == 2 and lines == []
    errors = err.splitlines()
    assert f"kvdoctor notify test: {cfg}:3: notify.slack.channel: required with a bot token" in err
    assert f"kvdoctor notify test: {cfg}:5: notify.alertmanager.url: must be an http(s) URL" in err
    assert f"kvdoctor notify test: {cfg}:6: notify.repeat_interval" in err
    assert f"kvdoctor notify test: {cfg}:8: notify.silences[0].matchers: required" in err
    assert "kvdoctor notify test: environment: KVDOCTOR_SLACK_BASE_URL: must be an http(s) URL" in err
    assert len(errors) == 5 and TOKEN not in err


def test_notify_without_action_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["notify"]) == 2
    assert "test" in capsys.readouterr().err
