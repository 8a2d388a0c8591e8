"""The step fit: known coefficients come back, the prior fills what the history cannot tell, data override it."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from kvdoctor.capacity.presets import get_gpu, get_model
from kvdoctor.whatif.model import StepModel
from kvdoctor.whatif.prior import DECODE_PER_PREFILL, physical_prior
from kvdoctor.whatif.sources import recording_snaps
from kvdoctor.whatif.stepfit import Row, fit_rows, history_rows, posterior_draws

RAMPS = Path(__file__).resolve().parents[1] / "fixtures/recordings/vllm-0.32-cpu-ramps"
TRUE = StepModel(c0=0.018, c_decode=0.0015, c_prefill=0.0005, c_kv=2e-6, c_attn=3e-7)


def synthetic(truth: StepModel, batches: list[int], seed: int = 1, noise: float = 0.02) -> list[Row]:
    """Rows as a history would give them: ITL means at each batch and context, and prefill times per prompt."""
    rng = random.Random(seed)
    rows: list[Row] = []
    for b in batches:
        for context in (150.0, 400.0, 900.0):
            for prompt in (100.0, 300.0, 800.0):
                pre = rng.uniform(0.0, 0.1) * prompt  # a little prefill shares the decoders' steps
                x = [1.0, float(b), pre, b * context, pre * prompt / 2]
                rows.append((x, truth.duration(*x[1:]) * rng.lognormvariate(0, noise), 200.0))
                px = [1.0, max(0.0, b - 1.0), prompt, max(0.0, b - 1.0) * context, prompt * prompt / 2]
                rows.append((px, truth.duration(*px[1:]) * rng.lognormvariate(0, noise), 200.0))
    return rows


def test_a_history_made_from_known_coefficients_gives_them_back():
    m = fit_rows(synthetic(TRUE, [1, 2, 4, 8, 16, 32]))
    for name in ("c0", "c_decode", "c_prefill", "c_kv", "c_attn"):
        assert getattr(m, name) == pytest.approx(getattr(TRUE, name), rel=0.15), name
    assert m.provenance == ("data",) * 5
    assert m.source == "fit"
    assert any("ms/decoding request (data)" in n for n in m.notes)


def test_single_requests_leave_the_decode_cost_to_the_structure_and_say_so():
    # a light load: one request at a time, so a step's growth with the batch is not in the data
    rows = synthetic(TRUE, [1])
    m = fit_rows(rows)
    assert m.provenance[1] == "structure"
    assert m.source == "fit+structure"
    assert any("c_decode lean on the structure" in n for n in m.notes)
    assert any("c_decode" in n and "(structure)" in n for n in m.notes)
    # a decoding request is priced from the structure, not as one prefill token
    assert m.c_decode == pytest.approx(DECODE_PER_PREFILL * m.c_prefill, rel=0.3)
    # what single requests do show is still the data's: one request's step and a prompt's prefill
    for x, y, _ in rows:
        assert m.duration(*x[1:]) == pytest.approx(y, rel=0.15)


def test_data_that_span_the_batch_override_the_structure():
    # decode five times a prefill token's cost, far from the structure's 2x: batches 1-32 must say so
    truth = StepModel(c0=0.018, c_decode=0.0025, c_prefill=0.0005)
    m = fit_rows(synthetic(truth, [1, 3, 8, 16, 32]))
    assert m.c_decode == pytest.approx(0.0025, rel=0.15)
    assert m.provenance[1] == "data"


def test_a_roofline_prior_prices_the_decode_where_the_history_shows_single_requests():
    roofline = physical_prior(get_model("Qwen3-8B"), get_gpu("H100"), 144 * 1024)
    assert roofline is not None and roofline.c_attn > 0
    gpu_like = StepModel(c0=0.006, c_decode=5e-5, c_prefill=5e-5, c_kv=8e-8, c_attn=1e-11)
    m = fit_rows(synthetic(gpu_like, [1]), roofline)
    assert m.provenance[1] == "prior" and m.source == "fit+prior(roofline)"
    assert any("roofline Qwen3-8B on H100-80GB" in n for n in m.notes)
    # the roofline's ratio of a decoding request's cost to a prefill token's, on the data's prefill cost
    ratio = roofline.c_decode / roofline.c_prefill
    assert m.c_decode / m.c_prefill == pytest.approx(ratio, rel=0.3)
    assert m.c_prefill == pytest.approx(gpu_like.c_prefill, rel=0.3)


def test_a_light_load_reads_as_single_requests_not_as_a_batch():
    # idle scrapes run no step: the decoder-weighted batch of a load that is mostly one request or none is ~1
    ramp = next(
        r for r in json.loads((RAMPS / "ramps.json").read_text())["ramps"] if r["name"] == "tiny_ramp_c32"
    )
    snaps = recording_snaps(RAMPS / ramp["recording"])
    hi = ramp["steps"][ramp["light_step"]]["window_unix"][1]
    light = [s for s in snaps if s.t <= hi]
    top = max(s.get("vllm:num_requests_running", 0.0) for s in light)
    rows = history_rows(light, 2048)
    assert rows and all(x[1] <= top for x, _, _ in rows)
    assert all(x[3] > 0 for x, _, _ in rows if x[1] > 0)  # a decoder reads its context, finished or not


def test_the_intervals_step_models_agree_inside_the_seen_batch_and_spread_beyond_it():
    # a history of batches 2-3 with 5 % noise: it pins a step at those batches, not how a step grows to batch 30
    rows = synthetic(TRUE, [2, 3], noise=0.05)
    point = fit_rows(rows)
    draws = posterior_draws(rows, None, 200, random.Random(7))

    def spread_at(batch: int) -> float:
        """The drawn models' relative spread (p90/p10) of a decode step at `batch` and 400 context tokens."""
        times = sorted(m.duration(batch, 0.0, batch * 400.0, 0.0) for m in draws)
        return times[180] / times[20]

    assert spread_at(2) < 1.2  # where the history was, the members' steps agree
    assert spread_at(30) > 1.5 * spread_at(2)  # where it never was, they do not
    # drawn about the point fit, not somewhere else
    mid = sorted(m.duration(2, 0.0, 800.0, 0.0) for m in draws)[100]
    assert mid == pytest.approx(point.duration(2, 0.0, 800.0, 0.0), rel=0.05)


def test_two_engines_side_by_side_read_as_the_steps_of_one():
    # a data-parallel server sums its engines' counters and gauges: twice the steps in the same seconds are two
    # engines stepping at once, not steps half as long (a DP=2 server was fitted twice as fast as it ran)
    snaps = recording_snaps(RAMPS / "tiny_ramp_c32.jsonl.gz")[:120]
    doubled = [
        replace(
            s,
            flat={k: 2 * v for k, v in s.flat.items()},
            buckets={k: {le: 2 * c for le, c in b.items()} for k, b in s.buckets.items()},
            engines=2,
        )
        for s in snaps
    ]
    one, two = history_rows(snaps, 2048), history_rows(doubled, 2048)
    assert len(one) == len(two) > 10
    for (x1, y1, _), (x2, y2, _) in zip(one, two, strict=True):
        assert x2 == pytest.approx(x1) and y2 == pytest.approx(y1)
