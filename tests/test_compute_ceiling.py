"""Compute is named when tokens are slower than the batch explains: tokens/s near this server's own ceiling.

The numbers are issue 22's: a busy-but-healthy server (5 running, ITL 2.3× its light-load value), the shared
compute-bound recording (31 running, 13×), vLLM 0.10.2's compute-bound one (64 running, 5.5×) and the judge's
co-binding window (31 of a cap of 32, 6×).
"""

from __future__ import annotations

import pytest

from kvdoctor.ceiling import CEILING_SHARE, ceiling_share, compute_threshold_ratio


@pytest.mark.parametrize(
    ("running", "ratio", "share", "compute"),
    [(5, 2.3, 0.71, False), (31, 13.0, 0.95, True), (64, 5.5, 0.83, True), (31, 6.0, 0.86, True)],
    ids=["busy-healthy", "shared-compute", "0.10.2-compute", "co-binding"],
)
def test_share_of_the_ceiling_decides_compute(running, ratio, share, compute):
    got = ceiling_share(running, ratio * 0.01, 0.01)
    assert got == pytest.approx(share, abs=0.005)
    assert (ratio > compute_threshold_ratio(running)) is compute


def test_the_threshold_is_the_ceiling_share_between_the_old_floors():
    # from ~6 to ~80 running: tokens/s at CEILING_SHARE of the ceiling, stricter than 2.5x grown 0.4 % per request
    assert compute_threshold_ratio(31) == pytest.approx(31 / (0.3 * 31 + 0.7))
    assert compute_threshold_ratio(31) > 2.5 * (1 + 0.004 * 31)
    assert ceiling_share(31, compute_threshold_ratio(31) * 0.01, 0.01) == pytest.approx(CEILING_SHARE)
    # a small batch (noise) and a very large one: never below the old rule
    for b in (1, 4, 100, 256):
        assert compute_threshold_ratio(b) == pytest.approx(2.5 * (1 + 0.004 * b))
    ratios = [compute_threshold_ratio(b) for b in range(1, 300)]
    assert ratios == sorted(ratios)


def test_no_share_below_a_real_batch_or_without_a_baseline():
    assert ceiling_share(1.0, 0.05, 0.01) is None
    assert ceiling_share(8.0, 0.05, 0.0) is None
    assert ceiling_share(8.0, 0.005, 0.01) == 0.0  # faster than light load: nothing of the ceiling used
    assert ceiling_share(8.0, 0.5, 0.01) == 1.0  # slower than the batch could ever explain
