"""80 % intervals on every predicted quantity: in `--json`, wider where the history never was (and said), in the
advice's effect on Slack, and in the follow-up after a restart (measured inside or outside)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from kvdoctor.cli import main
from kvdoctor.notify.blocks import Links, event_message
from kvdoctor.notify.config import NotifyConfig
from kvdoctor.notify.lifecycle import Lifecycle
from kvdoctor.pipeline import Pipeline
from kvdoctor.replay import replay
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.whatif.advisor import Advisor
from kvdoctor.whatif.followup import SHOWN
from kvdoctor.whatif.knobs import parse_knob
from kvdoctor.whatif.predict import Prediction, predict
from kvdoctor.whatif.sources import recording_snaps
from kvdoctor.whatif.window import Quantities, in_window
from tests.support.whatif_json import Q_KEYS

PAIRS = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-whatif"
BEFORE = PAIRS / "batchcap_before.jsonl.gz"
NUMERIC = Q_KEYS - {"bottleneck"}  # every quantity that carries a number


@pytest.fixture(scope="module")
def capped() -> tuple[list, list]:
    """The batch-capped server (max_num_seqs 4, 24 clients): history up to its heavy phase's end, and that phase."""
    pair = next(
        p for p in json.loads((PAIRS / "pairs.json").read_text()) if p["name"] == "max_num_seqs_4_to_12"
    )
    snaps = recording_snaps(PAIRS / pair["before"])
    lo, hi = pair["heavy_before"]
    return [s for s in snaps if s.t <= hi], in_window(snaps, lo, hi)


def _width(p: Prediction, key: str) -> float:
    assert p.band_after is not None
    return (getattr(p.band_after.high, key) - getattr(p.band_after.low, key)) / getattr(p.predicted, key)


