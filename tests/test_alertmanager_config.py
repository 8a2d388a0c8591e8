"""deploy/alertmanager.yml routes and inhibits kvdoctor's pushed alerts and Prometheus' alerts from the pack alike."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from kvdoctor.notify.alertmanager import alertname, pack_alertnames, rfc3339, to_alert
from kvdoctor.notify.alerts import AlertView
from kvdoctor.notify.config import AlertmanagerConfig
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.signals import FINDINGS
from tests.notify_support.alertmanager import running_alertmanager

CONFIG = Path(__file__).resolve().parent.parent / "deploy" / "alertmanager.yml"
AMTOOL = shutil.which("amtool")

# Where an SRE wants each finding: pages for a dead or stuck server, a capacity channel for limits, tuning hints
# on a slow channel, and the monitoring team for a target kvdoctor cannot read.
RECEIVER = {
    "target_down": "vllm-oncall",
    "stalled": "vllm-oncall",
    "preemption_storm": "vllm-oncall",
    "kv_cache": "vllm-capacity",
    "batch_cap": "vllm-capacity",
    "compute": "vllm-capacity",
    "engine_imbalance": "vllm-capacity",
    "lora_adapter_slots": "vllm-capacity",
    "relief_check": "vllm-capacity",  # which limit the simulator says binds: the capacity owners
    "prefix_cache_low_hit_rate": "vllm-tuning",
    "spec_decode_low_acceptance": "vllm-tuning",
    "spec_decode_high_load": "vllm-tuning",
    "max_model_len_oversized": "vllm-tuning",
    "prediction_check": "vllm-tuning",
    "metrics_missing": "monitoring",
}


def _pack_alerts() -> dict[str, Any]:
    return {
        r.labels["finding"]: r for g in load_files(default_rule_files()) for r in g.rules if r.kind == "alert"
    }


def sink_labels(finding: str, instance: str = "10.0.0.7:8000", model: str = "llama") -> dict[str, str]:
    """The labels kvdoctor's Alertmanager sink pushes for a finding."""
    kind = FINDINGS[finding]
    view = AlertView.from_dict(
        {
            "target": instance,
            "model_name": model,
            "finding": finding,
            "severity": kind.severity or _pack_alerts()[finding].labels["severity"],
            "bottleneck": finding if finding in ("kv_cache", "batch_cap", "compute") else "",
            "status": "firing",
            "fired_at": time.time(),
        }
    )
    return dict(to_alert(view, AlertmanagerConfig(urls=("http://am",)), time.time())["labels"])


def prometheus_labels(finding: str, instance: str = "10.0.0.7:8000", model: str = "llama") -> dict[str, str]:
    """The labels Prometheus sends for the pack's alert: the series' (job, instance, model_name), the rule's own,
    and alertname (tests/promtool/kvdoctor_test.yml pins these for the limits)."""
    rule = _pack_alerts()[finding]
    series = {"job": "vllm", "instance": instance}
    if finding != "target_down":  # `up == 0` carries no model_name
        series["model_name"] = model
    return {"alertname": rule.name, **series, **rule.labels}


def test_the_sink_uses_the_packs_alertnames_and_prometheus_labels() -> None:
    pack = _pack_alerts()
    assert pack_alertnames() == {f: r.name for f, r in pack.items()}
    assert set(pack) <= set(FINDINGS)
    for finding in pack:
        assert alertname(AlertView(finding=finding)) == pack[finding].name
        if finding != "target_down":
            assert sink_labels(finding) == prometheus_labels(finding), finding
    assert (
        alertname(AlertView(finding="metrics_missing")) == "VLLMMetricsMissing"
    )  # Python-only findings keep the prefix
    assert set(RECEIVER) == set(FINDINGS), "a finding without an expected receiver"


def _route(labels: dict[str, str]) -> str:
    args = [f"{k}={v}" for k, v in labels.items()]
    proc = subprocess.run(
        [str(AMTOOL), "config", "routes", "test", f"--config.file={CONFIG}", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.slow  # over 10 s on this 2-core machine (scripts/test.sh runs it)
@pytest.mark.skipif(AMTOOL is None, reason="amtool not installed")
def test_amtool_routes_each_finding_to_its_receiver_from_either_sender() -> None:
    for finding, receiver in RECEIVER.items():
        assert _route(sink_labels(finding)) == receiver, finding
        if finding in _pack_alerts():
            assert _route(prometheus_labels(finding)) == receiver, finding


def _post(url: str, labels: dict[str, str]) -> None:
    now = time.time()
    alert = {"labels": labels, "startsAt": rfc3339(now - 60), "endsAt": rfc3339(now + 600)}
    requests.post(f"{url}/api/v2/alerts", json=[alert], timeout=5).raise_for_status()


def _states(url: str, want: int, timeout: float = 20.0) -> dict[tuple[str, str], dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        listed = requests.get(f"{url}/api/v2/alerts", timeout=5).json()
        states = {(a["labels"]["instance"], a["labels"]["alertname"]): a["status"] for a in listed}
        settled = len(states) == want and all(s["state"] != "unprocessed" for s in states.values())
        if settled or time.monotonic() > deadline:
            return states


@pytest.mark.integration
def test_real_alertmanager_inhibits_limit_alerts_of_a_down_target_from_either_sender(tmp_path: Path) -> None:
    with running_alertmanager(tmp_path, CONFIG) as (url, _rx):
        # a: both alerts pushed by kvdoctor's sink; b: both as Prometheus sends them; c: up, its KV alert stays.
        for build, instance in ((sink_labels, "a:8000"), (prometheus_labels, "b:8000")):
            _post(url, build("target_down", instance))
            _post(url, build("kv_cache", instance))
        _post(url, sink_labels("kv_cache", "c:8000"))
        states = _states(url, want=5)
    for instance in ("a:8000", "b:8000"):
        kv = states[(instance, "VLLMKVCacheBound")]
        assert kv["state"] == "suppressed" and len(kv["inhibitedBy"]) == 1, (instance, kv)
        assert states[(instance, "VLLMTargetDown")]["state"] == "active"
    assert states[("c:8000", "VLLMKVCacheBound")]["state"] == "active"
