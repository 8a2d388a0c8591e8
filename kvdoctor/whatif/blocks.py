"""The KV block pool as vLLM's `BlockPool` keeps it: referenced blocks, and a free queue evicted oldest first.

Freed blocks keep their cached content until reused (cached but unreferenced blocks count as free). A preempted
request's full blocks stay hittable while they sit in the queue; vLLM frees a request's blocks tail first, so
eviction eats the end of its sequence and what survives is always a prefix it can hit when it resumes.
"""

from __future__ import annotations

from collections import deque


class FreedBlocks:
    """A run of freed blocks in the free queue: a preempted request's cached prefix, or blocks nobody will hit."""

    __slots__ = ("blocks", "owner")

    def __init__(self, owner: object, blocks: int) -> None:
        self.owner, self.blocks = owner, blocks


class BlockPool:
    """Counts blocks: `used` referenced, the rest free (never-used first, then freed segments oldest first)."""

    def __init__(self, usable: int) -> None:
        self.usable = usable
        self.used = 0
        self.free = usable  # blocks an allocation may take: usable - used, kept so the hot loop reads a field
        self.fresh = usable
        self.queue: deque[FreedBlocks] = deque()

    def take(self, n: int) -> None:
        """Reference n free blocks, evicting the oldest cached ones when the never-used run out."""
        self.used += n
        self.free -= n
        x = min(self.fresh, n)
        self.fresh -= x
        n -= x
        q = self.queue
        while n > 0 and q:
            seg = q[0]
            x = min(seg.blocks, n)
            seg.blocks -= x
            n -= x
            if seg.blocks == 0:
                q.popleft()

    def release(self, n: int, owner: object = None, cached: int = 0) -> FreedBlocks | None:
        """Free n referenced blocks; `cached` of them (a prefix of owner's) stay hittable; returns their segment."""
        self.used -= n
        self.free += n
        junk = n - cached
        if junk > 0:
            self.queue.append(FreedBlocks(None, junk))
        if cached > 0:
            seg = FreedBlocks(owner, cached)
            self.queue.append(seg)
            return seg
        return None

    def rehit(self, seg: FreedBlocks | None, owner: object, limit: int) -> int:
        """Re-reference up to limit blocks of owner's surviving prefix (a prefix-cache hit); returns how many."""
        if seg is None or seg.owner is not owner or seg.blocks <= 0:
            return 0
        n = min(seg.blocks, limit)
        seg.blocks -= n
        self.used += n
        self.free -= n
        return n
