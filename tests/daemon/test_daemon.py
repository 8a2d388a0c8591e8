"""The daemon under faults: bad targets are marked down, never diagnosed as limited, and never disturb others."""

from __future__ import annotations

import re
import time

import pytest

from kvdoctor.config import Config, TargetSpec
from kvdoctor.daemon.runner import Daemon
from kvdoctor.daemon.scrape import capped
from kvdoctor.ingest.fetch import HttpOptions
from kvdoctor.replayserver import Playlist, ReplayServer
from kvdoctor.rules.loader import default_rule_files, load_files
from tests.faults import FaultServer, refused_url
from tests.support.clock import ManualClock
from tests.support.daemon import watched
from tests.support.logs import kvdoctor_said

FAST = HttpOptions(connect_timeout=1.0, read_timeout=1.0, total_timeout=1.5, max_bytes=4 * 1024 * 1024)
# For targets that answer: their verdict must not depend on how fast a busy machine serves them.
ROOMY = HttpOptions(connect_timeout=10.0, read_timeout=10.0, total_timeout=10.0, max_bytes=4 * 1024 * 1024)
MODES = ["hang", "drip", "garbage", "truncate", "huge", "html"]


@pytest.fixture
def kv_server(shared_032):
    server = ReplayServer(Playlist([shared_032 / "kv_bound.jsonl.gz"], start_offset_s=40, loop=True)).start()
    yield server
    server.stop()


def _daemon(
    targets: list[TargetSpec], clock: ManualClock | None = None, interval_s: float = 1.0, **kw
) -> Daemon:
    cfg = Config(targets=targets, interval_s=interval_s, **kw)
    return Daemon(cfg, load_files(default_rule_files()), clock=clock or time.time)


def test_faulty_targets_go_down_without_disturbing_a_good_one(kv_server):
    faults = {m: FaultServer(m) for m in MODES}
    try:
        # Only the hanging and dripping targets get short timeouts (what ends them is the point); the others,
        # and the interval that caps every timeout, leave a loaded machine room to answer, so each fault is
        # told by its own error and never by a timeout.
        timeouts = {m: FAST if m in ("hang", "drip") else ROOMY for m in MODES}
        targets = [TargetSpec(url=kv_server.url, name="good", http=ROOMY)]
        targets += [TargetSpec(url=f.url, name=m, http=timeouts[m]) for m, f in faults.items()]
        targets.append(TargetSpec(url=refused_url(), name="refused", http=ROOMY))
        d = watched(_daemon(targets, interval_s=30.0), "good", kv_server)
        try:
            for _ in range(3):
                diagnoses = {x.target: x for x in d.cycle()}
        finally:
            d.shutdown()
        assert diagnoses["good"].bottleneck == "kv_cache"
        stats = d.state.snapshot().targets
        for name in [*MODES, "refused"]:
            assert diagnoses[name].bottleneck == "unknown", name
            assert [f.name for f in diagnoses[name].findings][:1] == ["target_down"], name
            assert stats[name].up is False and stats[name].errors_total == 3, name
        assert "50" in stats["huge"].last_error or "limit" in stats["huge"].last_error
        assert "content type" in stats["html"].last_error
        assert "UTF-8" in stats["garbage"].last_error
        assert "truncated" in stats["truncate"].last_error
        # a hanging or dripping target is ended by its own timeouts (1 s read, 1.5 s in all), not the server's 30 s
        for name in ("hang", "drip"):
            assert re.search(r"timed out after 1(\.5)?s", stats[name].last_error), stats[name].last_error
        assert stats["good"].up and stats["good"].errors_total == 0
    finally:
        for f in faults.values():
            f.stop()


def test_nan_and_duplicate_series_do_not_break_the_scrape():
    servers = {m: FaultServer(m) for m in ("nan", "dupes")}
    try:
        # room to answer on a loaded machine: the test is about what NaN and duplicates do, not speed
        d = _daemon([TargetSpec(url=s.url, name=m, http=ROOMY) for m, s in servers.items()], interval_s=30.0)
        try:
            for _ in range(2):
                diagnoses = {x.target: x for x in d.cycle()}
        finally:
            d.shutdown()
        assert all(s.up for s in d.state.snapshot().targets.values())
        assert all(x.bottleneck not in ("kv_cache", "batch_cap", "compute") for x in diagnoses.values())
    finally:
        for s in servers.values():
            s.stop()


