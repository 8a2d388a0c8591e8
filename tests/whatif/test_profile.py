"""An open loop whose rate rose or fell across its window is simulated along its own profile, a level one at its rate."""

from __future__ import annotations

import itertools
import random
from collections import OrderedDict
from pathlib import Path

import pytest

from kvdoctor.whatif.arrivals import generate
from kvdoctor.whatif.compare import load_pairs, run_pair
from kvdoctor.whatif.model import Engine, LengthDist, StepModel, Workload
from kvdoctor.whatif.plan import Planner
from kvdoctor.whatif.predict import learn, predict
from kvdoctor.whatif.profile import arrival_counts, arrival_profile, warp
from kvdoctor.whatif.readout import simulate
from kvdoctor.whatif.sim import Simulator
from kvdoctor.whatif.sources import default_window, history_before, recording_snaps
from kvdoctor.whatif.window import Snap
from kvdoctor.whatif.workload import infer_workload

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "recordings"
BUSY = FIXTURES / "vllm-0.32-cpu-field" / "busy.jsonl.gz"
ONE = LengthDist(((0.0, 100.0, 1.0),), 50.0)


def _scrapes(rates: list[float], seconds_each: int, seed: int = 1) -> list[Snap]:
    """An open loop of Poisson arrivals at each rate in turn, every request served within its second."""
    rng, done = random.Random(seed), 0.0
    out = [Snap(0.0, {"vllm:request_success_total": 0.0})]
    t = 0
    for rate in rates:
        for _ in range(seconds_each):
            t += 1
            arrived = 0
            at = rng.expovariate(rate)
            while at < 1.0:
                arrived += 1
                at += rng.expovariate(rate)
            done += arrived
            flat = {
                "vllm:request_success_total": done,
                "vllm:num_requests_running": 0.0,
                "vllm:num_requests_waiting": 0.0,
            }
            out.append(Snap(float(t), flat))
    return out


def test_a_level_poisson_load_is_almost_never_given_a_profile() -> None:
    windows = [_scrapes([rate] * 3, 100, seed) for seed in range(100) for rate in (0.5, 2.0, 8.0)]
    shaped = sum(1 for snaps in windows if arrival_profile(snaps))
    assert shaped <= 0.02 * len(windows)  # two tests at p < 0.005 each: at most 1 % by chance


def test_a_load_that_doubles_halfway_has_a_profile_that_doubles() -> None:
    shape = arrival_profile(_scrapes([2.0, 4.0], 120))
    half = len(shape) // 2
    assert len(shape) == 12
    before, after = sum(shape[:half]) / half, sum(shape[half:]) / half
    assert after / before == pytest.approx(2.0, rel=0.15)
    assert sum(shape) / len(shape) == pytest.approx(1.0)


def test_requests_cancelled_in_flight_take_no_arrivals_away() -> None:
    snaps = [
        Snap(float(t), {"vllm:num_requests_running": r, "vllm:request_success_total": 0.0})
        for t, r in enumerate([0, 10, 20, 0, 10, 20])  # 20 in flight cancelled at t=3, then 20 more arrive
    ]
    counts = arrival_counts(snaps, 5)
    assert min(counts) >= 0
    assert sum(counts) == pytest.approx(40.0)


def test_warp_places_each_part_its_share_of_the_arrivals() -> None:
    shape = (0.5, 1.0, 1.5)
    n = 30_000
    times = [warp((i + 0.5) / n, shape) for i in range(n)]
    per_part = [sum(1 for x in times if k / 3 <= x < (k + 1) / 3) for k in range(3)]
    assert [c / n for c in per_part] == pytest.approx([1 / 6, 1 / 3, 1 / 2], abs=1e-3)
    assert times == sorted(times)
    silent = (0.0, 2.0, 0.0, 2.0)  # parts with no arrivals at all
    quiet = [warp((i + 0.5) / 1000, silent) for i in range(1000)]
    assert not any(0.0 <= x < 0.25 or 0.5 <= x < 0.75 for x in quiet)


