"""The max_model_len bound from vLLM's 1-2-5 request-length buckets (quantiles: kvdoctor.promql.quantile)."""

from __future__ import annotations

import math


def next_125(value: float) -> float:
    """The next value of the 1, 2, 5, 10, 20, 50 … series after `value` (itself on the series)."""
    exp = math.floor(math.log10(value) + 1e-9)
    mant = round(value / 10**exp)
    return float({1: 2, 2: 5}.get(mant, 10) * 10**exp)


def max_model_len_bound(largest_finite_le: float) -> tuple[int, int]:
    """[low, high) for max_model_len given the largest finite `le` L of a B125 histogram: L ≤ len < next(L)."""
    return int(largest_finite_le), int(next_125(largest_finite_le))
