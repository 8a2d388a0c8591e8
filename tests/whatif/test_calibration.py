"""The step model calibrated to the window's own mean ITL (calibration.py): worked by hand, then on a real ramp."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from kvdoctor.samples import Sample
from kvdoctor.whatif.calibration import MAX_SCALE, calibrated, itl_calibration, simulated_mean_itl
from kvdoctor.whatif.model import Engine, LengthDist, StepModel, Workload
from kvdoctor.whatif.predict import learn
from kvdoctor.whatif.readout import simulate
from kvdoctor.whatif.sources import history_before, recording_snaps
from kvdoctor.whatif.window import Snap, delta, hist_name, snapshot

RAMPS = Path(__file__).resolve().parents[1] / "fixtures/recordings/vllm-0.32-cpu-ramps"
ITL = "vllm:inter_token_latency_seconds"
ENGINE = Engine(8, 2048, 1000, 16, 4096)
PROMPT = LengthDist(((99.0, 100.0, 1.0),), 100.0)
OUTPUT = LengthDist(((49.0, 50.0, 1.0),), 50.0)
# one client, one request at a time: every decode step holds exactly one decoder, and its prefill step (no decoder
# beside it) records no ITL, so the simulated mean ITL is c0 + c_decode, 20 + 1 = 21 ms, whatever the prefill costs
ONE_CLIENT = Workload("closed", 0.0, 1, 0.0, PROMPT, OUTPUT)
STEP = StepModel(0.020, 0.001, 0.0005)


def window(mean_itl_s: float, count: float) -> list[Snap]:
    """Five scrapes whose ITL histogram grew by count observations averaging mean_itl_s."""

    def scrape(t: float, n: float) -> Snap:
        return snapshot(
            t,
            [
                Sample(f"{ITL}_bucket", (("le", "+Inf"),), n),
                Sample(f"{ITL}_count", (), n),
                Sample(f"{ITL}_sum", (), n * mean_itl_s),
            ],
        )

    return [scrape(float(t), count * t / 4) for t in range(5)]


def test_the_decode_costs_are_scaled_until_the_simulated_mean_itl_is_the_measured_one() -> None:
    res = simulate(ENGINE, STEP, ONE_CLIENT, 1, 60.0)
    assert simulated_mean_itl(res) == pytest.approx(0.021)
    got_step, got_res, cal = calibrated(ENGINE, STEP, ONE_CLIENT, 1, 60.0, 0, window(0.0168, 500), res)
    assert cal is not None and cal.scale == pytest.approx(0.8)
    # per step and per decoder 0.8×; a prefill token's cost is the prefill times' to decide, not the ITL's
    assert (got_step.c0, got_step.c_decode, got_step.c_prefill) == pytest.approx((0.016, 0.0008, 0.0005))
    assert simulated_mean_itl(got_res) == pytest.approx(0.0168)
    assert "decode step costs ×0.8:" in cal.note() and "21 ms where vLLM measured 16.8 ms" in cal.note()


def test_a_calibration_is_bounded_and_needs_enough_itls_and_a_level_load() -> None:
    res = simulate(ENGINE, STEP, ONE_CLIENT, 1, 60.0)
    far = itl_calibration(window(0.21, 500), res)  # ten times the simulated mean: the fit is wrong otherwise
    assert far is not None and far.scale == pytest.approx(MAX_SCALE)
    assert itl_calibration(window(0.0168, 99), res) is None  # too few ITLs for their mean to outweigh the fit
    near = itl_calibration(window(0.0212, 500), res)  # within 2 %: the simulation stands as fitted
    assert near is not None and not near.applies
    same_step, same_res, _ = calibrated(ENGINE, STEP, ONE_CLIENT, 1, 60.0, 0, window(0.0212, 500), res)
    assert same_step is STEP and same_res is res
    # a load that moved through the window: no one factor fits the operating points it passed through
    rising = replace(ONE_CLIENT, profile=(1.0, 2.0))
    assert calibrated(ENGINE, STEP, rising, 1, 60.0, 0, window(0.0168, 500), res) == (STEP, res, None)


def test_the_cap_8_ramps_light_step_is_simulated_at_its_own_mean_itl() -> None:
    # The ramp's light step (tiny, cap 8, fp32 on an EPYC; 1 req/s open loop): the fitted step model simulated
    # its mean ITL at 22.5-22.9 ms where vLLM measured 20.9 ms (_sum/_count), so every request stayed ~9 % longer,
    # more ran at once and, at added load, the queue formed early (plan's TTFT p95 headroom 1.21 against the ramp's
    # 1.8; bench_plan_ramps). The step fit reads the batch beside each prefill and the batch's spread through a
    # running gauge scraped twice an interval, the simulation realises both its own way.
    doc = json.loads((RAMPS / "ramps.json").read_text())
    ramp = next(r for r in doc["ramps"] if r["name"] == "tiny_ramp_c8")
    snaps = recording_snaps(RAMPS / ramp["recording"])
    history, win = history_before(snaps, *ramp["steps"][ramp["light_step"]]["window_unix"])
    basis = learn(history, win, max_num_seqs=ramp["max_num_seqs"])
    a, b = win[0], win[-1]
    name = hist_name(b, "itl")
    measured = delta(a, b, f"{name}_sum") / delta(a, b, f"{name}_count")
    assert measured == pytest.approx(0.0209, abs=5e-4)
    assert 0.88 < basis.itl_scale < 0.96  # the fit's own simulation was 4-14 % slow
    assert simulated_mean_itl(basis.now) == pytest.approx(measured, rel=0.03)
    # and so the stay: running is vLLM's arrivals × time running, 3.0 measured (±0.4 over ten scrapes)
    assert basis.now.running_area / basis.now.span_s == pytest.approx(basis.measured.running, rel=0.15)
    assert any("decode step costs ×0.9" in n for n in basis.notes)


@pytest.mark.parametrize("mean_itl_s", [math.inf, math.nan, -0.02, 0.0])
def test_a_lying_itl_histogram_leaves_the_fit_as_it_is(mean_itl_s: float) -> None:
    # a target's _sum that is infinite, not a number, negative or zero says nothing of its steps: no factor, and the
    # window is simulated as fitted rather than scaled to the bound
    res = simulate(ENGINE, STEP, ONE_CLIENT, 1, 60.0)
    assert itl_calibration(window(mean_itl_s, 500), res) is None
    step, same, cal = calibrated(ENGINE, STEP, ONE_CLIENT, 1, 60.0, 0, window(mean_itl_s, 500), res)
    assert (step, same, cal) == (STEP, res, None)
