"""A target exporting values that cannot be (+Inf KV usage, -5 running requests) beside healthy ones.

Before: `OverflowError` in the report history on every cycle, for every target: no diagnosis, no notification, no
state written, `/-/ready` 200, and an `Infinity` in the state file that kept `/report` at 500 across restarts.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from kvdoctor.config import Config, TargetSpec
from kvdoctor.daemon.runner import Daemon
from kvdoctor.diagnosis.target import Target
from kvdoctor.ingest.fetch import HttpOptions
from kvdoctor.replayserver import Playlist, ReplayServer
from kvdoctor.report.live import report_response
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.status.exposition import make_registry
from kvdoctor.status.state import DaemonState
from kvdoctor.verdicts import Diagnosis
from kvdoctor.web import WebServer
from tests.faults import FaultServer
from tests.notify_support.alertmanager import running_alertmanager
from tests.support.chromium import CHROMIUM, Cards, chromium
from tests.support.daemon import Daemons, watched
from tests.support.wait import until

FAST = HttpOptions(connect_timeout=0.5, read_timeout=1.0, total_timeout=1.5, max_bytes=4 * 1024 * 1024)


@pytest.fixture
def kv_server(shared_032: Path) -> Iterator[ReplayServer]:
    server = ReplayServer(Playlist([shared_032 / "kv_bound.jsonl.gz"], start_offset_s=40, loop=True)).start()
    yield server
    server.stop()


def impossible_page(server: ReplayServer) -> bytes:
    """A real vLLM page whose KV usage is +Inf and whose running requests are -5; everything else as recorded."""
    frame = server.playlist.at(0)
    assert frame is not None and frame.text is not None
    text = re.sub(r"^(vllm:kv_cache_usage_perc\{[^}]*\}) \S+$", r"\1 +Inf", frame.text, flags=re.M)
    text = re.sub(r"^(vllm:num_requests_running\{[^}]*\}) \S+$", r"\1 -5", text, flags=re.M)
    assert "+Inf\n" in text and " -5\n" in text
    return text.encode()


def strict_json(text: str) -> object:
    """JSON as the standard has it: no Infinity, no NaN."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in JSON")

    return json.loads(text, parse_constant=refuse)


def kv_alert_for(target: str):  # type: ignore[no-untyped-def]
    def find(bodies: list[dict]) -> list[dict]:
        return [
            a
            for b in bodies
            if b and b.get("status") == "firing"
            for a in b["alerts"]
            if a["labels"].get("instance") == target and a["labels"]["alertname"] == "VLLMKVCacheBound"
        ]

    return find


