"""Evidence fades with its condition: rates come from no longer than the condition held, findings end within 60 s.

Real vLLM 0.32 recordings: the KV-bound bursts (preemptions stop when the burst's load ends, then a lull), the prefix-head
recording composed in the other order (a per-request head first, then the same prompts byte-stable), and the drains
after a KV-bound phase on two model shapes (vllm-0.32-cpu-margins: 100 s of idle scrapes after the phase).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import labelled_windows
from tests.support import compose
from tests.support.replays import replayed
from tests.support.timeline import WITHIN_S

FIELD = Path(__file__).resolve().parents[1] / "fixtures" / "recordings" / "vllm-0.32-cpu-field"
CADENCES = pytest.mark.parametrize("cadence", [0.0, 15.0], ids=["native", "scrape15s"])
HELD_S = 30.0  # kvdoctor:preemptions:rate_held falls back to the last 30 s once preemption stopped
DRAINS = [
    w for w in labelled_windows() if w["file"].endswith("_kv_drain.jsonl.gz") and w["expected"] == "kv_cache"
]


def _labels(file: str) -> list[dict]:
    return [e for e in json.loads((FIELD / "labels.json").read_text()) if e["file"] == file]


def _run(path: Path, cadence: float) -> list[tuple[float, str, dict, set[str]]]:
    out = []
    for c in replayed(path, cadence):
        for d in c.diagnoses:
            if d.model_name:
                out.append((c.t, d.bottleneck, d.evidence, {f.name for f in d.findings}))
    return out


@CADENCES
def test_preemption_evidence_and_storm_end_with_the_burst(cadence):
    burst = next(e for e in _labels("bursts.jsonl.gz") if e["expected"] == "kv_cache")
    end, next_load = burst["load_end"], burst["load_end"] + 60.0
    tl = _run(FIELD / "bursts.jsonl.gz", cadence)
    during = [ev.get("preemptions_per_s", 0) for t, cls, ev, _ in tl if cls == "kv_cache" and t <= end]
    assert during and max(during) > 0.1, during  # the burst preempts: the evidence shows it
    after = [(t - end, ev.get("preemptions_per_s"), found) for t, _, ev, found in tl if end < t < next_load]
    late = [a for a in after if a[0] >= HELD_S + max(cadence, 1.0) + 5.0]
    assert late, after
    # the lull shows the state now: no preemption rate carried over from the minute before, no storm
    assert all(rate == 0 and "preemption_storm" not in found for _, rate, found in late), after
    stormy = [dt for dt, _, found in after if "preemption_storm" in found]
    assert max(stormy, default=0.0) <= WITHIN_S, stormy


def _stable_after_defeated(tmp_path: Path) -> tuple[Path, float]:
    """Four minutes of the per-request-head phase, then the shared-prefix phase for 80 s: the prompt made stable.

    Each phase is repeated with its counters continued (41 s each in the recording); four minutes of misses are most
    of a 5-minute hit-rate window, which a finding judged on that window would need 70 s more to leave.
    """
    shared, defeated = sorted(_labels("prefix_head.jsonl.gz"), key=lambda e: e["load_start"])
    frames = compose.frames(FIELD / "prefix_head.jsonl.gz")
    out = [(t, x) for t, x in frames if defeated["load_start"] <= t <= defeated["load_end"]]
    switch = None
    head, stable = list(out), [(t, x) for t, x in frames if shared["load_start"] <= t < shared["load_end"]]
    for phase in [head] * 5 + [stable] * 2:
        if phase is stable and switch is None:
            switch = out[-1][0] + 1.0
        last, start = compose.counters(out[-1][1] or ""), compose.counters(phase[0][1] or "")
        offsets = {k: v - start.get(k, 0.0) for k, v in last.items()}
        shift = out[-1][0] + 1.0 - phase[0][0]
        out += [(t + shift, compose.continue_counters(x, offsets) if x else x) for t, x in phase]
    return compose.write(tmp_path / "prefix_stable.jsonl", out), switch


@pytest.mark.slow  # over 10 s on this 2-core machine (scripts/test.sh runs it)
@CADENCES
def test_prefix_cache_finding_clears_within_a_minute_of_the_prompt_becoming_stable(tmp_path, cadence):
    path, switch = _stable_after_defeated(tmp_path)
    tl = _run(path, cadence)
    name = "prefix_cache_low_hit_rate"
    assert any(name in found for t, _, _, found in tl if t < switch), "the defeated prefix raises the finding"
    still = [t - switch for t, _, _, found in tl if t >= switch and name in found]
    assert max(still, default=0.0) <= WITHIN_S, still
    assert tl[-1][0] - switch > WITHIN_S  # the stable phase outlasts the minute judged


@CADENCES
@pytest.mark.parametrize("entry", DRAINS, ids=[f"{w['dir']}/{w['file']}" for w in DRAINS])
def test_the_drain_after_a_kv_bound_phase_clears_preemption_evidence_and_every_finding(entry, cadence):
    end = entry["load_end"]  # in-flight requests cancelled: the condition ends here
    tl = _run(entry["path"], cadence)
    during = [ev.get("preemptions_per_s", 0) for t, cls, ev, _ in tl if cls == "kv_cache" and t <= end]
    assert during and max(during) > 0, during  # the phase preempts: the evidence shows it
    after = [(t - end, cls, ev.get("preemptions_per_s"), found) for t, cls, ev, found in tl if t > end]
    late = [a for a in after if a[0] > WITHIN_S]
    assert late, after  # the recording outlasts the minute judged
    shown = [dt for dt, _, rate, found in after if rate or found]
    assert max(shown, default=0.0) <= WITHIN_S, [a for a in after if a[0] in shown[-3:]]
    assert all(cls in ("healthy", "idle") for _, cls, _, _ in late), late
