"""The step ledger: a light window prices big batches from what its target ran hours ago, in bounded memory."""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from pathlib import Path

from kvdoctor.ingest.parse import Parser
from kvdoctor.ingest.recording import load_frames
from kvdoctor.verdicts import Diagnosis
from kvdoctor.whatif.advisor import Advisor
from kvdoctor.whatif.headroom import HeadroomWorker
from kvdoctor.whatif.learn import learn
from kvdoctor.whatif.ledger import MAX_BINS, Ledgers
from kvdoctor.whatif.model import StepModel
from kvdoctor.whatif.predict import predict
from kvdoctor.whatif.sources import recording_snaps
from kvdoctor.whatif.stepfit import fit_rows, history_rows
from kvdoctor.whatif.window import Snap

RAMPS = Path(__file__).resolve().parents[1] / "fixtures/recordings/vllm-0.32-cpu-ramps"
HOURS_AGO = 6 * 3600.0


def _ramp(name: str) -> dict:
    return next(r for r in json.loads((RAMPS / "ramps.json").read_text())["ramps"] if r["name"] == name)


@functools.cache
def _split(name: str) -> tuple[list[Snap], list[Snap], list[Snap]]:
    """A ramp's heavy steps moved 6 h earlier, then its light step as today: (heavy, light history, light window)."""
    ramp = _ramp(name)
    snaps = recording_snaps(RAMPS / ramp["recording"])
    lo, hi = ramp["steps"][ramp["light_step"]]["window_unix"]
    light = [s for s in snaps if s.t <= hi]
    heavy = [replace(s, t=s.t - HOURS_AGO) for s in snaps if s.t > hi]
    return heavy, light, [s for s in light if s.t >= lo]


def _step_at(m: StepModel, batch: int) -> float:
    return m.duration(batch, 0.0, batch * 300.0, 0.0)


def test_a_light_window_prices_a_big_batch_from_the_batches_its_target_ran_hours_ago():
    # llama_ramp_c32: its light step ran 1-3 requests; its heavy steps, now 6 h old, ran up to 32
    heavy, light, window = _split("llama_ramp_c32")
    ledger = Ledgers()
    for s in heavy:
        ledger.add("llama", s)
    old = fit_rows(history_rows(heavy, 2048))  # what the big batches themselves say a step costs
    alone = learn(light, window).step
    basis = learn(light, window, recall=ledger.recall("llama"))
    # a step of 30 decoders, per decoder: near the old rows' cost, where the light window alone is 15 % off
    err_alone = abs(_step_at(alone, 30) / _step_at(old, 30) - 1)
    err_ledger = abs(_step_at(basis.step, 30) / _step_at(old, 30) - 1)
    assert err_ledger < 0.08 < err_alone
    said = [n for n in basis.notes if n.startswith("step ledger")]
    assert said and "from the last 6.0 h of this target's history" in said[0]
    assert basis.recalled_batch >= 25  # the batches it recalls count as seen


def test_six_times_the_load_is_priced_from_the_ledger_and_its_batch_no_longer_called_unseen():
    # tiny_ramp_c8's light step ran 1-5 requests; ×6 its load fills the cap of 8, as its heavy steps (6 h ago) did
    heavy, light, window = _split("tiny_ramp_c8")
    ledger = Ledgers()
    for s in heavy:
        ledger.add("c8", s)
    bare = predict(light, window, {"load": 6.0}, max_num_seqs=8)
    p = predict(light, window, {"load": 6.0}, max_num_seqs=8, recall=ledger.recall("c8"))
    assert any(a.startswith("step ledger: decoding batches") and "6.0 h" in a for a in p.assumptions)
    assert not any(a.startswith("step ledger") for a in bare.assumptions)
    assert bare.band_after is not None and p.band_after is not None
    assert any("batch 8 never seen" in u for u in bare.band_after.unseen)
    assert not any("never seen" in u for u in p.band_after.unseen)
    # what the server measured at that load (rate 6/s, ramps.json): the ledger's prediction is the nearer
    measured = next(s for s in _ramp("tiny_ramp_c8")["steps"] if s["rate"] == 6.0)["vllm"]["itl_p50_s"]
    assert abs(p.predicted.itl_p50_s - measured) < abs(bare.predicted.itl_p50_s - measured)


