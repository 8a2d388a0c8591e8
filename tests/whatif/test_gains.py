"""Whether a relief helps: throughput at a saturated server, weighed against the ITL the bigger batch costs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvdoctor.ceiling import CEILING_SHARE
from kvdoctor.verdicts import Effect
from kvdoctor.whatif import gains


def _effect(change, now, after, then="compute", **load):
    return Effect(change, now, after, then, **load)


def test_the_ceiling_share_is_what_a_linear_step_curve_says_the_relief_costs():
    # a step costs 20 ms + 2 ms a running request: at 30 running the server makes 30/80 ms of its 1/2 ms ceiling
    step = {30: 0.080, 60: 0.140}
    now = {"itl_p50_s": step[30], "generation_tokens_per_s": 30 / step[30]}
    after = {"itl_p50_s": step[60], "generation_tokens_per_s": 60 / step[60]}
    g = gains.gain(_effect({"max_num_seqs": 60}, now, after, closed_loop=True), "ttft_p95_s")
    assert gains.ceiling_share(g) == pytest.approx(0.75)  # 2 ms x 30 of 80 ms
    # a relief that does not slow tokens (a replica, a cache that ends preemption) is not at the ceiling
    faster = gains.gain(_effect({"replicas": 2}, now, {**now, "itl_p50_s": 0.05}), "ttft_p95_s")
    assert gains.ceiling_share(faster) == 0.0


def test_at_capacity_throughput_bought_at_the_compute_ceiling_is_no_relief():
    # llama_cobind measured (whatif2 README): --max-num-seqs 32 -> 64 at an open loop past capacity bought +5 %
    # tokens/s (58.4 -> 61.3) for ITL p50 x2.8 (273 -> 773 ms): the doubled batch runs at 93 % of the ceiling
    before = {"itl_p50_s": 0.273, "generation_tokens_per_s": 58.4}
    cap = _effect({"max_num_seqs": 64}, before, {"itl_p50_s": 0.773, "generation_tokens_per_s": 61.3})
    cap = replace(cap, overloaded_now=True)
    assert gains.ceiling_share(gains.gain(cap, "ttft_p95_s")) == pytest.approx(0.93, abs=0.01)
    assert not gains.helps(cap, "ttft_p95_s")
    # that gain sits on the 5 % line (+4.97 %); past it, at the same ITL cost, it is still no relief …
    past = replace(cap, after={**cap.after, "generation_tokens_per_s": 62.0})
    assert gains.gain(past, "ttft_p95_s").throughput >= 1 + gains.NOISE and not gains.helps(
        past, "ttft_p95_s"
    )
    # … while below capacity the same gain is arrivals served, not a trade (the latency rule decides there)
    assert gains.helps(replace(past, overloaded_now=False), "ttft_p95_s")
    # kv2x_after's cache x2 as simulated (closed loop): +40 % tokens/s for ITL x1.7, u 0.51: capacity, a relief
    cache = _effect(
        {"kv_cache_tokens": 2},
        {"itl_p50_s": 0.0100, "generation_tokens_per_s": 100.0},
        {"itl_p50_s": 0.0170, "generation_tokens_per_s": 140.0},
        closed_loop=True,
    )
    assert gains.ceiling_share(gains.gain(cache, "ttft_p95_s")) < CEILING_SHARE
    assert gains.helps(cache, "ttft_p95_s")


def test_past_capacity_a_relief_that_ends_the_overload_helps_whatever_tokens_s_it_shows():
    # llama_cobind_before as simulated: now just past capacity, a second replica serves every arrival (TTFT steady
    # again, ITL x0.35) at +2 % tokens/s: the queue stops growing, which is the relief an open loop needs
    now = {"ttft_p95_s": None, "itl_p50_s": 0.28, "generation_tokens_per_s": 55.0}
    replica = _effect(
        {"replicas": 2}, now, {"ttft_p95_s": 3.0, "itl_p50_s": 0.1, "generation_tokens_per_s": 56.0}
    )
    replica = replace(replica, overloaded_now=True)
    assert gains.ends_overload(replica) and gains.helps(replica, "ttft_p95_s")
    # the cap x2 leaves the queue growing (no steady TTFT after): +2 % is no capacity
    cap = replace(
        replica, change={"max_num_seqs": 64}, after={**now, "itl_p50_s": 0.4, "generation_tokens_per_s": 56.0}
    )
    assert not gains.ends_overload(cap) and not gains.helps(cap, "ttft_p95_s")
