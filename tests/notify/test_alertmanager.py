"""Alertmanager sink: payload shape, and a real Alertmanager delivering our alert (with advice) to a webhook."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from kvdoctor.notify import Notifier, parse_notify_config
from kvdoctor.notify.alertmanager import alertname, rfc3339, to_alert
from kvdoctor.notify.alerts import AlertView
from kvdoctor.notify.config import AlertmanagerConfig
from kvdoctor.verdicts import Diagnosis
from tests.notify_support.alertmanager import running_alertmanager
from tests.notify_support.diagnoses import T0, kv_incident
from tests.notify_support.http_recorder import Recorder


def test_alertname_and_payload_shape() -> None:
    assert alertname(AlertView(bottleneck="kv_cache", finding="kv_cache")) == "VLLMKVCacheBound"
    assert alertname(AlertView(finding="prefix_cache_low_hit_rate")) == "VLLMPrefixCacheLowHitRate"
    assert rfc3339(T0) == "2025-10-09T08:53:20.000Z"
    view = {
        "target": "a:8000",
        "model_name": "m",
        "finding": "kv_cache",
        "severity": "warning",
        "bottleneck": "kv_cache",
        "summary": "KV full",
        "description": "d",
        "runbook": "https://r",
        "advice": [{"flag": "--max-num-seqs 48", "text": "cap"}],
        "status": "firing",
        "fired_at": T0,
    }
    cfg = AlertmanagerConfig(urls=("http://am",), generator_url="http://kvdoctor:9400/")
    a = to_alert(AlertView.from_dict(view), cfg, T0 + 30)
    assert a["labels"] == {
        "alertname": "VLLMKVCacheBound",
        "job": "vllm",
        "instance": "a:8000",
        "model_name": "m",
        "finding": "kv_cache",
        "severity": "warning",
        "bottleneck": "kv_cache",
    }
    assert a["annotations"] == {
        "summary": "KV full",
        "description": "d",
        "advice": "--max-num-seqs 48: cap",
        "runbook_url": "https://r",
    }
    assert a["startsAt"] == rfc3339(T0) and a["endsAt"] == rfc3339(T0 + 30 + 240)
    assert a["generatorURL"] == "http://kvdoctor:9400/?target=a%3A8000&model_name=m"
    resolved = to_alert(
        AlertView.from_dict({**view, "status": "resolved", "resolved_at": T0 + 600}), cfg, T0 + 630
    )
    assert resolved["endsAt"] == rfc3339(T0 + 600)


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[tuple[str, Recorder]]:
    with running_alertmanager(tmp_path) as (url, rx):
        yield url, rx


def _with_status(status: str):  # type: ignore[no-untyped-def]
    return lambda bodies: next((b for b in bodies if isinstance(b, dict) and b.get("status") == status), None)


@pytest.mark.integration
def test_real_alertmanager_receives_alert_with_advice_then_resolution(
    alertmanager: tuple[str, Recorder], tmp_path: Path
) -> None:
    url, rx = alertmanager
    cfg, errors = parse_notify_config(
        {"resolve_after": "0s", "alertmanager": {"url": url, "generator_url": "http://kvdoctor:9400"}}, {}
    )
    assert errors == []
    # Real time: Alertmanager ignores alerts whose endsAt is already in the past.
    seq = kv_incident(healthy_before=0, bound=6, healthy_after=0)
    shift = time.time() - seq[-1].t
    n = Notifier(cfg, tmp_path)
    for d in seq:
        for f in d.findings:
            f.since = (f.since or d.t) + shift
        n.observe([d], d.t + shift)
    assert n.flush(5)
    firing = rx.wait(_with_status("firing"), timeout=20)
    alert = firing["alerts"][0]
    assert alert["labels"]["alertname"] == "VLLMKVCacheBound"
    assert alert["labels"]["instance"] == "vllm-a:8000" and alert["labels"]["severity"] == "warning"
    assert "--gpu-memory-utilization 0.95: +2,048 KV blocks" in alert["annotations"]["advice"]
    assert alert["annotations"]["runbook_url"].endswith("#kv-cache")
    assert alert["generatorURL"].startswith("http://kvdoctor:9400?target=vllm-a%3A8000")
    listed = requests.get(f"{url}/api/v2/alerts", timeout=2).json()
    assert [a["labels"]["alertname"] for a in listed] == ["VLLMKVCacheBound"]
    # The finding stops holding (no hysteresis here: real time) and the alert is sent with endsAt = now.
    now = time.time()
    n.observe([Diagnosis("vllm-a:8000", seq[0].model_name, now, "healthy", now, [])], now)
    assert n.flush(5)
    resolved = rx.wait(_with_status("resolved"), timeout=20)
    assert resolved["alerts"][0]["status"] == "resolved"
    n.close()


def test_alerts_carry_the_job_prometheus_scrapes_the_target_in(tmp_path: Path) -> None:
    from kvdoctor.config.schema import Config
    from kvdoctor.daemon.notifying import build_notifier
    from kvdoctor.diagnosis.target import Target, TargetFacts

    view = {
        "target": "a:8000",
        "model_name": "m",
        "finding": "stalled",
        "severity": "critical",
        "status": "firing",
        "fired_at": T0,
    }
    cfg = AlertmanagerConfig(urls=("http://am",), job="vllm")
    assert to_alert(AlertView.from_dict(view), cfg, T0)["labels"]["job"] == "vllm"
    assert to_alert(AlertView.from_dict(view), cfg, T0, "vllm-prod")["labels"]["job"] == "vllm-prod"
    targets = {"a:8000": Target("a:8000", TargetFacts(labels={"job": "vllm-prod"}))}
    notify = {"alertmanager": {"url": "http://127.0.0.1:9"}}
    for source, job in (("prometheus", "vllm-prod"), ("scrape", None)):
        daemon_cfg = Config(source=source, notify=notify, state_file=str(tmp_path / "s.json"), job="vllm")
        notifier = build_notifier(daemon_cfg, "http://kvdoctor:9860", targets)
        assert notifier is not None and notifier.alertmanager is not None
        try:
            job_of = notifier.alertmanager.job_of
            assert (job_of("a:8000") if job_of else None) == job, source
            assert notifier.alertmanager.config.job == "vllm"
        finally:
            notifier.close()
