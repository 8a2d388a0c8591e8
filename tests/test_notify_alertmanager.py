"""Alertmanager sink: payload shape, and a real Alertmanager delivering our alert (with advice) to a webhook."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from doctor.diagnosis.model import Diagnosis
from doctor.notify import Notifier, parse_notify_config
from doctor.notify.alertmanager import alertname, rfc3339, to_alert
from doctor.notify.config import AlertmanagerConfig
from tests.notify_support.diagnoses import T0, kv_incident

AM = shutil.which("prometheus-alertmanager")


def test_alertname_and_payload_shape() -> None:
    assert alertname({"bottleneck": "kv_cache", "finding": "kv_cache"}) == "KVDoctorKVCacheBottleneck"
    assert (
        alertname({"bottleneck": "", "finding": "prefix_cache_low_hit_rate"})
        == "KVDoctorPrefixCacheLowHitRate"
    )
    assert rfc3339(T0) == "2025-10-09T08:53:20.000Z"
    view = {"target": "a:8000", "model_name": "m", "finding": "kv_cache", "severity": "warning",
            "bottleneck": "kv_cache", "summary": "KV full", "description": "d", "runbook": "https://r",
            "advice": [{"flag": "--max-num-seqs 48", "text": "cap"}], "status": "firing", "fired_at": T0}  # fmt: skip
    cfg = AlertmanagerConfig(urls=("http://am",), generator_url="http://kvdoctor:9400/")
    a = to_alert(view, cfg, T0 + 30)
    assert a["labels"] == {"alertname": "KVDoctorKVCacheBottleneck", "target": "a:8000", "model_name": "m",
                           "finding": "kv_cache", "severity": "warning", "bottleneck": "kv_cache"}  # fmt: skip
    assert a["annotations"] == {"summary": "KV full", "description": "d", "advice": "--max-num-seqs 48: cap",
                                "runbook_url": "https://r"}  # fmt: skip
    assert a["startsAt"] == rfc3339(T0) and a["endsAt"] == rfc3339(T0 + 30 + 240)
    assert a["generatorURL"] == "http://kvdoctor:9400/?target=a%3A8000&model_name=m"
    resolved = to_alert({**view, "status": "resolved", "resolved_at": T0 + 600}, cfg, T0 + 630)
    assert resolved["endsAt"] == rfc3339(T0 + 600)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Receiver:
    """Local webhook receiver for Alertmanager notifications."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.payloads.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def wait(self, status: str, timeout: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.payloads:
                if p.get("status") == status:
                    return p
            time.sleep(0.1)
        raise AssertionError(f"no {status} notification; got {self.payloads}")


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[tuple[str, Receiver]]:
    if AM is None:
        pytest.skip("prometheus-alertmanager not installed")
    rx = Receiver()
    port = free_port()
    (tmp_path / "am.yml").write_text(
        "route: {receiver: hook, group_by: [target], group_wait: 1s, group_interval: 1s, repeat_interval: 1h}\n"
        f"receivers: [{{name: hook, webhook_configs: [{{url: 'http://127.0.0.1:{rx.port}/hook', send_resolved: true}}]}}]\n"
    )
    proc = subprocess.Popen(
        [
            AM,
            f"--config.file={tmp_path / 'am.yml'}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                if requests.get(f"{url}/-/ready", timeout=0.5).ok:
                    break
            except requests.ConnectionError:
                time.sleep(0.1)
        yield url, rx
    finally:
        proc.terminate()
        proc.wait(10)
        rx.server.shutdown()


@pytest.mark.integration
def test_real_alertmanager_receives_alert_with_advice_then_resolution(
    alertmanager: tuple[str, Receiver], tmp_path: Path
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
    firing = rx.wait("firing")
    alert = firing["alerts"][0]
    assert alert["labels"]["alertname"] == "KVDoctorKVCacheBottleneck"
    assert alert["labels"]["target"] == "vllm-a:8000" and alert["labels"]["severity"] == "warning"
    assert "--gpu-memory-utilization 0.95: +2,048 KV blocks" in alert["annotations"]["advice"]
    assert alert["annotations"]["runbook_url"].endswith("#kv-cache")
    assert alert["generatorURL"].startswith("http://kvdoctor:9400?target=vllm-a%3A8000")
    listed = requests.get(f"{url}/api/v2/alerts", timeout=2).json()
    assert [a["labels"]["alertname"] for a in listed] == ["KVDoctorKVCacheBottleneck"]
    # The finding stops holding (no hysteresis here: real time) and the alert is sent with endsAt = now.
    now = time.time()
    n.observe([Diagnosis("vllm-a:8000", seq[0].model_name, now, "healthy", now, [])], now)
    assert n.flush(5)
    resolved = rx.wait("resolved")
    assert resolved["alerts"][0]["status"] == "resolved"
    n.close()