def test_restart_with_counter_reset_is_not_a_false_diagnosis(shared_032):
    # healthy light load, then the server restarts (counters from zero) into the same light load
    path = shared_032 / "healthy.jsonl.gz"
    clock = ManualClock()  # the server plays and the daemon stamps on one clock: 0.4 s a cycle, no sleeping
    server = ReplayServer(Playlist([path, path], start_offset_s=85), speed=1.0, clock=clock).start()
    try:
        d = _daemon([TargetSpec(url=server.url, name="h", http=FAST)], clock)
        seen = []
        try:
            for _ in range(80):  # 32 s: a verdict needs a 15 s window, before and after the restart
                seen += [x.bottleneck for x in d.cycle()]
                clock.advance(0.4)
        finally:
            d.shutdown()
        assert "healthy" in seen
        assert not {"kv_cache", "batch_cap", "compute"} & set(seen), seen
        rates = d.pipeline.store.select("kvdoctor:generation_tokens:rate1m")
        assert all(v is None or v >= 0 for s in rates for v in s.vs)  # a reset never reads as a negative rate
    finally:
        server.stop()


def test_state_file_keeps_firing_state_across_a_restart(kv_server, tmp_path):
    state = tmp_path / "state.json"
    d = watched(
        _daemon([TargetSpec(url=kv_server.url, name="good", http=FAST)], state_file=str(state)),
        "good",
        kv_server,
    )
    try:
        for _ in range(2):
            first = d.cycle()
        since = first[0].since
        assert first[0].bottleneck == "kv_cache" and state.exists()
        d2 = _daemon([TargetSpec(url=kv_server.url, name="good", http=FAST)], state_file=str(state))
        try:
            again = d2.cycle()
        finally:
            d2.shutdown()
        assert again[0].bottleneck == "kv_cache"
        assert again[0].since == since  # not re-announced as a new incident
        assert any(a.state == "firing" for a in d2.pipeline.rules.active.values())
    finally:
        d.shutdown()


def test_reload_with_a_broken_rule_file_keeps_the_last_good(kv_server, tmp_path):
    rules = tmp_path / "rules.yml"
    rules.write_text((default_rule_files()[0]).read_text())
    cfg_file = tmp_path / "kvdoctor.yml"
    cfg_file.write_text(f"targets: ['{kv_server.url}']\nrules: ['{rules}']\n")
    from kvdoctor.config.schema import Overrides
    from kvdoctor.daemon.runner import load_everything

    cfg, groups = load_everything(str(cfg_file), Overrides())
    d = watched(Daemon(cfg, groups, str(cfg_file), Overrides()), cfg.targets[0].name, kv_server)
    try:
        assert d.cycle()[0].bottleneck == "kv_cache"
        rules.write_text(
            "groups:\n  - name: x\n    rules:\n      - record: bad\n        expr: sum(rate(x[5m])\n"
        )
        ok, message = d.reload()
        assert not ok and f"{rules}:4" in message and "unclosed left parenthesis" in message
        assert d.state.snapshot().reload_ok is False
        assert d.cycle()[0].bottleneck == "kv_cache"  # the old pack still runs
        rules.write_text((default_rule_files()[0]).read_text())
        assert d.reload()[0] and d.state.snapshot().reload_ok is True
    finally:
        d.shutdown()


def test_a_timeout_cut_to_the_interval_names_all_targets_or_says_more_exist(caplog):
    def specs(names):
        return {
            n: TargetSpec(url=f"http://{n}:8000/metrics", name=n, http=HttpOptions(total_timeout=3.0))
            for n in names
        }

    with caplog.at_level("WARNING"):
        out = capped(specs(["a", "b", "c"]), 2.0, set())
        capped(specs(["a", "b", "c", "d"]), 2.0, set())
    assert all(s.http.total_timeout == 2.0 for s in out.values())
    lines = kvdoctor_said(caplog.records)
    assert lines[0].startswith("3 targets (a, b, c): scrape timeout 3s is longer than the 2s interval")
    assert lines[1].startswith("4 targets (a, b, c, …): scrape timeout 3s")
