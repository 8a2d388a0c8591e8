"""Per-request block accounting over the pool, as vLLM's `vllm/v1/core/kv_cache_manager.py` `KVCacheManager`
does it.

Requests sharing a common prefix hold its full blocks once, by reference (`shared_refs`); a request's own
blocks are counted in `Request.num_blocks`. vLLM allocates on demand: a request gets the blocks its next
tokens need, when it needs them, and gives them all back when it finishes or is preempted.
"""

from __future__ import annotations

import math

from kvdoctor.whatif.blocks import BlockPool
from kvdoctor.whatif.model import Request


class KVCacheManager:
    """The blocks of one engine: a `BlockPool` of `usable` blocks and the shared prefix's reference count."""

    __slots__ = ("block_pool", "block_size", "enable_caching", "shared_blocks", "shared_refs", "usable")

    def __init__(
        self, usable: int, block_size: int, shared_prefix_tokens: int = 0, enable_caching: bool = True
    ) -> None:
        self.block_pool = BlockPool(usable)
        self.enable_caching = enable_caching  # vLLM's enable_prefix_caching: off, freed blocks are never hit
        self.usable, self.block_size = usable, block_size
        self.shared_blocks = shared_prefix_tokens // block_size
        self.shared_refs = (
            0  # requests holding the shared prefix; its blocks are freed when the last one lets go
        )

    @property
    def usage(self) -> float:
        """What `vllm:kv_cache_usage_perc` shows: referenced blocks over usable ones."""
        return self.block_pool.used / self.usable

    def num_blocks_needed(self, request: Request, num_tokens: float) -> int:
        """Blocks a running request must add so that its first num_tokens tokens have slots."""
        return (
            math.ceil(num_tokens / self.block_size)
            - request.num_cached_tokens // self.block_size
            - request.num_blocks
        )

    def allocate(self, request: Request, num_blocks: int) -> None:
        """Give a running request num_blocks more (the caller made room: `allocate_slots` succeeded)."""
        request.num_blocks += num_blocks
        self.block_pool.take(num_blocks)

    def get_computed_blocks(self, request: Request) -> int:
        """Own blocks of a waiting request still cached from before its preemption (`get_computed_blocks`).

        The shared prefix is hit separately; the last token is always recomputed, as vLLM does, so a full hit
        still leaves one token to schedule.
        """
        segment = request.cached_segment
        if segment is None or segment.owner is not request:
            return 0
        num_tokens = request.num_prompt_tokens + request.num_output_tokens
        return max(
            0,
            min(
                segment.blocks,
                (num_tokens - 1) // self.block_size - request.num_cached_tokens // self.block_size,
            ),
        )

    def surely_short(self, request: Request, token_budget: int) -> bool:
        """Whether the pool cannot admit a waiting request under token_budget even if every block it held were
        still cached: `allocate_new` would fail for any `get_computed_blocks`, so neither need be asked."""
        # the fewest it could need: its computed tokens are at least the shared prefix, and any own cached blocks
        # count among those it takes
        num_tokens = min(
            request.num_prompt_tokens + request.num_output_tokens, request.num_cached_tokens + token_budget
        )
        hit_blocks = request.num_cached_tokens // self.block_size
        prefix_blocks = self.shared_blocks if hit_blocks and self.shared_refs == 0 else 0
        return math.ceil(num_tokens / self.block_size) - hit_blocks + prefix_blocks > self.block_pool.free

    def allocate_new(self, request: Request, num_cached_blocks: int, num_tokens: int) -> bool:
        """Admit a waiting request with slots for its first num_tokens tokens (`allocate_slots` with
        `new_computed_blocks`): its cached blocks re-referenced, the shared prefix if nobody holds it,
        the rest new. False, changing nothing, when the pool cannot hold them."""
        block_size = self.block_size
        hit_blocks = request.num_cached_tokens // block_size
        num_new_blocks = max(0, math.ceil(num_tokens / block_size) - hit_blocks - num_cached_blocks)
        prefix_blocks = self.shared_blocks if hit_blocks and self.shared_refs == 0 else 0
        pool = self.block_pool
        if num_new_blocks + prefix_blocks + num_cached_blocks > pool.free:
            return False
        num_cached_blocks = pool.rehit(request.cached_segment, request, num_cached_blocks)
        pool.take(num_new_blocks + prefix_blocks)
        request.cached_segment = None
        if hit_blocks:
            self.shared_refs += 1
        request.num_blocks = num_new_blocks + num_cached_blocks
        return True

    def free(self, request: Request, num_computed_tokens: int = 0) -> None:
        """Release every block the request holds (`KVCacheManager.free`); the full blocks among its first
        num_computed_tokens stay cached in the free queue for its resume (a preemption), the rest are junk."""
        block_size = self.block_size
        own_full = num_computed_tokens // block_size - request.num_cached_tokens // block_size
        cached = min(request.num_blocks, max(0, own_full)) if self.enable_caching else 0
        request.cached_segment = self.block_pool.release(request.num_blocks, request, cached)
        if request.num_cached_tokens:
            self.shared_refs -= 1
            if self.shared_refs == 0:
                self.block_pool.release(self.shared_blocks)
        request.num_blocks = 0