def test_a_simulated_open_loop_follows_the_profile_and_keeps_its_rate() -> None:
    w = Workload("open", 4.0, 0, 0.0, ONE, ONE, profile=(0.5, 1.5))
    engine = Engine(8, 2048, 1000, 16, 4096)
    arrivals = generate(w, engine, 30.0 + 400.0, random.Random(3), 0, 30.0)
    measured = [t for t, _, _ in arrivals if t >= 30.0]
    first = sum(1 for t in measured if t < 230.0)
    assert len(measured) == pytest.approx(1600, rel=0.01)  # the window's rate, over the measured span
    assert (len(measured) - first) / first == pytest.approx(3.0, rel=0.15)
    warm = [t for t, _, _ in arrivals if t < 30.0]
    assert len(warm) == pytest.approx(
        0.5 * 4.0 * 30.0, abs=2
    )  # the warm-up at the rate the window began with


def test_a_level_open_loop_draws_the_arrivals_it_always_drew() -> None:
    w = Workload("open", 4.0, 0, 0.0, ONE, ONE)
    engine = Engine(8, 2048, 1000, 16, 4096)
    a = generate(w, engine, 200.0, random.Random(5), 0, 30.0)
    b = generate(
        Workload("open", 4.0, 0, 0.0, ONE, ONE, profile=(1.0,)), engine, 200.0, random.Random(5), 0, 30.0
    )
    assert [t for t, _, _ in a] == pytest.approx([t for t, _, _ in b], abs=1e-9)


def test_a_recorded_rising_load_is_reproduced_by_its_profile_and_not_by_its_mean_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    snaps = recording_snaps(BUSY)
    lo, hi = default_window(snaps, busy_period=True)
    history, window = history_before(snaps, lo, hi)
    w = infer_workload(window)
    assert w.profile and w.profile[-1] > 1.5 * w.profile[0]  # the recording's load rose through the window
    assert "arrivals uneven across the window" in w.why
    p = predict(history, window, {"load": 1.0})
    measured = p.measured.running
    assert p.not_reproduced() == []
    # simulated at the window's own time scale, running comes out within 15 % (21.4 against 18.8); a profile's
    # window is not calibrated to its mean ITL (`calibration.calibrated`), so this is the fit's own step model
    assert abs(p.unchanged.running - measured) < 0.3 * measured
    assert not any("decode step costs" in n for n in p.to_dict()["assumptions"])
    assert p.to_dict()["workload"]["arrival_profile"] == [float(f"{x:.4g}") for x in w.profile]
    monkeypatch.setattr(
        "kvdoctor.whatif.workload.arrival_profile", lambda snaps: ()
    )  # the mean rate throughout
    monkeypatch.setattr(
        "kvdoctor.whatif.learn._cache", OrderedDict()
    )  # learned afresh, not the kept learning
    level = predict(history, window, {"load": 1.0})
    # at the mean rate the fit's step model ran half the requests (8.7) at half the window's mean ITL (23.5 against
    # 50.1 ms); the calibration takes the decode costs to its bound (×1.3) to get the mean back, and reaches the
    # running count (19.2) only by pricing every decode step too dear: its ITL p50 misses by 48 %, the profile's
    # by 21 %. A level load is the wrong description, and the step model cannot make up for it
    assert any("decode step costs ×1.3:" in n for n in level.to_dict()["assumptions"])
    itl = p.measured.itl_p50_s
    assert abs(level.unchanged.itl_p50_s - itl) > 1.5 * abs(p.unchanged.itl_p50_s - itl)


