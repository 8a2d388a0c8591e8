"""What the daemon holds is bounded by the retention, whatever the fleet, and a reload to fewer targets frees the
others' share at once: series, samples, the what-if's snapshots and what is kept per target. Counts, not timings
(benchmarks/fleet_http_rss.py measures RSS and cycle times on real scrapes)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvdoctor.config.load import load_config
from kvdoctor.daemon.runner import Daemon
from kvdoctor.promql.values import _GROUPINGS, _MEMOS
from kvdoctor.replayserver import Playlist, ReplayServer
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.samples import Sample
from kvdoctor.store import Store
from kvdoctor.whatif.advisor import Advisor
from kvdoctor.whatif.effectcache import Key
from tests.support.clock import ManualClock
from tests.support.wait import until

DEMO = Path(__file__).resolve().parents[1] / "kvdoctor" / "demo"
INTERVAL, RETENTION = 15.0, 180.0


def _samples_held(store: Store) -> int:
    return sum(len(s._t) for s in store.select(None))


def test_store_samples_stop_growing_once_the_retention_is_full():
    st = Store(retention_s=RETENTION)
    held = []
    for k in range(60):  # 15 minutes of 100 targets at 15 s
        for i in range(100):
            st.ingest(f"t{i}", k * 15_000, [Sample("g", (("instance", f"t{i}"),), float(k))])
        held.append(_samples_held(st))
    per_window = RETENTION / INTERVAL + 2  # both ends, and a trim every retention/8
    assert max(held[20:]) <= 100 * per_window and max(held[40:]) <= max(held[20:40])


def test_dropping_sources_removes_their_series_and_the_rules_results_about_them():
    st = Store(retention_s=RETENTION)
    for k in range(3):
        for i in range(10):
            st.ingest(f"t{i}", k * 15_000, [Sample("g", (("instance", f"t{i}"),), 1.0)])
        rule = [Sample("r", (("instance", f"t{i}"),), 2.0) for i in range(10)]
        st.ingest("rule:r", k * 15_000, rule)
    assert len(st) == 20
    assert st.drop_sources({f"t{i}" for i in range(2, 10)}) == 16
    assert sorted(dict(s.labels)["instance"] for s in st.select("r")) == ["t0", "t1"]
    # the rule writes its next result for the two left: the fast path rebuilt, nothing lost
    st.ingest("rule:r", 45_000, [Sample("r", (("instance", f"t{i}"),), 3.0) for i in range(2)])
    assert [s.at(45_000) for s in st.sorted_series("r")] == [3.0, 3.0]


@pytest.fixture
def servers() -> Iterator[list[ReplayServer]]:
    running = [
        ReplayServer(Playlist([DEMO / f"{name}.jsonl.gz"], start_offset_s=40, loop=True), speed=15.0).start()
        for name in ("kv_bound", "healthy")
    ]
    yield running
    for s in running:
        s.stop()


def _config(path: Path, servers: list[ReplayServer], n: int) -> None:
    lines = [f"interval: {INTERVAL:g}s", f"retention: {RETENTION:g}s", "targets:"]
    lines += [f"  - {{url: '{servers[i % 2].url}?i={i}', name: t{i:02d}}}" for i in range(n)]
    path.write_text("\n".join(lines) + "\n")


def test_a_daemon_holds_a_retention_and_a_reload_to_fewer_targets_frees_the_rest(servers, tmp_path):
    cfg_path = tmp_path / "kvdoctor.yml"
    _config(cfg_path, servers, 12)
    clock = ManualClock()
    d = Daemon(load_config(str(cfg_path)), load_files(default_rule_files()), str(cfg_path), clock=clock)
    try:
        counts = []
        for _ in range(20):  # 5 minutes on the daemon's clock: the 3-minute retention fills, then holds
            clock.advance(INTERVAL)
            d.cycle()
            counts.append((len(d.pipeline.store), _samples_held(d.pipeline.store)))
        assert all(d.pipeline.targets[f"t{i:02d}"].up for i in range(12))
        series, samples = counts[-1]
        assert samples <= series * (RETENTION / INTERVAL + 2)  # every series holds at most a retention
        assert counts[-1][1] <= counts[15][1] * 1.05  # flat once the retention is full
        history = d.pipeline.advisor._history  # type: ignore[union-attr]
        assert max(len(h) for h in history.values()) <= RETENTION / INTERVAL + 1
        assert max(len(r) for r in d.state._history.values()) <= RETENTION / INTERVAL + 1  # the page's charts
        _config(cfg_path, servers, 2)
        assert d.reload()[0]
        left = len(d.pipeline.store)
        assert left <= series / 5  # 2 of 12 targets: their own series and the rules' results about them
        instances = {dict(s.labels).get("instance") for s in d.pipeline.store.select(None)}
        assert instances <= {"t00", "t01", None}
        assert set(history) <= {"t00", "t01"}
        clock.advance(INTERVAL)
        d.cycle()
        assert d.pipeline.targets["t00"].up and len(d.pipeline.store) <= left * 1.1
        # the evaluator's memos of label sets (by/on projections, histogram buckets) hold the two left, not the ten
        memo = {dict(k).get("instance") for g in (*_GROUPINGS.values(), *_MEMOS) for k in g}
        assert "t00" in memo and memo <= {"t00", "t01", None}
    finally:
        d.shutdown()


def test_a_prediction_asked_for_again_while_it_waits_is_queued_once():
    adv = Advisor(background=True)
    adv._history["t"] = deque()
    gate, done = threading.Event(), []

    def compute(key: object, t: float, history: object = None, simulate: bool = True) -> None:
        gate.wait(10)
        done.append(key)

    adv._compute = compute  # type: ignore[method-assign]
    key = Key("t", (("max_num_seqs", 16.0),))
    for cycle in range(50):  # a fleet slower to simulate than its cycles: asked every cycle
        adv._submit(key, float(cycle))
    assert adv.stats()["queued"] <= 1
    gate.set()
    until(lambda: done, timeout=10.0, what="the prediction to be computed")
    assert done == [key] and adv.stats()["dropped"] == 0


def test_a_full_prediction_queue_drops_the_oldest_and_counts_it():
    adv = Advisor(background=True, max_queue=3)
    adv._history["t"] = deque()
    gate, done = threading.Event(), []

    def compute(key: object, t: float, history: object = None, simulate: bool = True) -> None:
        gate.wait(10)
        done.append(key)

    adv._compute = compute  # type: ignore[method-assign]
    keys = [Key("t", (("max_num_seqs", float(n)),)) for n in range(10)]
    adv._submit(keys[0], 0.0)
    until(lambda: adv.stats()["queued"] == 0, timeout=10.0, what="the worker to take the first request")
    for k in keys[1:]:  # nine more while it computes: three fit, six are dropped oldest first
        adv._submit(k, 1.0)
    assert adv.stats()["dropped"] == 6 and adv.stats()["queued"] == 3
    gate.set()
    until(lambda: len(done) == 4, timeout=10.0, what="the queue to drain")
    assert done == [keys[0], *keys[7:]]  # the newest requests were kept
