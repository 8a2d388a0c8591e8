"""Compute is named when tokens are slower than the batch explains: tokens/s near this server's own ceiling.

The numbers are issue 22's: a busy-but-healthy server (5 running, ITL 2.3× its light-load value), the shared
compute-bound recording (31 running, 13×), vLLM 0.10.2's compute-bound one (64 running, 5.5×) and the judge's
co-binding window (31 of a cap of 32, 6×).
"""

from __future__ import annotations

import pytest

from kvdoctor.signals import CEILING_SHARE, ceiling_share, compute_threshold_ratio


@pytest.mark.parametrize(
    ("running", "ratio", "share", "compute"),
    [(5, 2.3, 0.71, False), (31, 13.0, 0.95, True), (64, 5.5, 0.83, True), (31, 6.0, 0.86, True)],
    ids=["busy-healthy", "shared-compute", "0.10.2-compute", "co-binding"],
)
def test_share_of_the_ceiling_decides_compute(running, ratio, share, compute):
    got = ceiling_share(running, ratio * 0.01, 0.01)
    assert got == pytest.approx(share, abs=0.005)
    assert (ratio > compute_threshold_ratio(running)) is compute
    assert (got >= CEILING_SHARE) is compute


def test_the_threshold_grows_with_the_batch_towards_five_and_keeps_the_old_floor():
    assert compute_threshold_ratio(5) == pytest.approx(2.78, abs=0.01)
    assert compute_threshold_ratio(31) == pytest.approx(4.43, abs=0.01)
    assert 4.9 < compute_threshold_ratio(1000) < 5.0
    # a small batch: never below 2.5× the light load
    assert compute_threshold_ratio(1) == 2.5
    assert compute_threshold_ratio(4) == pytest.approx(2.5)
    ratios = [compute_threshold_ratio(b) for b in range(1, 200)]
    assert ratios == sorted(ratios)


def test_no_share_below_a_real_batch_or_without_a_baseline():
    assert ceiling_share(1.0, 0.05, 0.01) is None
    assert ceiling_share(8.0, 0.05, 0.0) is None
    assert ceiling_share(8.0, 0.005, 0.01) == 0.0  # faster than light load: nothing of the ceiling used
    assert ceiling_share(8.0, 0.5, 0.01) == 1.0  # slower than the batch could ever explain
