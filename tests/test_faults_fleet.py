"""A daemon watching 200 replayed targets, a tenth of them hanging, dripping or refusing: every cycle fits the
interval and every live target is diagnosed as its recording shows."""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest

from kvdoctor.config import Config, TargetSpec
from kvdoctor.daemon.runner import Daemon
from kvdoctor.replayserver import Playlist, ReplayServer
from kvdoctor.rules.loader import default_rule_files, load_files
from tests.faults import FaultServer, refused_url
from tests.support.wait import until

DEMO = Path(__file__).resolve().parents[1] / "kvdoctor" / "demo"
# recording, where to start playing it, the class it shows there
LIVE = {"kv_bound": (40.0, "kv_cache"), "healthy": (85.0, "healthy")}
TARGETS, SLOW = 200, 20
INTERVAL = 10.0  # the rule evaluation of 180 targets takes seconds on a busy 2-core machine today


@pytest.mark.slow
def test_two_hundred_targets_a_tenth_slow_or_dead_every_cycle_within_the_interval():
    servers = {
        name: ReplayServer(Playlist([DEMO / f"{name}.jsonl.gz"], start_offset_s=off, loop=True)).start()
        for name, (off, _) in LIVE.items()
    }
    faults = {m: FaultServer(m) for m in ("hang", "drip")}
    try:
        targets, expected = [], {}
        for i in range(TARGETS - SLOW):
            rec = list(LIVE)[i % len(LIVE)]
            name = f"{rec}-{i:03d}"
            targets.append(TargetSpec(url=f"{servers[rec].url}?i={i}", name=name))  # default 10 s timeout
            expected[name] = LIVE[rec][1]
        for i in range(SLOW):
            kind = ("hang", "drip", "refused")[i % 3]
            url = refused_url() if kind == "refused" else f"{faults[kind].url}?i={i}"
            targets.append(TargetSpec(url=url, name=f"{kind}-{i:03d}"))
        d = Daemon(Config(targets=targets, interval_s=INTERVAL), load_files(default_rule_files()))
        d.start(web=False)
        cycles: dict[float, float] = {}
        deadline = time.monotonic() + 6 * INTERVAL
        pause = threading.Event()
        while time.monotonic() < deadline:
            snap = d.state.snapshot()
            if snap.evaluation_ts is not None:
                cycles[snap.evaluation_ts] = snap.cycle_duration_s
            pause.wait(0.25)  # sample each cycle's duration as the daemon publishes it, for the whole run
        diagnoses = {x.target: x for x in d.state.snapshot().diagnoses}
        stats = d.state.snapshot().targets
        events = d.state.snapshot().scheduler_events
        d.shutdown()
    finally:
        for s in servers.values():
            s.stop()
        for f in faults.values():
            f.stop()
    assert len(cycles) >= 5, cycles
    # every cycle within the interval: an overrun skips the slots it ate and counts them missed
    assert events.get("missed", 0) == 0 and events.get("error", 0) == 0, (events, cycles)
    wrong = {n: diagnoses[n].bottleneck for n, want in expected.items() if diagnoses[n].bottleneck != want}
    assert not wrong, wrong
    assert all(stats[n].up for n in expected)
    for name in (t.name for t in targets[TARGETS - SLOW :]):
        assert stats[name].up is False and diagnoses[name].bottleneck == "unknown", name


def test_a_cycle_near_the_interval_is_exported_and_warned_about_once(caplog):
    caplog.set_level(logging.INFO, logger="kvdoctor")
    # an interval no rule evaluation fits in: every cycle overruns
    d = Daemon(
        Config(targets=[TargetSpec(url=refused_url(), name="x")], interval_s=0.002),
        load_files(default_rule_files()),
    )
    d.start(web=False)

    def overran() -> bool:
        warned = any("close to falling behind" in r.getMessage() for r in caplog.records)
        return warned and d.state.snapshot().scheduler_events.get("missed", 0) > 1

    try:  # a few cycles: the first overrun warns, the ones after it must not warn again
        until(overran, timeout=20, step=0.05, what="an overrun warning and missed slots")
        snap = d.state.snapshot()
        until(
            lambda: d.state.snapshot().evaluation_ts != snap.evaluation_ts,
            timeout=20,
            step=0.05,
            what="one more cycle after the warning",
        )
    finally:
        d.shutdown()
    text = generate_latest(d.registry).decode()
    duration = float(re.search(r"^kvdoctor_cycle_duration_seconds (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
    assert duration > 0 and "kvdoctor_cycle_interval_seconds 0.002" in text
    warnings = [r.getMessage() for r in caplog.records if "close to falling behind" in r.getMessage()]
    assert len(warnings) == 1 and "of the 0.002s interval" in warnings[0]  # said once, not every cycle
    missed = float(
        re.search(r'^kvdoctor_scheduler_events_total\{event="missed"\} (\S+)$', text, re.M).group(1)
    )  # type: ignore[union-attr]
    assert missed > 0  # the slots the overlong cycles ate are skipped, not run back to back
