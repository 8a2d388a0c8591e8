"""bucket_quantile as Prometheus computes it, and the max_model_len bound from 1-2-5 buckets."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvdoctor.capacity.histogram import max_model_len_bound, next_125
from kvdoctor.promql.quantile import bucket_quantile

INF = math.inf
BUCKETS = [(100.0, 10.0), (200.0, 30.0), (500.0, 90.0), (INF, 100.0)]


def test_interpolates_inside_the_bucket_holding_the_rank():
    assert bucket_quantile(0.5, BUCKETS) == pytest.approx(200 + 300 * (50 - 30) / 60)
    assert bucket_quantile(0.05, BUCKETS) == pytest.approx(50.0)  # first bucket starts at 0
    assert bucket_quantile(0.3, BUCKETS) == pytest.approx(200.0)


def test_rank_in_the_inf_bucket_returns_the_highest_finite_bound():
    assert bucket_quantile(0.99, BUCKETS) == 500.0


def test_undefined_cases():
    assert math.isnan(bucket_quantile(0.5, [(100.0, 0.0), (INF, 0.0)]))
    assert math.isnan(bucket_quantile(0.5, [(100.0, 3.0), (200.0, 5.0)]))  # no +Inf bucket
    assert math.isnan(bucket_quantile(0.5, [(INF, 5.0)]))
    assert math.isnan(bucket_quantile(0.0, [(10.0, 0.0), (INF, 1.0)]))  # 0/0 in Prometheus too
    assert bucket_quantile(-0.1, BUCKETS) == -INF
    assert bucket_quantile(1.1, BUCKETS) == INF


def test_equal_bounds_merge_and_counts_are_made_monotonic():
    split = [(100.0, 5.0), (100.0, 5.0), (200.0, 30.0), (500.0, 90.0), (INF, 100.0)]
    assert bucket_quantile(0.5, split) == bucket_quantile(0.5, BUCKETS)
    dip = [(100.0, 10.0), (200.0, 8.0), (INF, 10.0)]
    assert bucket_quantile(0.9, dip) == pytest.approx(90.0)


@given(
    st.lists(st.integers(0, 1000), min_size=2, max_size=12),
    st.floats(0.001, 1),
    st.floats(0.001, 1),
)
def test_quantile_is_monotonic_in_q_and_within_bounds(increments, q1, q2):
    bounds = [10.0 * 2**i for i in range(len(increments) - 1)] + [INF]
    counts, total = [], 0
    for inc in increments:
        total += inc
        counts.append(float(total))
    buckets = list(zip(bounds, counts, strict=True))
    lo, hi = sorted((q1, q2))
    a, b = bucket_quantile(lo, buckets), bucket_quantile(hi, buckets)
    if total == 0:
        assert math.isnan(a)
        return
    assert a <= b
    assert 0 <= b <= bounds[-2]


@pytest.mark.parametrize(
    ("largest", "bound"),
    [(5000.0, (5000, 10000)), (20000.0, (20000, 50000)), (1000.0, (1000, 2000)), (2.0, (2, 5))],
)
def test_max_model_len_bound(largest, bound):
    assert max_model_len_bound(largest) == bound


def test_next_125_series():
    seq = [1.0]
    for _ in range(7):
        seq.append(next_125(seq[-1]))
    assert seq == [1, 2, 5, 10, 20, 50, 100, 200]
