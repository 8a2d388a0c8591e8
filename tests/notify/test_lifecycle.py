"""Lifecycle: pending → firing → resolved, hysteresis, grouping, updates, repeats, silences, state round trip."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from kvdoctor.notify.config import NotifyConfig, parse_notify_config
from kvdoctor.notify.lifecycle import Lifecycle
from kvdoctor.verdicts import Diagnosis, Finding
from tests.notify_support.diagnoses import MODEL, T0, TARGET, kv_incident, storm

CFG = NotifyConfig()


def healthy(t: float, target: str = TARGET) -> Diagnosis:
    return Diagnosis(target, MODEL, t, "healthy", T0, [])


def with_findings(
    t: float, *findings: Finding, target: str = TARGET, bottleneck: str = "kv_cache"
) -> Diagnosis:
    return Diagnosis(target, MODEL, t, bottleneck, T0, list(findings))


def kinds(lc: Lifecycle, diagnoses: list[Diagnosis]) -> list[str]:
    return [e.kind for d in diagnoses for e in lc.observe([d], d.t)]


def test_kv_incident_fires_once_updates_few_resolves_once() -> None:
    lc = Lifecycle(CFG)
    events = [e for d in kv_incident() for e in lc.observe([d], d.t)]
    got = [e.kind for e in events]
    assert got[0] == "firing" and got[-1] == "resolved" and got.count("firing") == got.count("resolved") == 1
    assert 2 <= len(events) <= 6
    assert len({e.incident for e in events}) == 1 and [e.seq for e in events] == list(
        range(1, len(events) + 1)
    )
    first = events[0]
    assert first.t == T0 + 12 * 15  # `for` 1m after the finding started at cycle 8
    assert first.alerts[0].finding == "kv_cache" and first.alerts[0].evidence["batch_cap_configured"] == 256
    assert events[-1].t == T0 + (8 + 23 + 4) * 15  # last seen + 1m of absence


def test_pending_shorter_than_for_never_notifies() -> None:
    seq = kv_incident(bound=3)
    assert kinds(Lifecycle(CFG), seq) == []


def test_flapping_within_hysteresis_does_not_resolve() -> None:
    seq = kv_incident(bound=40, storm_at=(0, 0))
    for i in range(15, 40, 5):  # a healthy blip every 75 s
        seq[8 + i] = healthy(seq[8 + i].t)
    got = kinds(Lifecycle(CFG), seq)
    assert got.count("firing") == 1 and got.count("resolved") == 1


def test_grouping_per_target_and_separate_targets() -> None:
    lc = Lifecycle(CFG)
    f = kv_incident()[20].findings[0]
    out = []
    for k in range(8):
        t = T0 + 15 * k
        out += lc.observe([with_findings(t, f, storm(T0)), with_findings(t, f, target="vllm-b:8000")], t)
    assert [(e.kind, e.group) for e in out] == [
        ("firing", "target=vllm-a:8000"),
        ("firing", "target=vllm-b:8000"),
    ]
    assert [a.finding for a in out[0].alerts] == ["kv_cache", "preemption_storm"]  # the limit first


def test_target_down_holds_other_findings() -> None:
    lc = Lifecycle(NotifyConfig(for_overrides={"target_down": 0}))
    f = kv_incident()[20].findings[0]
    got = [e.kind for k in range(6) for e in lc.observe([with_findings(T0 + 15 * k, f)], T0 + 15 * k)]
    down = Finding("target_down", "critical", "scrape failed")
    for k in range(6, 30):
        t = T0 + 15 * k
        got += [e.kind for e in lc.observe([with_findings(t, down, bottleneck="unknown")], t)]
    assert got == ["firing", "update"]  # target_down joins the incident; kv_cache is held, not resolved
    assert {a.finding for a in lc.alerts.values()} == {"kv_cache", "target_down"}


def test_repeat_interval_while_firing() -> None:
    lc = Lifecycle(NotifyConfig(update_interval=1e9))
    f = kv_incident()[20].findings[0]
    got = [
        (e.kind, e.t - T0)
        for k in range(4 * 240 + 10)
        for e in lc.observe([with_findings(T0 + 15 * k, f)], T0 + 15 * k)
    ]
    assert got == [("firing", 60), ("repeat", 60 + 4 * 3600)]


def test_silence_suppresses_then_announces_when_it_expires() -> None:
    section = {"silences": [{"matchers": {"finding": "kv_cache"}, "ends": T0 + 600}]}
    cfg, errors = parse_notify_config(section, {})
    assert errors == []
    lc = Lifecycle(cfg)
    f = kv_incident()[20].findings[0]
    got = [
        (e.kind, e.t - T0)
        for k in range(60)
        for e in lc.observe([with_findings(T0 + 15 * k, f)], T0 + 15 * k)
    ]
    assert got == [("firing", 600)]
    assert [a.finding for a in lc.active_alerts()] == ["kv_cache"]


def test_routes_pick_channel_by_severity() -> None:
    cfg, _ = parse_notify_config({"routes": [{"matchers": ['severity="critical"'], "channel": "#pager"}]}, {})
    lc = Lifecycle(cfg)
    crit = Finding("kv_cache", "critical", "full", bottleneck="kv_cache")
    ev = [e for k in range(6) for e in lc.observe([with_findings(T0 + 15 * k, crit)], T0 + 15 * k)]
    assert ev[0].channel == "#pager"


def test_state_round_trip_neither_forgets_nor_reannounces() -> None:
    seq = kv_incident()
    ref = Lifecycle(CFG)
    whole = [(e.kind, e.key) for d in seq for e in ref.observe([d], d.t)]
    for cut in range(len(seq)):
        lc, got = Lifecycle(CFG), []
        for d in seq[:cut]:
            got += [(e.kind, e.key) for e in lc.observe([d], d.t)]
        lc = Lifecycle.from_state(CFG, json.loads(json.dumps(lc.to_state())))
        for d in seq[cut:]:
            got += [(e.kind, e.key) for e in lc.observe([d], d.t)]
        assert got == whole


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=80))
def test_any_on_off_pattern_alternates_firing_and_resolved(pattern: list[bool]) -> None:
    lc = Lifecycle(CFG)
    f = kv_incident()[20].findings[0]
    f.since = None
    got = []
    for k, on in enumerate([*pattern, *[False] * 6]):
        t = T0 + 15 * k
        got += [e.kind for e in lc.observe([with_findings(t, f) if on else healthy(t)], t)]
    opens = [k for k in got if k in ("firing", "resolved")]
    assert opens == ["firing", "resolved"] * (len(opens) // 2)
    assert "update" not in got and lc.groups == {} and lc.alerts == {}
