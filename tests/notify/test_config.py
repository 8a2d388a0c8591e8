"""notify: config parsing, environment overrides, every error at once, secrets never shown."""

from __future__ import annotations

import datetime as dt
import logging

import yaml

from kvdoctor.notify.config import NotifyConfig, parse_notify_config
from kvdoctor.notify.redact import RedactingFilter, describe_error, redact

HOOK = "https://hooks.slack.com/services/" + "T0AAAAAAA/B0BBBBBBB/cccccccccccccccccccccccc"
# Never passed through the config parser, so only the pattern (not the registered secret) can catch it.
UNSEEN = "https://hooks.slack.com/services/" + "T0DDDDDDD/B0EEEEEEE/ffffffffffffffffffffffff"


def test_defaults() -> None:
    cfg, errors = parse_notify_config(None, {})
    assert errors == []
    assert cfg == NotifyConfig()
    assert (cfg.for_, cfg.resolve_after, cfg.repeat_interval, cfg.group_by) == (60, 60, 14400, ("target",))
    assert cfg.slack.mode == "" and cfg.alertmanager.urls == ()


def test_full_yaml_section() -> None:
    section = yaml.safe_load("""
for: 2m
for_overrides: {target_down: 30s}
resolve_after: 90s
repeat_interval: 1h30m
update_interval: 10m
group_by: [target, model_name]
status_page_url: http://kvdoctor:9400/
grafana_url: http://grafana/d/kvdoctor
outbox_path: /var/lib/kvdoctor/notify.sqlite
retry: {initial: 1s, max: 10m}
slack: {token: xoxb-1-2-abc, channel: '#vllm', timeout: 5s, retries: 3}
alertmanager: {urls: ['http://am1:9093/', 'http://am2:9093'], generator_url: 'http://kvdoctor:9400'}
silences:
  - matchers: ['target=~"vllm-b.*"', 'severity!="critical"']
    starts: 2026-09-01T12:00:00Z
    ends: 2026-09-01T14:00:00Z
    comment: upgrade
routes:
  - {matchers: {severity: critical}, channel: '#pager'}
""")
    cfg, errors = parse_notify_config(section, {})
    assert errors == []
    assert (cfg.for_, cfg.resolve_after, cfg.repeat_interval, cfg.update_interval) == (120, 90, 5400, 600)
    assert cfg.for_overrides == {"target_down": 30} and cfg.group_by == ("target", "model_name")
    assert cfg.slack.mode == "bot" and cfg.slack.channel == "#vllm" and cfg.slack.retries == 3
    assert cfg.alertmanager.urls == ("http://am1:9093", "http://am2:9093")
    assert cfg.status_page_url == "http://kvdoctor:9400" and (cfg.retry_initial, cfg.retry_max) == (1, 600)
    s = cfg.silences[0]
    t = dt.datetime(2026, 9, 1, 13, tzinfo=dt.UTC).timestamp()
    assert s.active({"target": "vllm-b-2", "severity": "warning"}, t)
    assert not s.active({"target": "vllm-b-2", "severity": "critical"}, t)
    assert not s.active({"target": "vllm-a", "severity": "warning"}, t)
    assert not s.active({"target": "vllm-b-2", "severity": "warning"}, t + 3600)
    assert cfg.routes[0].channel == "#pager"


def test_environment_overrides_yaml() -> None:
    env = {"KVDOCTOR_SLACK_WEBHOOK_URL": HOOK, "KVDOCTOR_SLACK_BASE_URL": "http://127.0.0.1:1/api"}
    cfg, errors = parse_notify_config({"slack": {"channel": "#x"}}, env)
    assert errors == [] and cfg.slack.mode == "webhook" and cfg.slack.base_url == "http://127.0.0.1:1/api/"
    assert cfg.slack.webhook_url is not None and cfg.slack.webhook_url.reveal() == HOOK
    env = {"KVDOCTOR_SLACK_TOKEN": "xoxb-9-9-zzz", "KVDOCTOR_SLACK_CHANNEL": "C123"}
    cfg, errors = parse_notify_config({"slack": {"channel": "#yaml"}}, env)
    assert errors == [] and cfg.slack.mode == "bot" and cfg.slack.channel == "C123"


