"""The V1 scheduler simulation against cases worked out by hand from vllm/v1/core/sched/scheduler.py."""

from __future__ import annotations

import random

import pytest

from kvdoctor.whatif.arrivals import generate
from kvdoctor.whatif.model import Engine, LengthDist, Request, StepModel, Workload
from kvdoctor.whatif.sim import Simulator

UNIT = StepModel(c0=1.0, c_decode=0.0, c_prefill=0.0)  # every step takes 1 s: times count steps


def _run(engine: Engine, reqs: list[Request], step: StepModel = UNIT, duration: float = 100.0):
    sim = Simulator(engine, step)
    sim.trace = []
    res = sim.run([(q.arrival_time, i, q) for i, q in enumerate(reqs)], duration)
    return res, sim.trace


def test_chunked_prefill_takes_the_budget_left_after_older_requests():
    engine = Engine(max_num_seqs=8, max_num_batched_tokens=100, num_gpu_blocks=1000, block_size=16)
    res, trace = _run(engine, [Request(0.0, 250, 1), Request(0.0, 30, 1)])
    # step 0: 100 of A; step 1: 100 of A; step 2: A's last 50, then B's 30 in the same step
    assert [s.num_prefill_tokens for s in trace[:3]] == [100, 100, 80]
    assert [s.num_admitted for s in trace[:3]] == [
        1,
        0,
        1,
    ]  # B waits behind A until A's chunk leaves budget over
    assert sorted(res.ttft) == [3.0, 3.0]
    assert res.queue == [0.0, 2.0]


def test_queue_time_is_observed_when_the_request_finishes_as_vllm_records_it():
    # one request at a time, 1 s a step: A runs 0-5 s, B waits 5 s and runs 5-10 s, C waits 10 s and runs from 10 s
    engine = Engine(max_num_seqs=1, max_num_batched_tokens=100, num_gpu_blocks=100, block_size=16)
    reqs = [Request(0.0, 10, 5), Request(0.0, 10, 5), Request(0.0, 10, 5)]
    sim = Simulator(engine, UNIT)
    res = sim.run([(q.arrival_time, i, q) for i, q in enumerate(reqs)], duration_s=6.0, warmup_s=6.0)
    # the measured span is 6-12 s: vLLM observes request_queue_time_seconds per finished request, so B's 5 s
    # (scheduled in the warm-up, finished at 10 s) counts and C's 10 s (scheduled at 10 s, unfinished) does not
    assert res.finished == 1
    assert res.queue == [5.0]


def test_queue_time_starts_when_the_engine_core_takes_the_request_ttft_at_its_arrival():
    # vLLM's engine core takes the requests that arrived during a step (add_request: the QUEUED event) before it
    # schedules the next one: B, arriving half way through A's first step, is queued and scheduled at 1 s, so
    # its queue time is 0; its TTFT counts from its arrival at the front end (0.5 s) to its first token (2 s)
    engine = Engine(max_num_seqs=8, max_num_batched_tokens=100, num_gpu_blocks=100, block_size=16)
    res, trace = _run(engine, [Request(0.0, 10, 3), Request(0.5, 10, 3)])
    assert [s.num_admitted for s in trace[:2]] == [1, 1]
    assert sorted(res.ttft) == [1.0, 1.5]
    assert res.queue == [0.0, 0.0]


def test_youngest_request_is_preempted_recomputed_and_requeued_at_the_front():
    # 4 usable blocks of 4 tokens; A and B both 4-token prompts, 10 output tokens
    engine = Engine(max_num_seqs=8, max_num_batched_tokens=100, num_gpu_blocks=5, block_size=4)
    a, b = Request(0.0, 4, 10), Request(0.0, 4, 10)
    res, trace = _run(engine, [a, b])
    assert res.preemptions == 1
    # step 5: A (older) needs its 3rd block, the cache is full, so B (admitted last) is evicted
    assert trace[5].preempted and trace[5].num_admitted == 0
    # B now needs 9 tokens recomputed (3 blocks): blocked until A finishes at t=10, re-prefilled in step 10
    assert all(s.num_waiting == 1 for s in trace[6:10])
    assert trace[10].num_prefill_tokens == 9 and trace[10].num_admitted == 1
    assert res.finished == 2
    assert len(trace) == 15  # B's last token in step 14
    assert sorted(res.ttft) == [1.0, 1.0]  # the preempted request keeps its first-token time
    # B's last token came at t=5 (end of step 4), its next at t=11: vLLM's inter-token latency sees that 6 s
    # gap, not the 10 s since B's first token
    assert max(itl for itl, _ in res.itl) == 6.0


def test_no_admission_in_a_step_that_preempted():
    engine = Engine(max_num_seqs=64, max_num_batched_tokens=512, num_gpu_blocks=40, block_size=16)
    w = Workload("open", 4.0, 0, 0.0, LengthDist(((100, 300, 1.0),), 200), LengthDist(((50, 200, 1.0),), 125))
    sim = Simulator(engine, StepModel(0.02, 0.001, 0.0001))
    sim.trace = []
    res = sim.run_workload(w, 60.0, 0.0, seed=3)
    preempting = [s for s in sim.trace if s.preempted]
    assert res.preemptions > 0 and preempting
    assert all(s.num_admitted == 0 for s in preempting)
    assert all(s.blocks_used <= engine.usable_blocks for s in sim.trace)


