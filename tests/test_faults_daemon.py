"""`kvdoctor serve` beside misbehaving targets: the healthy target keeps its cadence and memory stays bounded.

Cadence is read from /api/v1/history (one point per evaluation that diagnosed the target); bounds are generous
because the machine is shared.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvdoctor.replayserver import Playlist, ReplayServer
from tests.faults import FaultServer, refused_url
from tests.support.daemon import Serve, gaps
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


def _cadence(s: Serve, target: str, cycles: int) -> list[float]:
    """Seconds between the next `cycles` + 1 evaluations that diagnosed target."""
    since = time.time()
    points = until(lambda: (p := [t for t in s.history(target) if t >= since])[cycles:] and p,
                   timeout=20 * cycles, step=0.2, what=f"{cycles + 1} evaluations of {target}")  # fmt: skip
    return gaps(points)


@pytest.mark.slow
def test_a_million_series_target_beside_a_healthy_one(good, serve, tmp_path):
    million = FaultServer("million")
    try:
        s = Serve(tmp_path, f"interval: 2s\ntargets:\n  - {{url: '{good.url}', name: good}}\n")
        serve.append(s)
        s.wait_ready()
        until(
            lambda: len(s.history("good")) >= 3, timeout=30, step=0.2, what="three cycles before the baseline"
        )
        baseline = s.rss_mb()
        s.write(f"interval: 2s\ntargets:\n  - {{url: '{good.url}', name: good}}\n  - {{url: '{million.url}', name: million}}\n")  # fmt: skip
        assert s.reload().status_code == 200
        before = set(s.history("good"))
        peak = [0.0]

        def six_cycles() -> list[float]:  # with the fault on, sampling the RSS on the way
            peak[0] = max(peak[0], s.rss_mb())
            new = sorted(t for t in s.history("good") if t not in before)
            return new if len(new) >= 6 else []

        during = gaps(until(six_cycles, timeout=60, step=0.5, what="six cycles with the fault on"))
        # diagnosed every cycle: a slot or two late at worst on a busy machine, never the seconds a fault holds
        assert len(during) >= 4 and statistics.median(during) < 2.8 and max(during) < 6, during
        assert peak[0] < baseline + 100, (baseline, peak)
        targets = {t["name"]: t for t in s.get("/api/v1/targets").json()["data"]}
        assert (
            targets["million"]["up"] is False and "sample_limit exceeded" in targets["million"]["last_error"]
        )
        assert targets["million"]["limit_exceeded_total"]["sample_limit"] >= 3
        assert s.diagnoses()["good"]["bottleneck"] == "kv_cache"
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
        cadence = _cadence(s, "good", 6)  # 12 s at the 2 s interval
        # before: a cycle every ~12 s (the hanging target's 10 s timeout); a busy machine may delay one slot
        assert len(cadence) >= 4 and 1.5 < statistics.median(cadence) < 2.8 and max(cadence) < 6, cadence
        targets = {t["name"]: t for t in s.get("/api/v1/targets").json()["data"]}
        for name in ("hang", "drip"):
            assert targets[name]["up"] is False and "timed out after 2s" in targets[name]["last_error"], name
        assert "connection refused" in targets["refused"]["last_error"]
        log = s.output()
        assert (
            "4 targets (good, hang, drip, …): scrape timeout 10s is longer than the 2s interval; using 2s"
            in log
        )
        assert "maximum number of running instances" not in log and "skipped" not in log
        assert s.get("/api/v1/status").json()["data"]["scheduler_events"].get("missed", 0) == 0
    finally:
        for f in faults.values():
            f.stop()


@pytest.mark.slow
def test_reload_applies_the_interval_or_refuses_what_needs_a_restart(good, serve, tmp_path):
    s = Serve(tmp_path, f"interval: 2s\ntargets: ['{good.url}']\n")
    serve.append(s)
    s.wait_ready()
    name = good.url.split("/")[2]
    slow = _cadence(s, name, 4)  # 8 s at 2 s
    assert 1.5 < statistics.median(slow) < 2.8, slow
    s.write(f"interval: 1s\ntargets: ['{good.url}']\n")
    r = s.reload()
    assert r.status_code == 200 and "interval 2s -> 1s" in r.text
    # the new interval applies from the next slot: measure from the first 1 s gap on
    until(lambda: (g := gaps(s.history(name))) and g[-1] < 1.5, timeout=20, step=0.2, what="a 1 s gap")
    fast = _cadence(s, name, 6)
    assert 0.7 < statistics.median(fast) < 1.5, fast
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
    still = _cadence(s, name, 4)  # the refused reloads changed nothing: still every second
    assert 0.7 < statistics.median(still) < 1.5, still
