"""The KV cache manager's quick refusal agrees with the allocation it stands in for."""

from __future__ import annotations

import random

from kvdoctor.whatif.kvcache import KVCacheManager
from kvdoctor.whatif.model import Request

BLOCK = 16


def _state(rng: random.Random) -> tuple[KVCacheManager, Request, int]:
    """A pool some way to full, and a waiting request: fresh, or preempted with part of its blocks still cached."""
    shared = rng.choice((0, 64))
    kv = KVCacheManager(rng.randint(8, 64), BLOCK, shared)
    holders = [Request(0.0, 100, 10, hit=shared) for _ in range(rng.randint(0, 3))]
    for r in holders:  # requests running (those that fit), some holding the shared prefix
        kv.allocate_new(r, 0, rng.randint(1, 120))
    request = Request(0.0, rng.randint(1, 400), 50, hit=shared if rng.random() < 0.5 else 0)
    if rng.random() < 0.5 and kv.allocate_new(request, 0, request.num_prompt_tokens):
        request.num_output_tokens = rng.randint(0, 30)
        kv.free(
            request, request.num_prompt_tokens + request.num_output_tokens
        )  # preempted: its full blocks cached
        request.num_computed_tokens = 0
        kv.block_pool.take(rng.randint(0, kv.block_pool.free))  # others since, evicting part of them
    return kv, request, rng.choice((1, 8, 64, 512, 2048))


def test_a_head_refused_at_once_is_one_the_allocation_would_refuse_and_none_it_would_admit_is_refused() -> (
    None
):
    rng = random.Random(7)
    refused = 0
    for _ in range(3000):
        kv, request, budget = _state(rng)
        short = kv.surely_short(request, budget)
        cached = kv.get_computed_blocks(request)
        computed = request.num_cached_tokens + cached * BLOCK
        tokens = request.num_prompt_tokens + request.num_output_tokens
        admitted = kv.allocate_new(request, cached, computed + min(tokens - computed, budget))
        assert not (short and admitted)
        refused += short
    assert 300 < refused < 2700  # both cases were met
