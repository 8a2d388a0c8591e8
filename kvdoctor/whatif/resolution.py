"""What vLLM's histogram buckets let a latency quantile say: the bucket it falls in, and the error no model beats.

A quantile read from classic buckets (`histogram_quantile`) is interpolated inside one bucket, as if the
observations there were spread evenly. Any spread is possible, so the true quantile is anywhere in that bucket: the
best single guess (its middle) can be off by half the bucket, (upper − lower) / (upper + lower) of it. A prediction
whose error is below that is as close as the measurement can tell.
"""

from __future__ import annotations

import math

from kvdoctor.whatif.window import Snap, delta_buckets, hist_name

LATENCIES = {  # the quantities read from a histogram: (family alias, quantile)
    "ttft_p50_s": ("vllm:time_to_first_token_seconds", 0.5),
    "ttft_p95_s": ("vllm:time_to_first_token_seconds", 0.95),
    "itl_p50_s": ("itl", 0.5),
    "itl_p95_s": ("itl", 0.95),
    "queue_time_p95_s": ("vllm:request_queue_time_seconds", 0.95),
}


def bucket_span(buckets: dict[float, float], q: float) -> tuple[float, float] | None:
    """The (lower, upper) bounds of the bucket the q-quantile falls in; None without observations or in +Inf."""
    items = sorted(buckets.items())
    if not items or items[-1][1] <= 0:
        return None
    rank, lower = q * items[-1][1], 0.0
    for upper, cumulative in items:
        if cumulative >= rank and cumulative > 0:
            return (lower, upper) if math.isfinite(upper) else None
        lower = upper
    return None


def resolution(buckets: dict[float, float], q: float) -> float:
    """Half the width of the q-quantile's bucket over its middle: the relative error a reading cannot beat."""
    span = bucket_span(buckets, q)
    if span is None or sum(span) <= 0:
        return math.nan
    lower, upper = span
    return (upper - lower) / (upper + lower)


def window_resolution(snaps: list[Snap]) -> dict[str, float]:
    """The resolution of each latency quantile a window of scrapes measured (first to last)."""
    a, b = snaps[0], snaps[-1]
    return {
        key: resolution(delta_buckets(a, b, hist_name(b, family)), q)
        for key, (family, q) in LATENCIES.items()
    }
