"""The prefix-caching and speculation knobs: parsing, what they change, the simulator honouring them; pair tools."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from kvdoctor.whatif import knobs, spec
from kvdoctor.whatif.compare import reverse_of
from kvdoctor.whatif.knobs import KnobError, parse_knob
from kvdoctor.whatif.model import Engine, LengthDist, StepModel, Workload
from kvdoctor.whatif.resolution import bucket_span, resolution
from kvdoctor.whatif.sim import Simulator
from kvdoctor.whatif.window import Snap

CLOSED = Workload("closed", 0.0, 4, 0.0, LengthDist.fixed(1040), LengthDist.fixed(40), prefix_hit_ratio=0.95)
ENGINE = Engine(max_num_seqs=8, max_num_batched_tokens=2048, num_gpu_blocks=4000, block_size=16)
STEP = StepModel(c0=0.01, c_decode=0.002, c_prefill=0.0002)


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("enable_prefix_caching=false", ("enable_prefix_caching", "false")),
        ("enable-prefix-caching=On", ("enable_prefix_caching", "true")),
        ("enable_prefix_caching=0", ("enable_prefix_caching", "false")),
        ("num_speculative_tokens=0", ("num_speculative_tokens", 0)),
        ("num_speculative_tokens=5", ("num_speculative_tokens", 5)),
        ("prefix_hit_ratio=0.4", ("prefix_hit_ratio", 0.4)),
    ],
)
def test_the_new_knobs_parse_in_vllms_words(text, expect):
    assert parse_knob(text) == expect


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("enable_prefix_caching=sometimes", "true or false"),
        ("num_speculative_tokens=-1", "whole number from 0"),
        ("num_speculative_tokens=2.5", "whole number from 0"),
        ("num_speculative_tokens=99", "to 16"),
        ("prefix_hit_ratio=1", r"in \[0, 1\)"),
        ("prefix_hit_ratio=lots", "not a number"),
    ],
)
def test_bad_values_name_the_knob(text, message):
    with pytest.raises(KnobError, match=message) as err:
        parse_knob(text)
    assert text.split("=")[0] in str(err.value)


def _apply(engine: Engine, changes: dict[str, float | str], w: Workload = CLOSED):
    return knobs.apply(engine, w, 1, changes, {})


def test_caching_off_drops_the_hits_and_says_how_many():
    e, w, _, notes = _apply(ENGINE, {"enable_prefix_caching": "false"})
    assert not e.enable_prefix_caching and w.prefix_hit_ratio == CLOSED.prefix_hit_ratio
    assert any("95% of prompt tokens" in n for n in notes)
    same, _, _, notes = _apply(e, {"enable_prefix_caching": "false"})
    assert same == e and "already off" in notes[0]


def test_caching_on_for_a_server_without_it_needs_the_hit_ratio():
    off = replace(ENGINE, enable_prefix_caching=False)
    cold = replace(CLOSED, prefix_hit_ratio=0.0)  # a server that does not cache exports no hits
    with pytest.raises(KnobError, match="prefix_hit_ratio=R"):
        _apply(off, {"enable_prefix_caching": "true"}, cold)
    with pytest.raises(KnobError, match="enable_prefix_caching=true"):
        _apply(off, {"prefix_hit_ratio": 0.5}, cold)
    with pytest.raises(KnobError, match="turned off"):
        _apply(ENGINE, {"enable_prefix_caching": "false", "prefix_hit_ratio": 0.5})
    e, w, _, notes = _apply(off, {"enable_prefix_caching": "true", "prefix_hit_ratio": 0.5}, cold)
    assert e.enable_prefix_caching and w.prefix_hit_ratio == 0.5
    assert "50% of prompt tokens" in notes[0] and "given" in notes[0]


def test_speculation_cannot_be_turned_on_without_acceptance_to_learn_from():
    with pytest.raises(KnobError, match="does not speculate"):
        _apply(ENGINE, {"num_speculative_tokens": 3})
    e, _, _, notes = _apply(ENGINE, {"num_speculative_tokens": 0})
    assert e == ENGINE and "no change" in notes[0]


def _run(engine: Engine, w: Workload = CLOSED, step: StepModel = STEP, seconds: float = 60.0):
    return Simulator(engine, step, prefix_hit_ratio=w.prefix_hit_ratio).run_workload(w, seconds, 10.0, seed=2)


def test_caching_off_computes_every_prompt_in_full_and_holds_a_copy_each():
    on = _run(ENGINE)
    off = _run(replace(ENGINE, enable_prefix_caching=False))
    # 1024 of 1040 prompt tokens were hits: off, each prefill is 1040 tokens at 0.2 ms, not 16
    assert min(off.ttft) > 0.2 > max(on.ttft)
    assert off.generation_tokens < on.generation_tokens
    assert max(off.kv_samples) > 2 * max(on.kv_samples)  # four copies of the prefix instead of one
    # caching off is exactly traffic with nothing shared
    unshared = _run(ENGINE, replace(CLOSED, prefix_hit_ratio=0.0))
    assert (off.ttft, off.generation_tokens) == (unshared.ttft, unshared.generation_tokens)


def test_a_preempted_request_resumes_from_its_cached_blocks_only_with_caching_on():
    tight = replace(ENGINE, num_gpu_blocks=60, max_model_len=960)
    w = Workload("closed", 0.0, 6, 0.0, LengthDist.fixed(200), LengthDist.fixed(300))
    on, off = _run(tight, w), _run(replace(tight, enable_prefix_caching=False), w)
    assert on.preemptions > 0 and off.preemptions > 0
    # recompute from scratch takes longer: fewer tokens in the same time
    assert off.generation_tokens < on.generation_tokens


def _speculating(acceptance: tuple[float, ...], share: float = 1.0, length: float = 3.0) -> Engine:
    return spec.measured(ENGINE, spec.Speculation(len(acceptance), share, length, acceptance))


def _tokens_per_step(engine: Engine, step: StepModel = STEP) -> float:
    w = Workload("closed", 0.0, 4, 0.0, LengthDist.fixed(100), LengthDist.fixed(400))
    res = _run(engine, w, step)
    # vLLM records one ITL per decoding request per step, however many tokens that step gave it
    return res.generation_tokens / sum(n for _, n in res.itl)


def test_drafts_accepted_at_rate_a_give_one_plus_a_k_tokens_a_step():
    engine = _speculating((0.6, 0.6, 0.6))  # each position accepted in 60 % of drafts
    assert engine.accepted_per_step == pytest.approx(1 + 0.6 * 3)
    assert _tokens_per_step(engine) == pytest.approx(2.8, rel=0.03)
    off, note = spec.with_tokens(engine, 0)
    assert "speculation off" in note and _tokens_per_step(off) == pytest.approx(1.0, rel=0.01)
    # fewer positions keep the ones measured; more continue the last ratio between positions
    one, _ = spec.with_tokens(_speculating((0.8, 0.4, 0.2)), 1)
    assert one.accepted_per_step == pytest.approx(1.8)
    five, note = spec.with_tokens(_speculating((0.8, 0.4, 0.2)), 5)
    assert five.accepted_per_step == pytest.approx(1 + 0.8 + 0.4 + 0.2 + 0.1 + 0.05)
    assert "positions 4-5 never measured" in note


def test_each_draft_token_costs_its_share_of_the_fitted_per_request_cost():
    # the window verified 1 draft token per decoding request per step: its 2 ms per request held 2 tokens
    engine = _speculating((0.5, 0.2), share=1.0, length=1.0)
    assert engine.draft_tokens_per_step == 1.0
    lone = Workload("closed", 0.0, 1, 0.0, LengthDist.fixed(50), LengthDist.fixed(200))
    for k, step_s in ((2, 0.012), (0, 0.011), (4, 0.013)):  # 10 ms + 2 ms × (1 + drafts) / 2
        after, _ = spec.with_tokens(engine, k)
        itl = {round(d, 6) for d, _ in _run(after, lone).itl}
        assert itl == {step_s}, k


def test_capacity_note_says_whether_throughput_drops_with_speculation_off():
    engine = _speculating((0.6, 0.6, 0.6))
    off, _ = spec.with_tokens(engine, 0)
    cheap = spec.capacity_note(engine, off, STEP, (1.0, 10.0), 0.0)
    assert "speculation off" in cheap and cheap.count("(-") == 2  # 2.8 tokens a step for +0 ms: off loses
    # drafts that are rarely accepted and expensive to verify: off gains
    poor = _speculating((0.05, 0.01, 0.0))
    costly = StepModel(c0=0.001, c_decode=0.01, c_prefill=0.0)
    assert spec.capacity_note(poor, spec.with_tokens(poor, 0)[0], costly, (4.0, 4.0), 0.0).count("(+") == 2


def test_a_pair_turning_on_what_before_cannot_measure_is_scored_in_reverse():
    assert reverse_of({"change": {"num_speculative_tokens": 3}}) == {"num_speculative_tokens": 0}
    assert reverse_of({"change": {"enable_prefix_caching": True}}) == {"enable_prefix_caching": "false"}
    assert reverse_of({"change": {"max_num_seqs": 12}}) is None  # predictable forward, no reverse needed
    assert reverse_of({"change": {"max_num_seqs": 12}, "reverse": {"max_num_seqs": 4}}) == {"max_num_seqs": 4}


def test_a_quantile_read_from_buckets_is_only_as_sharp_as_its_bucket():
    # 100 observations: 40 in (0, 0.025], 50 in (0.025, 0.05], 10 in (0.05, 0.1]
    buckets = {0.025: 40.0, 0.05: 90.0, 0.1: 100.0, float("inf"): 100.0}
    assert bucket_span(buckets, 0.5) == (0.025, 0.05)
    assert resolution(buckets, 0.5) == pytest.approx(1 / 3)  # ±12.5 ms around 37.5 ms
    assert bucket_span(buckets, 0.95) == (0.05, 0.1)
    assert bucket_span({0.1: 0.0, float("inf"): 5.0}, 0.5) is None  # in +Inf: no upper bound to tell
    assert resolution({}, 0.5) != resolution({}, 0.5)  # no observation: NaN


def test_without_per_position_counters_the_mean_acceptance_is_spread_over_k_positions():
    itl = "vllm:inter_token_latency_seconds"
    counters = {
        "vllm:spec_decode_num_drafts_total": 100.0,
        "vllm:spec_decode_num_draft_tokens_total": 300.0,
        "vllm:spec_decode_num_accepted_tokens_total": 90.0,
    }
    a = Snap(0.0, flat={f"{itl}_count": 0.0}, buckets={itl: {math.inf: 0.0}})
    b = Snap(60.0, flat={f"{itl}_count": 1000.0, **counters}, buckets={itl: {math.inf: 1000.0}})
    got = spec.read([a, b])
    assert got is not None and got.num_speculative_tokens == 3 and got.draft_share == 0.1
    assert sum(got.acceptance) == pytest.approx(0.9, abs=1e-6)
    assert (
        got.acceptance[0] > got.acceptance[1] > got.acceptance[2]
    )  # each position only after the one before
    # tokens per decode step agree with the counters: 1 + accepted / decode steps
    assert got.accepted_per_step(3) == pytest.approx(1 + 90 / 1000, abs=1e-6)
    b.flat = {f"{itl}_count": 1000.0}
    assert spec.read([a, b]) is None  # no draft in the window: no speculation
