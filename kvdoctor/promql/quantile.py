"""Quantiles: `histogram_quantile` on classic buckets and the φ-quantile of a set of values (Prometheus 2.42)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from operator import itemgetter


def quantile(q: float, values: Sequence[float]) -> float:
    """The q-quantile of values with linear interpolation between closest ranks."""
    if not values or math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    vs = sorted(values, key=_nan_first)
    n = len(vs)
    rank = q * (n - 1)
    lower = max(0, math.floor(rank))
    upper = min(n - 1, lower + 1)
    weight = rank - math.floor(rank)
    return vs[lower] * (1 - weight) + vs[upper] * weight


def _nan_first(v: float) -> tuple[int, float]:
    # Go's sort of a vectorByValueHeap puts NaN first (Less: a < b || isNaN(a)).
    return (0, 0.0) if math.isnan(v) else (1, v)


_UPPER = itemgetter(0)


def bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """histogram_quantile over (upper bound, cumulative count) pairs of one histogram."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    buckets = sorted(buckets, key=_UPPER)
    if not buckets or not math.isinf(buckets[-1][0]):
        return math.nan
    merged: list[list[float]] = []
    for upper, count in buckets:
        if merged and merged[-1][0] == upper:
            merged[-1][1] += count
        else:
            merged.append([upper, count])
    _ensure_monotonic(merged)
    if len(merged) < 2:
        return math.nan
    observations = merged[-1][1]
    if observations == 0:
        return math.nan
    rank = q * observations
    b = len(merged) - 1
    for i in range(len(merged) - 1):
        if merged[i][1] >= rank:
            b = i
            break
    if b == len(merged) - 1:
        return merged[-2][0]
    if b == 0 and merged[0][0] <= 0:
        return merged[0][0]
    start, count = 0.0, merged[b][1]
    if b > 0:
        start = merged[b - 1][0]
        count -= merged[b - 1][1]
        rank -= merged[b - 1][1]
    if count == 0:
        return math.nan if rank == 0 else math.copysign(math.inf, rank)  # Go float division by zero
    return start + (merged[b][0] - start) * (rank / count)


def _ensure_monotonic(buckets: list[list[float]]) -> None:
    top = -math.inf
    for b in buckets:
        if b[1] > top:
            top = b[1]
        elif b[1] < top:
            b[1] = top
