"""An open loop's arrival rate across its window: level, or a profile of parts the simulation follows."""

from __future__ import annotations

import bisect
import itertools

from kvdoctor.whatif.window import Snap, in_flight

PART_S = 20.0  # the shortest part of a window whose arrivals a profile tells apart
MAX_PARTS = 12
MIN_PER_PART = 5.0  # fewer arrivals a part, and a Poisson count's noise hides any shape
# chi-square's 99.5th percentile for 1-11 degrees of freedom. Two tests, each failed by a Poisson process' counts
# once in 200 windows: the parts' (any shape) and the thirds' (a trend, which twelve parts spread too thin to see)
_CHI2_995 = (7.88, 10.60, 12.84, 14.86, 16.75, 18.55, 20.28, 21.95, 23.59, 25.19, 26.76)
TREND_PARTS = 3
# the busiest part's count above the quietest's by half the mean at least: a shape worth following
MATERIAL = 0.5


def arrival_counts(snaps: list[Snap], parts: int) -> list[float]:
    """Requests that arrived in each of `parts` equal parts of the window: between two scrapes, those finished plus
    the change in running + waiting, never below 0 (requests cancelled in flight leave uncounted as finished)."""
    return _split(_arrived(snaps), parts)


def _arrived(snaps: list[Snap]) -> tuple[list[float], list[float]]:
    """(scrape times, requests arrived since the first scrape at each)."""
    total, at = 0.0, [0.0]
    for a, b in itertools.pairwise(snaps):
        # a counter reset (a restart inside a given window) counts nothing finished
        done = max(0.0, b.get("vllm:request_success_total", 0.0) - a.get("vllm:request_success_total", 0.0))
        total += max(0.0, done + in_flight(b) - in_flight(a))
        at.append(total)
    return [s.t for s in snaps], at


def _split(arrived: tuple[list[float], list[float]], parts: int) -> list[float]:
    times, at = arrived
    t0, span = times[0], times[-1] - times[0]
    edges = [_at(times, at, t0 + span * k / parts) for k in range(parts + 1)]
    return [b - a for a, b in itertools.pairwise(edges)]


def arrival_profile(snaps: list[Snap]) -> tuple[float, ...]:
    """Each part's arrival rate over the window's mean where the arrivals were more uneven than a Poisson process'
    (p < 0.01) and materially so; () where the window's rate was level (the simulation draws it at one rate)."""
    if len(snaps) < 3:
        return ()
    parts = min(MAX_PARTS, int((snaps[-1].t - snaps[0].t) // PART_S))
    if parts < 2:
        return ()
    arrived = _arrived(snaps)  # once for the parts and the thirds
    counts = _split(arrived, parts)
    mean = sum(counts) / parts
    if mean < MIN_PER_PART or max(counts) - min(counts) < MATERIAL * mean:
        return ()
    thirds = _split(arrived, TREND_PARTS) if parts > TREND_PARTS else counts
    if not (_uneven(counts) or _uneven(thirds)):
        return ()
    return tuple(n / mean for n in counts)


def _uneven(counts: list[float]) -> bool:
    """Whether counts are more dispersed than a Poisson process' would be but once in 200 windows (chi-square)."""
    mean = sum(counts) / len(counts)
    return sum((n - mean) ** 2 for n in counts) / mean > _CHI2_995[len(counts) - 2]


def warp(u: float, profile: tuple[float, ...]) -> float:
    """Where in [0, 1) of a span the u-th share of its arrivals falls when the rate follows the profile (mean 1):
    the inverse of the profile's cumulative rate, so uniform u become the profile's arrival times."""
    if not profile:
        return u
    parts = len(profile)
    target = u * sum(profile)
    cum = 0.0
    for k, rate in enumerate(profile):
        if rate > 0 and cum + rate >= target:
            return (k + (target - cum) / rate) / parts
        cum += rate
    return 1.0 - 1e-12


def busiest_span(lo: float, hi: float, profile: tuple[float, ...]) -> tuple[float, float]:
    """The busiest part of [lo, hi] where arrivals followed the profile; all of it where they were level."""
    if not profile:
        return lo, hi
    k, parts = profile.index(max(profile)), len(profile)
    return lo + (hi - lo) * k / parts, hi if k + 1 == parts else lo + (hi - lo) * (k + 1) / parts


def describe(profile: tuple[float, ...], rate_per_s: float) -> str:
    """The profile in words: its parts' rates."""
    rates = ", ".join(f"{rate_per_s * x:.2g}" for x in profile)
    return (
        f"arrivals uneven across the window (req/s in {len(profile)} equal parts: {rates}), simulated as such"
    )


def _at(times: list[float], values: list[float], t: float) -> float:
    """values at t, linear between the scrapes around it."""
    i = bisect.bisect_left(times, t)
    if i <= 0:
        return values[0]
    if i >= len(times):
        return values[-1]
    t0, t1 = times[i - 1], times[i]
    return values[i - 1] + (values[i] - values[i - 1]) * ((t - t0) / (t1 - t0) if t1 > t0 else 1.0)