def test_json_puts_p10_and_p90_next_to_each_side_with_the_same_keys(capsys):
    assert main(["whatif", str(BEFORE), "--set", "max_num_seqs=12", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    keys = list(doc)
    for side in ("predicted_unchanged", "predicted"):
        i = keys.index(side)
        assert keys[i + 1 : i + 3] == [f"{side}_p10", f"{side}_p90"]
        low, high = doc[f"{side}_p10"], doc[f"{side}_p90"]
        assert set(low) == set(high) == NUMERIC
        for k in NUMERIC:
            if doc[side][k] is None:
                assert low[k] is None and high[k] is None, (side, k)
            else:
                assert low[k] <= doc[side][k] <= high[k], (side, k, low[k], doc[side][k], high[k])
        # an interval, not a point twice (an ITL quantile may stay in one bucket: vLLM's first is 0-10 ms)
        for k in ("ttft_p50_s", "generation_tokens_per_s"):
            assert high[k] > low[k], (side, k)
    assert doc["interval"]["coverage"] == 0.8 and doc["interval"]["members"] >= 3
    # the server ran 4 at a time (2 in its light phase): 12 is beyond anything it showed
    assert any(re.fullmatch(r"batch 1\d never seen \(largest 4\)", u) for u in doc["interval"]["unseen"])
    assert any("80 % intervals (p10-p90)" in a for a in doc["assumptions"])


@pytest.mark.slow
def test_outside_the_seen_batch_the_interval_is_wider_and_the_output_says_why(capped, capsys):
    history, window = capped
    inside = predict(history, window, {"max_num_batched_tokens": 4096})  # still 4 at a time: seen
    outside = predict(history, window, {"max_num_seqs": 24})
    assert inside.band_after is not None and outside.band_after is not None
    assert inside.band_after.unseen == []
    said = outside.band_after.unseen
    m = re.fullmatch(r"batch (\d+) never seen \(largest 4\)", said[0])
    assert m and int(m.group(1)) > 12, said
    for k in ("itl_p50_s", "ttft_p50_s", "itl_p95_s"):
        assert _width(outside, k) > 1.5 * _width(inside, k), k
    assert main(["whatif", str(BEFORE), "--set", "max_num_seqs=24"]) == 0
    out = capsys.readouterr().out
    assert "(in brackets: the 80 % interval, p10–p90)" in out
    assert re.search(r"outside what the history showed: batch \d+ never seen \(largest 4\)", out)
    row = next(line for line in out.splitlines() if line.startswith("ITL p50"))
    assert re.search(r"\d \([\d.]+–[\d.]+\) m?s", row), row


def test_kv_pressure_the_history_never_had_is_named(capped):
    history, window = capped  # no preemption, KV under 2 % all along
    p = predict(history, window, {"kv_cache_tokens": 1024, "max_num_seqs": 12})
    assert p.predicted.preemptions_per_s > 0
    assert p.band_after is not None and "KV pressure never seen" in p.band_after.unseen
    assert any("KV pressure never seen" in a for a in p.assumptions)


def _replay(path: Path, advisor: Advisor):
    pipeline = Pipeline(load_files(default_rule_files()), advisor=advisor)
    return list(replay(pipeline, [path], 15.0))


@pytest.mark.slow
def test_the_advice_effect_carries_its_interval_to_slack(shared_032):
    cycles = _replay(shared_032 / "batch_cap.jsonl.gz", Advisor())
    d = next(
        d for c in reversed(cycles) for d in c.diagnoses if d.bottleneck == "batch_cap" and d.advice[0].effect
    )
    e = next(a.effect for f in d.findings for a in f.advice if a.effect is not None)  # what the alert carries
    for k in ("ttft_p95_s", "itl_p50_s", "generation_tokens_per_s"):
        lo, mid, hi = e.after_p10[k], e.after[k], e.after_p90[k]
        assert lo is not None and mid is not None and hi is not None and lo <= mid <= hi, k
    assert re.search(r"TTFT p95 [\d.]+ → ≈[\d.]+ (ms|s) \([\d.]+–[\d.]+\)", e.text), e.text
    assert re.search(r"throughput [+-]\d+% \([+-]\d+%…[+-]\d+%\)", e.text), e.text
    assert "ranges are 80 % intervals" in e.text
    lifecycle = Lifecycle(NotifyConfig())
    events = lifecycle.observe([d], d.t) + lifecycle.observe([d], d.t + 3600)  # past its `for` it fires
    _, blocks = event_message(events[0], Links("http://kvdoctor:9400", ""))
    advice = next(b["text"]["text"] for b in blocks if "What to change" in b.get("text", {}).get("text", ""))
    # Slack escapes & < > only: the range and its words arrive as written
    assert f"_predicted: {e.text}_" in advice


@pytest.mark.slow
def test_prediction_check_says_whether_each_measured_value_fell_inside():
    advisor = Advisor()
    cycles = _replay(PAIRS / "batchcap_restart.jsonl.gz", advisor)
    f = next(f for d in cycles[-1].diagnoses for f in d.findings if f.name == "prediction_check")
    verdicts = re.findall(r"measured [^;]+?, (inside|outside)", f.summary)
    assert len(verdicts) == len(SHOWN) and "(80 %: " in f.summary, f.summary
    assert f.evidence["prediction_inside_share"] == pytest.approx(verdicts.count("inside") / len(verdicts))

    fu = advisor.followups()["batchcap_restart"]
    assert fu.band is not None
    hit = replace(fu, measured=replace(fu.predicted)).finding()
    assert hit.evidence["prediction_inside_share"] == 1.0 and "outside" not in hit.summary
    far = Quantities(**{k: 10 * getattr(fu.band.high, k) for k in SHOWN})
    miss = replace(fu, measured=far).finding()
    assert miss.evidence["prediction_inside_share"] == 0.0
    assert len(re.findall(r", outside", miss.summary)) == len(SHOWN)


@pytest.mark.slow
def test_every_side_keeps_p10_at_most_the_point_at_most_p90_on_every_recorded_pair():
    for pair in json.loads((PAIRS / "pairs.json").read_text()):
        snaps = recording_snaps(PAIRS / pair["before"])
        lo, hi = pair["heavy_before"]
        change = dict(parse_knob(f"{k}={v}") for k, v in pair["change"].items())
        p = predict([s for s in snaps if s.t <= hi], in_window(snaps, lo, hi), change)
        for point, band in ((p.unchanged, p.band_now), (p.predicted, p.band_after)):
            assert band is not None
            for k in NUMERIC:
                v, a, b = getattr(point, k), getattr(band.low, k), getattr(band.high, k)
                if math.isfinite(v):
                    assert a <= v <= b, (pair["name"], k, a, v, b)