def test_every_error_at_once_never_raises() -> None:
    section = {
        "for": "soon",
        "resolve_after": -1,
        "repeat_interval": True,
        "group_by": ["pod"],
        "bogus": 1,
        "slack": {"channel": 5, "webhook_url": "not a url", "timeout": "x", "extra": 1},
        "alertmanager": {"url": "ftp://am", "urls": "http://am"},
        "silences": [
            {"matchers": ['target=~"("', "pod=x", 'finding="a"'], "starts": "yesterday"},
            {"starts": 10, "ends": 5, "matchers": []},
            "nope",
        ],
        "routes": [{"matchers": ["severity=critical"]}],
        "status_page_url": 3,
        "enabled": "yes",
        "retry": {"initial": "fast"},
    }
    cfg, errors = parse_notify_config(section, {})
    assert isinstance(cfg, NotifyConfig)
    expected = [
        "notify.bogus: unknown key",
        "notify.slack.extra: unknown key",
        "notify.slack.channel: must be a string",
        "notify.slack.webhook_url: must be an http(s) URL",
        "notify.slack.timeout: must be a duration",
        "notify.alertmanager.url: must be an http(s) URL",
        "notify.alertmanager.urls: must be a list",
        "notify.for: must be a duration",
        "notify.resolve_after: must not be negative",
        "notify.repeat_interval: must be a duration",
        "notify.group_by: must be a list of labels",
        "notify.silences[0].matchers[0]: invalid regex",
        "notify.silences[0].matchers[1]: unknown label 'pod'",
        "notify.silences[0].starts: must be an RFC 3339 time",
        "notify.silences[1].ends: must be after starts",
        "notify.silences[2]: must be a mapping",
        "notify.routes[0].channel: must be a string",
        "notify.status_page_url: must be an http(s) URL",
        "notify.enabled: must be true or false",
        "notify.retry.initial: must be a duration",
    ]
    for e in expected:
        assert any(x.startswith(e) for x in errors), (e, errors)
    assert parse_notify_config("garbage", {})[1] == ["notify: must be a mapping"]  # type: ignore[arg-type]
    assert parse_notify_config({"slack": {"token": "xoxb-1-2-3"}}, {})[1] == [
        "notify.slack.channel: required with a bot token (or set KVDOCTOR_SLACK_CHANNEL)"
    ]


def test_secrets_not_in_repr_errors_or_logs(caplog: object) -> None:
    cfg, errors = parse_notify_config(
        {"slack": {"token": "xoxb-" + "111-222-SeCrEtToKeN", "channel": "#a"}}, {}
    )
    assert (
        "SeCrEtToKeN" not in repr(cfg)
        and "SeCrEtToKeN" not in str(cfg)
        and "SeCrEtToKeN" not in f"{cfg.slack.token}"
    )
    _, errors = parse_notify_config(
        {}, {"KVDOCTOR_SLACK_WEBHOOK_URL": "hooks.slack.com/services/T1/B2/SeCrEt"}
    )
    assert errors == ["KVDOCTOR_SLACK_WEBHOOK_URL: must be an http(s) URL"]


def test_redaction_helper() -> None:
    text = f"POST {UNSEEN} failed; Authorization: Bearer {'xoxb-' + '123-456-abcdef'}; token xoxp-9-9-9"
    out = redact(text)
    assert "ffffffff" not in out and "xoxb-123" not in out and "xoxp-9" not in out
    assert "/services/T000/B000/REDACTED" in out and "Bearer REDACTED" in out
    assert redact("my-own-secret-value here", secrets=["my-own-secret-value"]) == "REDACTED here"


def test_slack_sdk_style_exception_is_logged_redacted(caplog: object) -> None:
    from urllib.error import URLError

    logger = logging.getLogger("test.notify.redact")
    logger.addFilter(RedactingFilter())
    exc = URLError(f"<urlopen error [Errno 111] Connection refused: {UNSEEN}>")
    assert "ffff" not in describe_error(exc)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger.addHandler(Keep())
    logger.setLevel(logging.DEBUG)
    try:
        raise exc
    except URLError:
        logger.exception("send to %s failed", UNSEEN)
    msg = records[0].getMessage()
    assert "ffffffff" not in msg and "/services/T000/B000/REDACTED" in msg and records[0].exc_info is None
