"""Replaying several recordings on one clock: the dead time between recordings made days apart is stepped over."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from kvdoctor.ingest.recording import RecordingError, parse_frames
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


def test_frames_parsed_once_replay_to_the_same_diagnoses_as_the_file() -> None:
    # whatif parses a recording once for its snapshots and hands the frames to the measured class's replay
    rules = load_files(default_rule_files())
    from_file = list(replay(Pipeline(rules), [LATE], 5.0))
    parsed = list(replay(Pipeline(rules), [LATE], 5.0, parsed={str(LATE): parse_frames(LATE)}))
    assert [c.t for c in parsed] == [c.t for c in from_file]
    shown = [[(d.target, d.verdict, d.evidence) for d in c.diagnoses] for c in from_file]
    assert [[(d.target, d.verdict, d.evidence) for d in c.diagnoses] for c in parsed] == shown
    assert {d.verdict for c in from_file for d in c.diagnoses} - {"unknown", "idle"}, "it reached a verdict"


def test_a_frame_that_does_not_parse_is_named_by_file_and_frame(tmp_path: Path) -> None:
    rec = tmp_path / "broken.jsonl"
    good = 'vllm:num_requests_running{model_name="m"} 1\n'
    rec.write_text(
        json.dumps({"t": 100.0, "text": good}) + "\n" + json.dumps({"t": 105.0, "text": "vllm:x{ 1\n"}) + "\n"
    )
    with pytest.raises(RecordingError, match=r"broken\.jsonl: frame 2: "):
        parse_frames(rec)
