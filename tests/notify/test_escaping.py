"""Text from outside reaches Slack inert: a model name of `<!channel> <!here> <https://evil.example|click>`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvdoctor.notify import Notifier, parse_notify_config
from kvdoctor.notify.alerts import AlertView, Event
from kvdoctor.notify.blocks import Links, escape, event_message, link_url
from kvdoctor.verdicts import Advice, Diagnosis, Finding
from tests.notify_support.fake_slack import FakeSlack

HOSTILE = "<!channel> <!here> <https://evil.example|click> & <@U012AB3CD>"
TOKEN = "xoxb-" + "1234567890-1234567890123-abcdefghijklmnopqrstuvwx"
T0 = 1_760_000_000.0
# The only links a message may carry: kvdoctor's own, from its templates.
OURS = re.compile(
    r"^https?://(kvdoctor\.local:9400/\?|grafana\.local/d/kvdoctor\?|runbook\.local/)[^<>| ]*"
    r"\|(Status page|Grafana|Runbook)$"
)


def hostile_incident() -> list[Diagnosis]:
    """A KV-bound incident whose model name, target, summary, evidence, advice and change notes are all hostile."""
    finding = Finding(
        "kv_cache",
        "warning",
        f"KV cache full on {HOSTILE}",
        f"model {HOSTILE}\nsecond line",
        {"kv_usage_max_1m": 0.97, "error": HOSTILE},
        [Advice(f"--served-model-name {HOSTILE}", HOSTILE, HOSTILE)],
        runbook="http://runbook.local/runbook#kv_cache",
        bottleneck="kv_cache",
        since=T0 + 30,
    )
    target = "vllm <!everyone>:8000"
    out = [Diagnosis(target, HOSTILE, T0 + 15 * i, "healthy", T0, []) for i in range(2)]
    out += [Diagnosis(target, HOSTILE, T0 + 15 * i, "kv_cache", T0 + 30, [finding]) for i in range(2, 12)]
    out += [Diagnosis(target, HOSTILE, T0 + 15 * i, "healthy", T0, []) for i in range(12, 20)]
    return out


def texts(payload: Any, where: str = "") -> Iterator[tuple[str, str, str]]:
    """(where, text object type, text) of every string Slack renders in a chat.postMessage/update body."""
    if isinstance(payload, dict):
        if isinstance(payload.get("text"), str):
            yield (
                where + ".text",
                str(payload.get("type", "mrkdwn")),
                payload["text"],
            )  # top-level text: mrkdwn
        for k, v in payload.items():
            if k != "text" or not isinstance(v, str):
                yield from texts(v, f"{where}.{k}")
    elif isinstance(payload, list):
        for i, v in enumerate(payload):
            yield from texts(v, f"{where}[{i}]")


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack()
    yield fake
    fake.close()


@pytest.mark.parametrize("mode", ["bot", "webhook"])
def test_a_hostile_model_name_reaches_slack_inert_in_every_field(
    mode: str, slack: FakeSlack, tmp_path: Path
) -> None:
    section = {
        "for": "15s",
        "resolve_after": "30s",
        "retry": {"initial": 0.05, "max": 0.2},
        "slack": {"timeout": 1, "retries": 1},
        "status_page_url": "http://kvdoctor.local:9400",
        "grafana_url": "http://grafana.local/d/kvdoctor",
    }
    env = {"KVDOCTOR_SLACK_CHANNEL": "#vllm", "KVDOCTOR_SLACK_BASE_URL": slack.api_url}
    env |= (
        {"KVDOCTOR_SLACK_TOKEN": TOKEN}
        if mode == "bot"
        else {"KVDOCTOR_SLACK_WEBHOOK_URL": slack.webhook_url()}
    )
    cfg, errors = parse_notify_config(section, env)
    assert errors == []
    n = Notifier(cfg, tmp_path, slack_retry_backoff=0.01)
    for d in hostile_incident():
        n.observe([d], d.t)
    assert n.flush(10)
    n.close()
    bodies = [r.body for r in slack.delivered()]
    assert len(bodies) >= 2  # the firing root and its resolution at least
    carried: set[str] = set()  # the kinds of field the hostile text reached
    for body in bodies:
        places = [("text", "mrkdwn", body["text"])]
        for b in body.get("blocks", []):
            for o in _objects(b):
                if isinstance(o.get("text"), str):
                    kind = "fields" if o in b.get("fields", []) else b["type"]
                    places.append((kind, o["type"], o["text"]))
        for kind, otype, text in places:
            if otype == "plain_text":  # never parsed by Slack: shown as written
                carried |= {kind} if HOSTILE in text else set()
                continue
            assert "<!" not in text and "<@" not in text and "<https://evil" not in text, (kind, text)
            for link in re.findall(r"<([^>]*)>", text):
                assert OURS.match(link), (kind, link)
            carried |= {kind} if escape(HOSTILE) in text else set()
            assert "%3C%21channel%3E" in text if kind == "context" and "Status page" in text else True
    assert {"text", "header", "section", "fields"} <= carried, carried
    blob = str(bodies)
    assert "Runbook>" in blob and "Status page>" in blob  # kvdoctor's own links still work


def test_every_text_object_is_verbatim_and_every_field_escaped() -> None:
    d = hostile_incident()[5]
    alert = {
        "finding": "kv_cache",
        "severity": "warning",
        "status": "firing",
        "bottleneck": "kv_cache",
        "target": d.target,
        "model_name": d.model_name,
        "summary": d.findings[0].summary,
        "description": d.findings[0].description,
        "evidence": d.findings[0].evidence,
        "advice": [{"flag": a.flag, "text": a.text, "source": a.source} for a in d.findings[0].advice],
        "runbook": "javascript:alert(1)",
    }
    view = AlertView.from_dict(alert)
    ev = Event("firing", "i", "g", {"target": d.target}, 1, d.t, d.t - 60, "", [view, view], [HOSTILE])
    text, blocks = event_message(ev, Links("http://kvdoctor.local:9400"))
    seen = {b["type"] for b in blocks}
    assert {"header", "section", "context"} <= seen
    for where, kind, t in texts(blocks):
        if kind == "mrkdwn":
            assert "<!" not in t and "<https://evil" not in t and "javascript:" not in t, (where, t)
    mrkdwn_objects = [o for o in _objects(blocks) if o.get("type") == "mrkdwn"]
    assert mrkdwn_objects and all(o.get("verbatim") is True for o in mrkdwn_objects)
    assert escape(HOSTILE) in text and "<!" not in text
    assert link_url("http://x/a b|c>d") == "http://x/a%20b%7Cc%3Ed"


def _objects(x: Any) -> Iterator[dict[str, Any]]:
    if isinstance(x, dict):
        yield x
        for v in x.values():
            yield from _objects(v)
    elif isinstance(x, list):
        for v in x:
            yield from _objects(v)
