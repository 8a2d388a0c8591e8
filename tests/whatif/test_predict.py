"""What-if predictions on real vLLM recordings: workload inference, step model, knobs, and the recorded pairs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kvdoctor.whatif.compare import load_pairs, run_pair
from kvdoctor.whatif.effects import effect_of
from kvdoctor.whatif.knobs import KnobError, parse_knob
from kvdoctor.whatif.predict import predict
from kvdoctor.whatif.sources import default_window, recording_snaps
from kvdoctor.whatif.stepfit import fit_step_model, history_rows
from kvdoctor.whatif.window import delta, delta_buckets, in_window
from kvdoctor.whatif.workload import WindowError, infer_workload, length_dist

PAIRS = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-whatif"
COBIND = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-cobinding"


def _window(shared: Path, name: str, lo: float, hi: float):
    snaps = recording_snaps(shared / f"{name}.jsonl.gz")
    t0 = snaps[0].t
    return snaps, in_window(snaps, t0 + lo, t0 + hi)


def test_a_persistent_queue_with_a_flat_population_is_a_closed_loop(shared_032):
    _, window = _window(shared_032, "batch_cap", 65, 95)  # 24 clients, max_num_seqs 4
    w = infer_workload(window)
    assert (w.kind, w.population) == ("closed", 24)
    assert "held at 24" in w.why
    assert 100 <= w.prompt.mean <= 300 and 64 <= w.output.mean <= 256


def test_independent_arrivals_without_a_queue_are_an_open_loop(shared_032):
    _, window = _window(shared_032, "healthy", 10, 90)  # 2 req/s open loop
    w = infer_workload(window)
    assert w.kind == "open"
    assert 1.7 <= w.rate_per_s <= 2.3


def test_a_queue_growing_past_capacity_is_an_open_loop_at_a_15s_scrape():
    # llama-shaped, 1 req/s open loop above its ~0.8 req/s capacity: the queue grows all window; at a 15 s scrape its
    # few scrapes sit within 10 % of their median, which alone would read as a closed loop of ~90 clients
    held = next(w for w in json.loads((COBIND / "labels.json").read_text()) if w.get("relief"))
    snaps = recording_snaps(COBIND / held["file"])
    kept = [s for i, s in enumerate(snaps) if i % 8 == 0 and s.t <= held["steady_to"]]  # ~15 s of 2 s scrapes
    window = in_window(kept, *default_window(kept))  # what the advisor learns from at the window's end
    w = infer_workload(window)
    done = delta(window[0], window[-1], "vllm:request_success_total") / (window[-1].t - window[0].t)
    assert w.kind == "open", w.why
    assert w.rate_per_s > 1.1 * done  # the arrivals the growing queue holds, beyond those completed
    assert 0.8 <= w.rate_per_s <= 1.25


def test_prefix_hit_ratio_comes_from_the_counters(shared_032):
    _, shared = _window(shared_032, "prefix_cache_shared", 10, 60)
    _, unique = _window(shared_032, "prefix_cache_unique", 10, 60)
    assert infer_workload(shared).prefix_hit_ratio > 0.9
    assert infer_workload(unique).prefix_hit_ratio < 0.01


def test_length_distribution_keeps_bucket_counts_and_the_exact_mean(shared_032):
    _, window = _window(shared_032, "batch_cap", 65, 95)
    a, b = window[0], window[-1]
    buckets = delta_buckets(a, b, "vllm:request_prompt_tokens")
    mean = (b.flat["vllm:request_prompt_tokens_sum"] - a.flat["vllm:request_prompt_tokens_sum"]) / (
        b.flat["vllm:request_prompt_tokens_count"] - a.flat["vllm:request_prompt_tokens_count"]
    )
    d = length_dist(buckets, mean)
    assert d.mean == pytest.approx(mean, rel=0.01)
    share_le_200 = buckets[200.0] / buckets[math.inf]
    assert max(cum for lo, hi, cum in d.bounds if hi <= 200.0 + 1e-9) == pytest.approx(share_le_200, abs=1e-6)


def test_step_model_reproduces_the_step_times_the_server_showed(shared_032):
    snaps = recording_snaps(shared_032 / "compute_bound.jsonl.gz")
    m = fit_step_model(snaps, 2048)
    assert m.c0 > 0 and m.c_decode > 0 and m.c_prefill > 0
    assert m.residual_ratio < 0.3
    for x, y, _ in history_rows(snaps, 2048):
        assert abs(m.duration(x[1], x[2], 0) - y) / y < 0.5, (x, y)
    # the batch shows in the step time: 31 decoding requests cost well over one
    assert m.duration(31, 0, 0) > 1.5 * m.duration(1, 0, 0)


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("load=x1.5", ("load", 1.5)),
        ("load=×2", ("load", 2.0)),
        ("load=1.5", ("load", 1.5)),
        ("max-num-seqs=16", ("max_num_seqs", 16)),
        ("kv_cache_dtype=fp8", ("kv_cache_dtype", "fp8")),
    ],
)
def test_knobs_parse(text, expect):
    assert parse_knob(text) == expect


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_num_seqs", "NAME=VALUE"),
        ("batch=4", "unknown knob 'batch'"),
        ("max_num_seqs=4.5", "whole number"),
        ("gpu_memory_utilization=1.5", "fraction"),
        ("kv_cache_dtype=int4", "fp8"),
        ("load=fast", "not a number"),
    ],
)
def test_bad_knobs_name_the_flag(text, message):
    with pytest.raises(KnobError, match=message) as err:
        parse_knob(text)
    assert text.split("=")[0] in str(err.value)


def test_unchanged_prediction_reproduces_each_limit(shared_032):
    for name, lo, hi, cls in (
        ("batch_cap", 65, 95, "batch_cap"),
        ("kv_bound", 70, 125, "kv_cache"),
        ("compute_bound", 30, 120, "compute"),
        ("healthy", 10, 90, "healthy"),
    ):
        snaps, window = _window(shared_032, name, lo, hi)
        p = predict(snaps, window, {})
        assert p.unchanged.bottleneck == cls, name
        for k in ("ttft_p50_s", "itl_p50_s", "generation_tokens_per_s"):
            got, want = getattr(p.unchanged, k), getattr(p.measured, k)
            assert abs(got - want) / want < 0.3, (name, k, got, want)
        assert p.not_reproduced() == [], name
        assert "not reproduced" not in effect_of(p, {}, 0.0).summary()


def test_an_advice_predicted_from_a_window_the_model_misreads_says_so():
    v0 = recording_snaps(Path(__file__).parents[1] / "fixtures/recordings/vllm-0.8.5-cpu/kv_bound.jsonl.gz")
    lo, hi = default_window(v0)
    p = predict([s for s in v0 if s.t <= hi], in_window(v0, lo, hi), {"kv_cache_dtype": "fp8"})
    missed = p.not_reproduced()
    assert any(m.startswith("tokens/s ") for m in missed)
    assert f"; the window itself not reproduced: {'; '.join(missed)}" in effect_of(p, {}, 0.0).summary()


def test_a_window_without_traffic_is_refused(shared_032):
    snaps, window = _window(shared_032, "batch_cap", 0, 5.5)  # the idle lead-in
    with pytest.raises(WindowError, match="requests finished"):
        predict(snaps, window, {"max_num_seqs": 8})


def test_same_seed_same_prediction(shared_032):
    snaps, window = _window(shared_032, "kv_bound", 70, 125)
    a = predict(snaps, window, {"kv_cache_tokens": 8192}, seed=3).to_dict()
    b = predict(snaps, window, {"kv_cache_tokens": 8192}, seed=3).to_dict()
    assert a == b


PAIR_LIST = load_pairs(PAIRS)
# No wrong direction since the pairs were re-recorded alone on the machine (the first mnbt pair, recorded beside
# other jobs, showed a -17 % tokens/s a quiet re-recording does not); a (pair, quantity) here keeps a miss visible.
# load_x1.5_healthy's ITL p50 direction, wrong from session 6 (its history shows batches of 1-3 only, so the
# per-request decode cost leaned on the structure, +13-16 % where this Xeon measured +4 %), came right in session
# 20 when the decode costs were calibrated to the window's own mean ITL (calibration.py): +9 % predicted.
KNOWN_WRONG: set[tuple[str, str]] = set()
# The max_num_batched_tokens 2048 -> 512 TTFT p95 miss (1.63 s predicted against 0.96 s, read through vLLM's 1-2.5 s
# bucket) closed with the Bayesian step model (session 6: ~1.25 s, 29 %) and opened again in session 19 (~1.7 s,
# 75 %), when the step fit stopped crediting decoders to the prefills of an interval no scrape saw running: its fit
# of the history went from 22 to 10 % error and its ITL p50 after the change from 31 to 17 %, but the better-read
# KV cost (c_kv 288 -> 394 ns a context token) makes each 512-token chunk re-read more. A (pair, side, quantity)
# here keeps a miss visible.
KNOWN_FAR: set[tuple[str, str, str]] = {("max_num_batched_tokens_2048_to_512", "changed", "ttft_p95_s")}
# generous bounds (unchanged, changed): the benchmark reports the real errors; these catch a model that falls apart
BOUNDS = {
    "ttft_p50_s": (0.3, 0.5),
    "generation_tokens_per_s": (0.3, 0.5),
    "ttft_p95_s": (0.6, 0.6),
    "itl_p50_s": (0.8, 0.8),
}


@pytest.mark.parametrize("pair", PAIR_LIST, ids=[str(p["name"]) for p in PAIR_LIST])
def test_recorded_pairs_get_the_directions_right_and_stay_near(pair):
    r = run_pair(PAIRS, pair)
    for k, right in r.direction_right.items():
        assert right != ((r.name, k) in KNOWN_WRONG), (r.name, k)
    for k, bounds in BOUNDS.items():
        for which, err, bound in (
            ("unchanged", r.unchanged_error, bounds[0]),
            ("changed", r.changed_error, bounds[1]),
        ):
            assert (err[k] < bound) != ((r.name, which, k) in KNOWN_FAR), (r.name, which, k, err[k])


def test_a_roofline_prior_shapes_the_fit_where_the_history_shows_one_batch_size(shared_032):
    from kvdoctor.capacity.presets import custom_gpu, get_gpu, get_model
    from kvdoctor.whatif.prior import physical_prior

    _, snaps = _window(shared_032, "batch_cap", 65, 95)  # held at the cap: batches of 4 only
    roofline = physical_prior(get_model("Qwen3-8B"), get_gpu("H100"), 144 * 1024)
    assert roofline is not None and roofline.c0 > 50 * roofline.c_decode  # a GPU decode step is weight-bound
    assert physical_prior(get_model("Qwen3-8B"), custom_gpu(80), 1024.0) is None  # no data sheet, no prior
    plain = fit_step_model(snaps, 2048)
    shaped = fit_step_model(snaps, 2048, roofline)
    assert shaped.source == "fit+prior(roofline)" and plain.source == "fit+structure"
    assert any("roofline Qwen3-8B on H100-80GB" in n for n in shaped.notes)
    assert shaped.c_kv > 0
    ratio = roofline.c_decode / roofline.c0
    assert abs(shaped.c_decode / shaped.c0 - ratio) < abs(plain.c_decode / plain.c0 - ratio)
    for x, y, _ in history_rows(snaps, 2048):  # still the target's own step times
        assert abs(shaped.duration(*x[1:]) - y) / y < 0.6


def test_one_batch_size_in_the_history_splits_the_step_and_says_so():
    # kv2x_restart's history is its KV-bound phase only (6 running, always preempting): no light stretch to learn
    # how a step grows with the batch; a bigger batch must still cost more than a smaller one
    pair = next(p for p in PAIR_LIST if p["name"] == "kv_cache_doubled_restart")
    snaps = recording_snaps(PAIRS / str(pair["before"]))
    model = fit_step_model([s for s in snaps if s.t <= pair["heavy_before"][1]], 2048)
    assert any("taken as half the mean step" in n for n in model.notes)
    assert model.c0 > 0 and model.c_decode > 0 and model.c_prefill > 0
    assert model.duration(13, 12, 0) > model.duration(6, 12, 0)


LATER = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-whatif3"  # recorded after the tuning


def _later(name: str):
    return run_pair(LATER, next(p for p in load_pairs(LATER) if p["name"] == name))


def test_a_closed_loop_doubled_across_the_cap_is_predicted_to_queue_as_it_did():
    r = _later("tiny_closedx2")  # 5 → 10 clients against --max-num-seqs 8
    before, after, measured = r.prediction.unchanged, r.prediction.predicted, r.after
    assert measured.running > 7.5 and measured.waiting > 1.5  # vLLM: pinned at the cap, the rest queued
    assert after.running > 7.5 and after.waiting > 1.0
    assert before.waiting < 0.5
    measured_growth = measured.ttft_p50_s / r.prediction.measured.ttft_p50_s
    assert 0.5 * measured_growth < after.ttft_p50_s / before.ttft_p50_s < 2 * measured_growth


@pytest.mark.parametrize("name", ["tiny_loadhalf", "llama_loadhalf"])
def test_an_open_loop_halved_halves_the_tokens_and_shortens_the_steps(name):
    r = _later(name)
    tokens = r.prediction.predicted.generation_tokens_per_s / r.prediction.unchanged.generation_tokens_per_s
    assert 0.4 < tokens < 0.6  # an open loop below capacity serves what arrives
    assert r.after.generation_tokens_per_s / r.prediction.measured.generation_tokens_per_s == pytest.approx(
        tokens, rel=0.2
    )
    assert (
        r.prediction.predicted.itl_p50_s < r.prediction.unchanged.itl_p50_s
    )  # fewer decoders a step, as measured
    assert r.after.itl_p50_s < r.prediction.measured.itl_p50_s


CHECK2 = (
    Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-plancheck2"
)  # another CPU, bf16, set aside


def test_a_cap_lowered_past_capacity_on_another_cpu_is_told_overloaded_at_the_rate_vllm_served():
    # cap 64 at 4 req/s (26 running) lowered to 16 on the Llama-shaped model in bf16 on an Intel Xeon: vLLM served
    # 3.2 req/s at the cap and the rest queued
    r = run_pair(CHECK2, next(p for p in load_pairs(CHECK2) if p["name"] == "llama_bf16_cap64to16"))
    over, measured = r.prediction.overload_after, r.after
    assert measured.running > 15 and measured.waiting > 20 and measured.requests_per_s < 3.5
    assert over is not None and over.arrivals_per_s > over.capacity_requests_per_s
    assert over.capacity_requests_per_s == pytest.approx(measured.requests_per_s, rel=0.15)
    assert r.prediction.predicted.running == pytest.approx(measured.running, abs=1.5)
    assert r.prediction.overload_now is None  # the window itself kept up
