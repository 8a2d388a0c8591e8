"""Replaying several recordings on one clock: the dead time between recordings made days apart is stepped over."""

from __future__ import annotations

import itertools
from pathlib import Path

from kvdoctor.pipeline import Pipeline
from kvdoctor.replay import STALE_S, replay
from kvdoctor.rules.loader import default_rule_files, load_files

FIX = Path(__file__).parent / "fixtures/recordings"
EARLY = FIX / "vllm-0.32-cpu-whatif/kv2x_before.jsonl.gz"  # session 3's clock
LATE = FIX / "vllm-0.32-cpu-margins/tiny_kv_drain.jsonl.gz"  # ~8 hours later


def _verdicts(cycles, target: str) -> dict[float, str]:
    return {c.t: d.verdict for c in cycles for d in c.diagnoses if d.target == target}


def test_recordings_hours_apart_are_evaluated_where_they_have_data_and_judged_as_alone() -> None:
    rules = load_files(default_rule_files())
    together = list(replay(Pipeline(rules), [EARLY, LATE], 15.0))
    early_alone = list(replay(Pipeline(rules), [EARLY], 15.0))
    times = [c.t for c in together]
    gap = max(b - a for a, b in itertools.pairwise(times))
    assert gap > 3600, "the hours between the two recordings are stepped over"
    # every evaluation is within a lookback of some recording's data (plus the one step that lands before it)
    spans = [(early_alone[0].t, early_alone[-1].t)]
    late_alone = list(replay(Pipeline(rules), [LATE], 15.0))
    spans.append((late_alone[0].t, late_alone[-1].t))
    assert all(any(lo - 15.0 <= t <= hi + STALE_S + 15.0 for lo, hi in spans) for t in times)
    # the early recording's own verdicts do not depend on the late one being on the same clock
    target = early_alone[-1].diagnoses[0].target
    alone = _verdicts(early_alone, target)
    both = _verdicts(together, target)
    assert {t: v for t, v in both.items() if t in alone} == alone