def test_an_inf_target_beside_healthy_ones_stops_nothing(
    kv_server: ReplayServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = FaultServer("static", impossible_page(kv_server))
    state = tmp_path / "state.json"
    caplog.set_level(logging.INFO, logger="kvdoctor")
    try:
        with running_alertmanager(tmp_path) as (am, rx):
            cfg = Config(
                targets=[
                    TargetSpec(url=kv_server.url, name="good", http=FAST),
                    TargetSpec(url=bad.url, name="bad", http=FAST),
                ],
                interval_s=1.0,
                state_file=str(state),
                listen="127.0.0.1:0",
                notify={"alertmanager": {"url": am}, "for": "0s"},
            )
            d = watched(Daemon(cfg, load_files(default_rule_files())), "good", kv_server)
            d.start()
            try:
                assert rx.wait(
                    kv_alert_for("good")
                )  # the healthy target's incident still reaches Alertmanager
                base = d.web.url  # type: ignore[union-attr]
                targets = until(
                    lambda: {
                        t["name"]: t for t in requests.get(base + "api/v1/targets", timeout=5).json()["data"]
                    }
                )
                notes = targets["bad"]["invalid_values"]
                assert "`vllm:kv_cache_usage_perc` = +Inf ignored" in notes
                assert "`vllm:num_requests_running` = -5 (negative) ignored" in notes
                assert targets["bad"]["up"] is True and targets["good"]["invalid_values"] == []
                metrics = requests.get(base + "metrics", timeout=5).text
                counted = re.search(
                    r'^kvdoctor_target_invalid_values_total\{metric="vllm:kv_cache_usage_perc",target="bad"\} (\S+)$',
                    metrics,
                    re.M,
                )
                assert counted and float(counted.group(1)) >= 1
                diagnoses = {
                    x["target"]: x for x in requests.get(base + "api/v1/diagnoses", timeout=5).json()["data"]
                }
                assert diagnoses["good"]["bottleneck"] == "kv_cache"
                # -5 running is no evidence of a healthy server, +Inf no evidence of a full cache
                assert diagnoses["bad"]["bottleneck"] == "unknown"
                assert "running" not in diagnoses["bad"]["evidence"]
                assert "kv_usage" not in diagnoses["bad"]["evidence"]
                assert requests.get(base + "-/ready", timeout=5).status_code == 200
                report = requests.get(base + "report?format=json", timeout=5)
                assert report.status_code == 200
                assert {t["target"] for t in strict_json(report.text)["targets"]} >= {"good"}  # type: ignore[index]
                saved = strict_json(until(state.read_text))
                assert {k["target"] for k in saved["report_history"]["keys"]} == {"good", "bad"}  # type: ignore[index]
            finally:
                d.stop()
                d.shutdown()
    finally:
        bad.stop()
    assert "cycle failed" not in caplog.text and "OverflowError" not in caplog.text


def test_a_state_file_holding_infinity_loads_without_poisoning_the_report(
    daemons: Daemons, tmp_path: Path
) -> None:
    # what main wrote before the fix: json.dump lets Infinity through into the report history and the alerts
    hour = {
        "start": 1_800_000_000 // 3600 * 3600,
        "seconds": {"kv_cache": 60.0, "healthy": float("inf")},
        "requests": 10.0,
        "kv_max": float("inf"),
        "running_max": 4.0,
        "kv_bins": [[19, float("inf")]],
    }
    doc = {
        "version": 1,
        "alerts": [
            {
                "rule": "KVDoctorKVCacheBottleneck",
                "labels": {"instance": "gpu-1"},
                "annotations": {},
                "value": float("inf"),
                "active_at": 1_800_000_000.0,
                "state": "firing",
            }
        ],
        "classifier": {},
        "series": [
            {
                "labels": [["__name__", "kvdoctor:itl_seconds:baseline"], ["instance", "gpu-1"]],
                "points": [[1_800_000_000_000, float("inf")], [1_800_000_001_000, 0.02]],
            }
        ],
        "report_history": {
            "source": "kvdoctor serve",
            "keys": [
                {
                    "target": "gpu-1",
                    "model_name": "m",
                    "hours": [hour],
                    "segments": [
                        [
                            1_800_000_000.0,
                            1_800_000_060.0,
                            "kv_cache",
                            "kv_cache",
                            {"kv": float("inf"), "running": 4.0},
                        ]
                    ],
                }
            ],
        },
    }
    state = tmp_path / "state.json"
    state.write_text(json.dumps(doc))
    assert "Infinity" in state.read_text()
    cfg = Config(targets=[TargetSpec(url="http://127.0.0.1:9/metrics", name="gpu-1")], state_file=str(state))
    d = daemons(cfg, load_files(default_rule_files()))
    status, body, _ = report_response(d.history, {"format": ["json"]})
    assert status == 200, body
    entry = strict_json(body.decode())["targets"][0]  # type: ignore[index]
    assert entry["target"] == "gpu-1" and entry["hours"]["kv_cache"] > 0
    assert report_response(d.history, {})[0] == 200  # the HTML page too
    d._persist()  # the next write holds no Infinity either
    strict_json(state.read_text())


def test_ready_says_503_with_the_reason_while_cycles_fail(
    kv_server: ReplayServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = Config(
        targets=[TargetSpec(url=kv_server.url, name="good", http=FAST)], interval_s=1.0, listen="127.0.0.1:0"
    )
    d = watched(Daemon(cfg, load_files(default_rule_files())), "good", kv_server)
    caplog.set_level(logging.INFO, logger="kvdoctor")
    d.start()
    try:
        ready = d.web.url + "-/ready"  # type: ignore[union-attr]
        assert until(lambda: requests.get(ready, timeout=5).status_code == 200)
        real = d.pipeline.evaluate

        def broken(t: float):  # type: ignore[no-untyped-def]  # fault injection: every evaluation raises
            raise MemoryError("cannot allocate the cycle's series")

        monkeypatch.setattr(d.pipeline, "evaluate", broken)
        why = until(lambda: (r := requests.get(ready, timeout=5)).status_code == 503 and r.text)
        assert why.startswith(
            "kvdoctor is not ready: the last 3 evaluation cycles failed: MemoryError: cannot"
        )
        monkeypatch.setattr(d.pipeline, "evaluate", real)
        assert until(lambda: requests.get(ready, timeout=5).status_code == 200)
    finally:
        d.stop()
        d.shutdown()
    failed = [r for r in caplog.records if r.getMessage() == "cycle failed" and r.levelno == logging.ERROR]
    assert len(failed) == 1 and failed[0].exc_info is not None  # the traceback once, not every interval


@pytest.mark.integration
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
def test_the_status_page_shows_what_was_ignored_as_text(tmp_path: Path) -> None:
    state = DaemonState()
    target = Target("bad")
    target.record(1_800_000_000.0, True)
    target.note_invalid(
        "scrape", {"vllm:kv_cache_usage_perc": "+Inf", "vllm:num_requests_running": "-5 (negative)"}
    )
    target.note_step("advise", "ValueError: <img src=x onerror=alert(1)>")  # an error may quote a label value
    state.set_target(target)
    state.publish(
        [Diagnosis("bad", "m", 1_800_000_000.0, "unknown", 1_800_000_000.0)], 1_800_000_000.0, 0.1, []
    )
    server = WebServer(state, make_registry(state), listen="127.0.0.1:0")
    server.start()
    try:
        run = chromium(tmp_path, "--dump-dom", server.url)
    finally:
        server.stop()
    assert run.returncode == 0, run.stderr[-2000:]
    parser = Cards()
    parser.feed(run.stdout)
    text = re.sub(r"\s+", " ", parser.cards["bad"]["text"])
    assert "`vllm:kv_cache_usage_perc` = +Inf ignored" in text
    assert "`vllm:num_requests_running` = -5 (negative) ignored" in text
    assert "advise failed: ValueError: <img src=x onerror=alert(1)>" in text and "<img" not in run.stdout
