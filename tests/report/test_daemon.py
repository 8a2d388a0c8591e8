"""The daemon keeps an hourly history in its state file and serves its capacity report on /report."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kvdoctor.config import Config, TargetSpec
from kvdoctor.daemon.runner import Daemon
from kvdoctor.ingest.fetch import HttpOptions
from kvdoctor.replayserver import Playlist, ReplayServer
from kvdoctor.rules.loader import default_rule_files, load_files
from tests.support.clock import ManualClock
from tests.support.daemon import watched
from tests.support.wait import until

FAST = HttpOptions(connect_timeout=0.5, read_timeout=1.0, total_timeout=1.5, max_bytes=4 * 1024 * 1024)


@pytest.fixture
def kv_server(shared_032: Path) -> Iterator[ReplayServer]:
    server = ReplayServer(Playlist([shared_032 / "kv_bound.jsonl.gz"], start_offset_s=40, loop=True)).start()
    yield server
    server.stop()


def _daemon(url: str, state: Path, clock: Callable[[], float] = time.time) -> Daemon:
    cfg = Config(
        targets=[TargetSpec(url=url, name="gpu-1", http=FAST)],
        interval_s=1.0,
        state_file=str(state),
        listen="127.0.0.1:0",
    )
    return Daemon(cfg, load_files(default_rule_files()), clock=clock)


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def _seconds(d: Daemon, cls: str) -> float:
    return sum(h.seconds.get(cls, 0.0) for kh in d.history.keys.values() for h in kh.hours.values())


def test_history_survives_a_restart_and_is_served(
    kv_server: ReplayServer, shared_032: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    # the first daemon and its server share a hand-moved clock (from now: `watched` fills the window in wall time)
    clock = ManualClock(time.time())
    clocked = ReplayServer(
        Playlist([shared_032 / "kv_bound.jsonl.gz"], start_offset_s=40, loop=True), clock=clock
    ).start()
    try:
        d = watched(_daemon(clocked.url, state, clock), "gpu-1", clocked)
        try:
            for _ in range(3):
                d.cycle()
                clock.advance(1.0)  # the replay serves a new scrape each second; rates need two
        finally:
            d.shutdown()
    finally:
        clocked.stop()
    assert _seconds(d, "kv_cache") >= 1.0
    saved = json.loads(state.read_text())["report_history"]
    assert [k["target"] for k in saved["keys"]] == ["gpu-1"]
    d2 = _daemon(kv_server.url, state)
    assert _seconds(d2, "kv_cache") == _seconds(d, "kv_cache")  # restored, not started over
    d2.start()
    try:
        until(
            lambda: _seconds(d2, "kv_cache") >= _seconds(d, "kv_cache") + 3,
            timeout=20,
            step=0.2,
            what="three more kv_cache seconds in the restored history",
        )
        base = d2.web.url
        status, ctype, page = _get(base + "report")
        assert status == 200 and ctype.startswith("text/html")
        assert "chart-timeline" in page and "gpu-1" in page
        # the daemon's CSP refuses inline scripts: the page loads the vendored Chart.js from the daemon
        assert '<script src="report/static/chart.umd.min.js">' in page
        assert "Chart.js v4.6.1" in _get(base + "report/static/chart.umd.min.js")[2]
        status, ctype, body = _get(base + "report?format=json&gpu_hour_cost=2.5")
        doc = json.loads(body)
        entry = doc["targets"][0]
        assert entry["target"] == "gpu-1" and entry["hours"]["kv_cache"] > 0
        assert entry["generation_tokens"] > 0  # integrated from the 1m rate
        assert entry["cost_usd"] == pytest.approx(entry["hours"]["total"] * 2.5, abs=0.01)
        assert any(i["class"] == "kv_cache" for i in doc["incidents"])
        status, _, md = _get(base + "report?format=md")
        assert status == 200 and md.startswith("# kvdoctor capacity review")
        status, _, err = _get(base + "report?gpu_hour_cost=2EUR")
        assert status == 400 and "expected a price in US dollars" in err
        _, _, index = _get(base)
        assert 'href="report"' in index  # the status page links to it
    finally:
        d2.stop_event.set()
        d2.shutdown()
