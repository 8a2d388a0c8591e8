"""Simulated observations read the way vLLM's histograms read them, with the step-to-step jitter the server shows.

The simulator's step times are deterministic; a real engine's are not (scheduler and Python overhead, the host's
other work). Read through coarse buckets, that difference moves a quantile by a whole bucket when a predicted step
lands near a bound. The jitter is a lognormal spread around each simulated duration whose width is fitted so that
the unchanged simulation's ITL bucket fractions match the window's; the changed prediction keeps that width.
"""

from __future__ import annotations

import math
from collections import defaultdict

from kvdoctor.promql.quantile import bucket_quantile

SIGMAS = tuple(i * 0.05 for i in range(17))  # 0 … 0.8


def grouped(obs: list[tuple[float, int]]) -> dict[float, float]:
    """Observations (value, weight) merged on a 1 % grid of values."""
    out: dict[float, float] = defaultdict(float)
    log = math.log
    for v, w in obs:
        out[round(log(v), 2) if v > 0 else -1e9] += w
    return out


def cumulative(groups: dict[float, float], bounds: tuple[float, ...], sigma: float) -> list[float]:
    """Cumulative counts at each bound (then +Inf), each group spread lognormally by sigma."""
    cum = []
    total = sum(groups.values())
    items = list(groups.items())
    width, erfc = sigma * math.sqrt(2), math.erfc
    for b in bounds:
        lb = math.log(b)
        if sigma <= 0:
            c = sum([w for lv, w in items if lv <= lb + 1e-12])
        else:
            c = sum([w * 0.5 * erfc((lv - lb) / width) for lv, w in items])
        cum.append(c)
    cum.append(total)
    return cum


def quantile(q: float, obs: list[tuple[float, int]], bounds: tuple[float, ...], sigma: float = 0.0) -> float:
    """histogram_quantile of the observations as vLLM's buckets would count them."""
    return quantile_grouped(q, grouped(obs), bounds, sigma) if obs else math.nan


def quantile_grouped(
    q: float, groups: dict[float, float], bounds: tuple[float, ...], sigma: float = 0.0, factor: float = 1.0
) -> float:
    """quantile() of observations already grouped, each multiplied by factor first."""
    if not groups:
        return math.nan
    if factor != 1.0:
        shift = math.log(factor)
        groups = {lv + shift: w for lv, w in groups.items()}
    cum = cumulative(groups, bounds, sigma)
    return bucket_quantile(q, [*zip(bounds, cum[:-1], strict=True), (math.inf, cum[-1])])


def fit_sigma(obs: list[tuple[float, int]], bounds: tuple[float, ...], measured: dict[float, float]) -> float:
    """The jitter width under which the simulated bucket fractions best match the measured ones."""
    total = measured.get(math.inf, 0.0)
    if not obs or total <= 0:
        return 0.0
    target = [measured.get(b, 0.0) / total for b in bounds]
    groups = grouped(obs)
    n = sum(groups.values())
    best, best_loss = 0.0, math.inf
    for s in SIGMAS:
        cum = cumulative(groups, bounds, s)
        loss = sum((c / n - t) ** 2 for c, t in zip(cum[:-1], target, strict=True))
        if loss < best_loss - 1e-12:
            best, best_loss = s, loss
    return best