def test_the_advisor_feeds_the_ledger_as_snapshots_leave_its_history_and_forgets_it():
    ramp = _ramp("tiny_ramp_c32")
    hi = ramp["steps"][ramp["light_step"]]["window_unix"][1]
    advisor, parser = Advisor(history_s=900.0), Parser()
    frames = [f for f in load_frames(RAMPS / ramp["recording"]) if f.text is not None]
    for f in [f for f in frames if f.t > hi]:  # the busy part, 6 h ago
        advisor.observe("ramp", f.t - HOURS_AGO, parser.parse(f.text).samples)
    assert advisor.ledger.recall("ramp") is None  # still in the 15-minute history
    for f in [f for f in frames if f.t <= hi]:
        advisor.observe("ramp", f.t, parser.parse(f.text).samples)
    recall = advisor.ledger.recall("ramp")
    assert recall is not None and max(x[1] for x, _, _ in recall.rows) >= 25
    assert all(s.t > hi - 900 for s in advisor.snaps("ramp"))
    advisor.forget("ramp")
    assert advisor.ledger.recall("ramp") is None


def test_a_day_of_scrapes_keeps_a_bounded_ledger_and_a_new_engine_starts_a_new_one():
    ledger, t, n = Ledgers(), 0.0, 0
    names = ["tiny_ramp_c32", "tiny_ramp_c32_fine", "tiny_ramp_c8"]  # one engine, caps 32 and 8
    recordings = [recording_snaps(RAMPS / f"{name}.jsonl.gz")[::5] for name in names]
    # 26 h of 15-second scrapes (every 5th of the recordings'), the three ramps over and over
    while t < 26 * 3600:
        snaps = recordings[n % 3]
        for s in snaps:
            ledger.add("tiny", replace(s, t=t + s.t - snaps[0].t))
        t += snaps[-1].t - snaps[0].t + 15.0
        n += 1
    recall = ledger.recall("tiny")
    assert recall is not None and 10 < ledger.held()["tiny"].bins <= MAX_BINS
    assert t - recall.since <= 24 * 3600  # nothing older than a day
    bins = ledger.held()["tiny"].bins
    ledger.add("tiny", replace(recordings[0][0], t=t, info={}))  # a scrape without cache_config_info
    assert ledger.held()["tiny"].bins == bins  # says nothing of the engine: the day stays
    # the Llama-shaped engine (another model: other bytes per KV token) does not add to the tiny one's bins
    llama = recording_snaps(RAMPS / "llama_ramp_c32.jsonl.gz")[:60]
    alone = Ledgers()
    for s in llama:
        ledger.add("tiny", replace(s, t=t + s.t - llama[0].t))
        alone.add("llama", replace(s, t=t + s.t - llama[0].t))
    assert ledger.recall("tiny") == alone.recall("llama")  # the tiny engine's day is gone, not mixed in


def test_the_headroom_worker_learns_from_the_same_ledger():
    # llama_ramp_c32's ITL p50 SLO broke at 5.5× its light step's rate; from the light step alone the headroom
    # search put it past 9×, with the heavy steps (6 h ago) in the ledger it comes nearer
    heavy, light, _ = _split("llama_ramp_c32")
    ramp = _ramp("llama_ramp_c32")
    ledger = Ledgers()
    for s in heavy:
        ledger.add("llama", s)
    measured = ramp["breaking"]["itl_p50_s"]["rate"] / ramp["steps"][ramp["light_step"]]["rate"]
    t = light[-1].t
    found = []
    for recall in (None, ledger.recall):
        worker = HeadroomWorker(lambda _: light, recall=recall)
        d = Diagnosis("llama", "llama", t, "healthy", t - 60)
        worker.annotate([d], t, {"llama": ({"itl_p50": ramp["slos"]["itl_p50_s"]}, 32)})
        found.append(d.evidence["slo_headroom_itl_p50"])
    bare, with_ledger = found
    assert isinstance(bare, float) and isinstance(with_ledger, float)
    assert abs(with_ledger / measured - 1) < abs(bare / measured - 1)
