"""Prometheus histogram_quantile on classic buckets, and the max_model_len bound from vLLM's 1-2-5 buckets."""

from __future__ import annotations

import math
from collections.abc import Iterable


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float:
    """Prometheus' bucketQuantile: q-quantile from (upper bound, cumulative count) pairs; NaN when undefined."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    merged: dict[float, float] = {}
    for le, count in buckets:
        merged[le] = merged.get(le, 0.0) + count
    bs = sorted(merged.items())
    if len(bs) < 2 or bs[-1][0] != math.inf:
        return math.nan
    counts: list[float] = []
    for _, c in bs:
        prev = counts[-1] if counts else None
        if prev is not None and c != 0 and abs(c - prev) / c <= 1e-12:
            c = prev
        counts.append(max(c, prev) if prev is not None else c)
    total = counts[-1]
    if total == 0:
        return math.nan
    rank = q * total
    b = next((i for i in range(len(bs) - 1) if counts[i] >= rank), len(bs) - 1)
    if b == len(bs) - 1:
        return bs[-2][0]
    if b == 0 and bs[0][0] <= 0:
        return bs[0][0]
    start = 0.0 if b == 0 else bs[b - 1][0]
    below = 0.0 if b == 0 else counts[b - 1]
    count = counts[b] - below
    if count == 0:  # rank 0 on an empty first bucket: Go's 0/0 gives NaN
        return math.nan
    return start + (bs[b][0] - start) * (rank - below) / count


def next_125(value: float) -> float:
    """The next value of the 1, 2, 5, 10, 20, 50 … series after `value` (itself on the series)."""
    exp = math.floor(math.log10(value) + 1e-9)
    mant = round(value / 10**exp)
    return float({1: 2, 2: 5}.get(mant, 10) * 10**exp)


def max_model_len_bound(largest_finite_le: float) -> tuple[int, int]:
    """[low, high) for max_model_len given the largest finite `le` L of a B125 histogram: L ≤ len < next(L)."""
    return int(largest_finite_le), int(next_125(largest_finite_le))