def test_head_of_line_blocking_keeps_a_small_request_behind_a_big_one():
    # 6 usable blocks of 16; A holds 3; B (head) needs 5 blocks, C needs 1 and would fit, but waits behind B
    engine = Engine(max_num_seqs=8, max_num_batched_tokens=2048, num_gpu_blocks=7, block_size=16)
    a, b, c = Request(0.0, 40, 20), Request(0.5, 70, 2), Request(0.5, 10, 2)
    res, trace = _run(engine, [a, b, c])
    # A decodes alone until it finishes; only then B and C are admitted, in order
    admitted = [(i, s.num_admitted) for i, s in enumerate(trace) if s.num_admitted]
    assert admitted[0] == (0, 1)
    assert admitted[1][1] == 2 and admitted[1][0] >= 19
    assert res.finished == 3


def test_max_num_seqs_caps_the_running_set():
    engine = Engine(max_num_seqs=4, max_num_batched_tokens=2048, num_gpu_blocks=10000, block_size=16)
    w = Workload(
        "closed", 0.0, 24, 0.0, LengthDist(((100, 300, 1.0),), 200), LengthDist(((64, 256, 1.0),), 160)
    )
    res = Simulator(engine, StepModel(0.01, 0.001, 0.00001)).run_workload(w, 60.0, 10.0, seed=1)
    assert res.running_max == 4
    assert 3.5 < res.running_area / res.span_s <= 4.0
    assert 19 < res.waiting_area / res.span_s <= 20.0


def test_running_and_waiting_read_as_vllms_gauges_after_each_steps_update():
    # vLLM publishes len(running) and len(waiting) at the end of update_from_output (make_stats), and a scrape reads
    # the last published: a request is not running yet in the step that admits it, and still is in the step that
    # finishes it. One seat, 1 s a step, A and B of 5 tokens: A runs steps 0-4, B waits and runs steps 5-9.
    engine = Engine(max_num_seqs=1, max_num_batched_tokens=100, num_gpu_blocks=100, block_size=16)
    res, trace = _run(engine, [Request(0.0, 10, 5), Request(0.0, 10, 5)], duration=10.0)
    assert [s.num_admitted for s in trace] == [1, 0, 0, 0, 0, 1, 0, 0, 0, 0]
    # shown running: 0 in step 0, A in 1-4, 0 in step 5 (A freed, B not yet updated), B in 6-9
    assert res.running_area == 8.0
    # shown waiting: 0 in step 0 (nothing published yet), B in steps 1-5
    assert res.waiting_area == 5.0
    # KV usage likewise (a scrape a second): an empty cache at 0 s, A's block at 2-5 s, none at 6 s (A freed, B's
    # block not yet published), B's at 7-10 s
    one = res.kv_samples[2]
    assert one > 0.0 and res.kv_samples == [0.0, 0.0, one, one, one, one, 0.0, one, one, one, one]
    assert res.finished == 2


def test_prefix_hits_on_full_blocks_skip_their_prefill():
    engine = Engine(max_num_seqs=8, max_num_batched_tokens=4096, num_gpu_blocks=1000, block_size=16)
    step = StepModel(c0=0.0001, c_decode=0.0, c_prefill=0.001)
    w = Workload("open", 0.5, 0, 0.0, LengthDist.fixed(1040), LengthDist.fixed(2))
    cold = Simulator(engine, step).run_workload(w, 60.0, 0.0, seed=1)
    warm = Simulator(engine, step, prefix_hit_ratio=0.985).run_workload(w, 60.0, 0.0, seed=1)
    # a 1024-token shared prefix is 64 full blocks: 16 of 1040 tokens are computed instead of all
    assert max(cold.ttft) > 1.0
    assert max(warm.ttft) < 0.02


def test_an_open_loop_sends_the_window_its_rate_in_every_seed_not_a_fresh_poisson_count():
    # the window counted its requests, so the rate it gave is met over the measured span: a fresh Poisson count
    # would wander ±1/√240 ≈ ±6 % from seed to seed, an error in tokens/s the window never had
    engine = Engine(max_num_seqs=8, max_num_batched_tokens=100, num_gpu_blocks=100, block_size=16)
    fast = StepModel(c0=0.001, c_decode=0.0, c_prefill=0.0)
    w = Workload("open", 2.0, 0, 0.0, LengthDist.fixed(10), LengthDist.fixed(5))
    finished = [Simulator(engine, fast).run_workload(w, 120.0, 30.0, seed).finished for seed in range(8)]
    assert all(abs(n - 240) <= 2 for n in finished), finished


def test_a_load_multiple_keeps_the_seeds_requests_each_at_its_time_over_the_multiple():
    # the loads a headroom bisects share their draws (common random numbers): at ×2 the same requests come first, in
    # the same order, at their times scaled by one factor near ½, so a probe moves with the load, not with a new draw
    engine = Engine(max_num_seqs=8, max_num_batched_tokens=100, num_gpu_blocks=100, block_size=16)
    prompt = LengthDist(((5.0, 15.0, 0.5), (90.0, 110.0, 1.0)), 55.0)
    w = Workload("open", 2.0, 0, 0.0, prompt, LengthDist(((4.0, 6.0, 0.5), (45.0, 55.0, 1.0)), 27.5))
    one, two = (generate(w.scaled(m), engine, 150.0, random.Random(3), 0, 30.0) for m in (1.0, 2.0))
    assert len(two) == pytest.approx(2 * len(one), abs=2)
    for lo, hi in ((0.0, 30.0), (30.0, 150.0)):
        a, b = ([x for x in side if lo <= x[0] < hi] for side in (one, two))
        assert [r.num_prompt_tokens for _, _, r in a] == [r.num_prompt_tokens for _, _, r in b[: len(a)]]
        ratios = [(tb - lo) / (ta - lo) for (ta, _, _), (tb, _, _) in zip(a, b, strict=False)]
        assert max(ratios) - min(ratios) < 1e-9 and 0.35 < ratios[0] < 0.65, ratios[:3]