def test_a_recorded_ramp_past_the_cap_queues_in_the_prediction_as_it_did_and_the_raised_cap_clears_it() -> (
    None
):
    # vllm-0.32-cpu-rising (recorded after the profile was built): arrivals rising 1 -> 12 req/s, cap 8 -> 16
    directory = FIXTURES / "vllm-0.32-cpu-rising"
    pair = next(p for p in load_pairs(directory) if p["name"] == "rising_cap_steep")
    r = run_pair(directory, pair)
    measured_now, predicted_now = r.prediction.measured.ttft_p95_s, r.prediction.unchanged.ttft_p95_s
    assert r.prediction.workload.profile[-1] > 3 * r.prediction.workload.profile[0]
    assert measured_now > 2.0 and predicted_now > 2.0  # the queue the top of the ramp built at 8 seats
    assert 0.5 < predicted_now / measured_now < 2.0
    assert r.after.ttft_p95_s < 0.5 and r.prediction.predicted.ttft_p95_s < 0.5  # gone at 16
    assert all(r.direction_right.values())


def test_a_ramp_past_capacity_is_told_overloaded_at_its_peak_with_the_capacity_the_server_showed() -> None:
    directory = FIXTURES / "vllm-0.32-cpu-rising"
    pair = next(p for p in load_pairs(directory) if p["name"] == "rising_cap_steep")
    r = run_pair(directory, pair)
    over = r.prediction.overload_now
    assert over is not None and over.at_peak
    assert "in the window's busiest part" in over.line()
    # what the server completed at 8 seats while requests waited, read from its own counters
    lo, hi = pair["heavy_before"]
    window = [s for s in recording_snaps(directory / pair["before"]) if lo <= s.t <= hi]
    queued_s = finished = 0.0
    for a, b in itertools.pairwise(window):
        if a.get("vllm:num_requests_waiting", 0.0) > 0 and b.get("vllm:num_requests_waiting", 0.0) > 0:
            queued_s += b.t - a.t
            finished += b.get("vllm:request_success_total") - a.get("vllm:request_success_total")
    served = finished / queued_s
    assert abs(over.capacity_requests_per_s - served) < 0.1 * served
    assert r.prediction.unchanged.requests_per_s < 0.8 * served  # the window's mean: not its capacity
    assert over.arrivals_per_s > served


def test_a_profile_keeps_its_windows_time_scale_however_long_the_run() -> None:
    # peaks past what 4 seats serve: the queue built there grows with how long the peak lasts
    engine = Engine(4, 2048, 4000, 16, 4096)
    step = StepModel(0.01, 0.002, 0.00002)
    w = Workload("open", 6.0, 0, 0.0, ONE, ONE, profile=(0.4, 0.8, 1.8), profile_span_s=60.0)
    window_long = simulate(engine, step, w, 1, 60.0, seed=2)
    run_long = simulate(
        engine, step, w, 1, 240.0, seed=2
    )  # four windows' worth of draws, each at its own scale
    stretched = Simulator(engine, step).run_workload(
        w, 240.0, 30.0, seed=2
    )  # one peak lasting four times as long
    ttft_p95 = [sorted(r.ttft)[int(0.95 * len(r.ttft))] for r in (window_long, run_long, stretched)]
    assert 0.6 < ttft_p95[1] / ttft_p95[0] < 1.6
    assert ttft_p95[2] > 2 * ttft_p95[1]


def test_plan_probes_a_rising_load_at_its_own_time_scale_as_whatif_predicts_it() -> None:
    # at ×2 the window's ~600 requests arrive in half its span: a probe of fewer seconds would squeeze the ramp's
    # peak, and the queue it builds, into half the time; plan must price what `whatif --set load=x2` predicts
    snaps = recording_snaps(BUSY)
    lo, hi = default_window(snaps, busy_period=True)
    history, window = history_before(snaps, lo, hi)
    basis = learn(history, window)
    assert basis.workload.profile
    probe = Planner(basis, {"ttft_p95_s": 1.0}).evaluate({}, 1, 2.0).predicted.quantities
    p = predict(history, window, {"load": 2.0}, with_intervals=False)
    assert probe.ttft_p95_s == pytest.approx(p.predicted.ttft_p95_s, rel=1e-9)
    assert probe.itl_p50_s == pytest.approx(p.predicted.itl_p50_s, rel=1e-9)
    assert probe.running == pytest.approx(p.predicted.running, rel=1e-9)
