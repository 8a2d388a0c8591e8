"""`kvdoctor serve` beside misbehaving targets: the healthy target keeps being scraped and diagnosed, memory
stays bounded, and a reload applies its interval.

These tests assert what happens, never how fast: the cycle gaps (the healthy target's cadence beside the
faults, the interval after a reload) are measured by `benchmarks/bench_daemon_faults.py`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvdoctor.replayserver import Playlist, ReplayServer
from tests.faults import FaultServer, refused_url
from tests.support.daemon import Serve
from tests.support.wait import until

DEMO = Path(__file__).resolve().parents[1] / "kvdoctor" / "demo"


@pytest.fixture
def good() -> Iterator[ReplayServer]:
    server = ReplayServer(Playlist([DEMO / "kv_bound.jsonl.gz"], start_offset_s=40, loop=True)).start()
    yield server
    server.stop()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[list[Serve]]:
    running: list[Serve] = []
    yield running
    for s in running:
        s.stop()


def _targets(s: Serve) -> dict[str, Any]:
    return {t["name"]: t for t in s.get("/api/v1/targets").json()["data"]}


def _evaluations(s: Serve, target: str, after: float, n: int) -> list[float]:
    """The times of the first n evaluations of target after `after` (waits for them)."""

    def first_n() -> list[float]:
        points = [t for t in s.history(target) if t > after]
        return points[:n] if len(points) >= n else []

    return until(first_n, timeout=20 * n, step=0.2, what=f"{n} evaluations of {target}")


@pytest.mark.slow
def test_a_million_series_target_beside_a_healthy_one(good, serve, tmp_path):
    million = FaultServer("million")
    try:
        s = Serve(tmp_path, f"interval: 2s\ntargets:\n  - {{url: '{good.url}', name: good}}\n")
        serve.append(s)
        s.wait_ready()
        _evaluations(s, "good", 0.0, 3)  # three cycles before the baseline
        baseline = s.rss_mb()
        s.write(
            f"interval: 2s\ntargets:\n  - {{url: '{good.url}', name: good}}\n  - {{url: '{million.url}', name: million}}\n"
        )
        assert s.reload().status_code == 200
        peak = [0.0]

        def refused_three_times() -> bool:  # with the fault on, sampling the RSS on the way
            peak[0] = max(peak[0], s.rss_mb())
            million = _targets(s).get("million", {})
            return bool(million.get("limit_exceeded_total", {}).get("sample_limit", 0) >= 3)

        until(refused_three_times, timeout=60, step=0.5, what="three refused scrapes of the million series")
        assert peak[0] < baseline + 100, (baseline, peak)
        # every evaluation that judged the fault judged the good target too, from scrapes that all worked
        faulted = s.history("million")
        assert len(faulted) >= 2 and set(faulted) <= set(s.history("good")), (faulted, s.history("good"))
        targets = _targets(s)
        assert targets["good"]["up"] is True and targets["good"]["errors_total"] == 0, targets["good"]
        assert (
            targets["million"]["up"] is False and "sample_limit exceeded" in targets["million"]["last_error"]
        )
        # a loaded machine may starve one window while the million series are parsed: the verdict comes back
        until(
            lambda: s.diagnoses()["good"]["bottleneck"] == "kv_cache", timeout=30, step=0.5, what="kv_cache"
        )
        metrics = s.get("/metrics").text
        assert 'kvdoctor_target_scrape_limit_exceeded_total{limit="sample_limit",target="million"}' in metrics
        s.write(f"interval: 2s\ntargets:\n  - {{url: '{good.url}', name: good}}\n")  # the fault ends
        assert s.reload().status_code == 200
        until(lambda: s.rss_mb() < baseline + 100, timeout=20, step=0.5, what="RSS back near the baseline")
    finally:
        million.stop()


@pytest.mark.slow
def test_hanging_and_dripping_targets_do_not_slow_a_healthy_one(good, serve, tmp_path):
    faults = {m: FaultServer(m) for m in ("hang", "drip")}
    try:
        urls = {"good": good.url, **{m: f.url for m, f in faults.items()}, "refused": refused_url()}
        targets = "".join(f"  - {{url: '{u}', name: {n}}}\n" for n, u in urls.items())
        s = Serve(tmp_path, f"interval: 2s\ntargets:\n{targets}")  # default 10 s timeouts
        serve.append(s)
        s.wait_ready()
        judged = _evaluations(s, "good", 0.0, 5)
        state = _targets(s)
        # the faults' scrapes end at their timeout, cut to the interval, and are tried again every slot; the
        # good target's own scrapes are never held up into a timeout by them
        for name in ("hang", "drip"):
            assert state[name]["up"] is False and "timed out after 2s" in state[name]["last_error"], name
            assert state[name]["errors_total"] >= 2, state[name]
        assert "connection refused" in state["refused"]["last_error"]
        assert state["good"]["up"] is True and state["good"]["errors_total"] == 0, state["good"]
        # judged in every evaluation that judged the faults, and told kv_cache once it has a 15 s window
        assert len(judged) == 5 and set(s.history("hang")) <= set(s.history("good"))
        until(
            lambda: s.diagnoses()["good"]["bottleneck"] == "kv_cache", timeout=60, step=0.5, what="kv_cache"
        )
        assert _targets(s)["good"]["errors_total"] == 0
        log = s.output()
        assert (
            "4 targets (good, hang, drip, …): scrape timeout 10s is longer than the 2s interval; using 2s"
            in log
        )
        assert "maximum number of running instances" not in log and "skipped" not in log
    finally:
        for f in faults.values():
            f.stop()


@pytest.mark.slow
def test_reload_applies_the_interval_or_refuses_what_needs_a_restart(good, serve, tmp_path):
    s = Serve(tmp_path, f"interval: 2s\ntargets: ['{good.url}']\n")
    serve.append(s)
    s.wait_ready()
    name = good.url.split("/")[2]
    _evaluations(s, name, 0.0, 2)
    assert s.get("/api/v1/status").json()["data"]["cycle"]["interval_s"] == 2.0
    s.write(f"interval: 1s\ntargets: ['{good.url}']\n")
    r = s.reload()
    assert r.status_code == 200 and "interval 2s -> 1s" in r.text
    after = max(s.history(name))
    _evaluations(s, name, after, 2)  # cycles go on under the new interval
    assert s.get("/api/v1/status").json()["data"]["cycle"]["interval_s"] == 1.0
    assert "kvdoctor_cycle_interval_seconds 1.0" in s.get("/metrics").text

    s.config.write_text(f"listen: 127.0.0.1:{s.port + 1}\ninterval: 1s\ntargets: ['{good.url}']\n")
    refused = s.reload()
    assert refused.status_code == 500 and "listen" in refused.text and "needs a restart" in refused.text
    s.config.write_text(s.config.read_text() + "job: [unclosed\nlog: {level: info}\n")
    broken = s.reload()
    assert f"{s.config}:4: invalid YAML" in broken.text, broken.text
    status = s.get("/api/v1/status").json()["data"]["reload"]
    attempts = status["attempts"]
    assert [a["ok"] for a in attempts] == [True, False, False]
    assert all(isinstance(a["ts"], float) for a in attempts) and status["ts"] == attempts[-1]["ts"]
    assert status["last_success_ts"] == attempts[0]["ts"]
    assert "kvdoctor_config_last_reload_successful 0.0" in s.get("/metrics").text
    # the refused reloads changed nothing: still on the old port, the 1 s interval, and cycling
    _evaluations(s, name, max(s.history(name)), 2)
    assert s.get("/api/v1/status").json()["data"]["cycle"]["interval_s"] == 1.0
