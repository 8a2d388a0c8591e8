"""The short simulations beside a point prediction ("members"), each perturbed by a source of error we can measure.

A member draws the step model's coefficients from the fit's posterior (their covariance included), redraws
the workload's lengths and open-loop rate as another window of as many requests could have shown them, runs on its
own seed, and lasts about as long as the window did, so it carries a window's sampling noise. Both sides of a
prediction use the same perturbation, once before and once after the change. `intervals.band` turns them into p10/p90.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import TYPE_CHECKING

from kvdoctor.whatif import knobs
from kvdoctor.whatif.model import LengthDist, StepModel, Workload
from kvdoctor.whatif.readout import WARMUP_S, quantities, simulate
from kvdoctor.whatif.stepfit import Row, posterior_draws
from kvdoctor.whatif.window import Quantities

if TYPE_CHECKING:
    from kvdoctor.whatif.learn import Basis

MEMBERS = 4  # short simulations per side: a handful, so `whatif` stays interactive
MIN_MEMBER_S, MAX_MEMBER_S = 30.0, 90.0  # a member runs the window's length within these
MEMBER_WARMUP_S = WARMUP_S / 2
MEMBER_REQUESTS = 6000  # open-loop arrivals one member generates at most: the members cost a bounded share
MIN_BUDGET_S = 10.0  # … however high the rate, a member measures this long


def resample_length(d: LengthDist, rng: random.Random, n: float) -> LengthDist:
    """The length distribution a second window of n requests like this one could have shown."""
    prev, masses = 0.0, []
    for _, _, cum in d.bounds:
        p = max(0.0, cum - prev)
        masses.append(rng.gammavariate(n * p, 1.0) if p > 0 else 0.0)
        prev = cum
    total = sum(masses)
    if total <= 0:
        return d
    bounds, cum, mean = [], 0.0, 0.0
    for (lo, hi, _), m in zip(d.bounds, masses, strict=True):
        cum += m / total
        mean += m / total * (lo + hi) / 2
        bounds.append((lo, hi, min(1.0, cum)))
    # the window's mean is exact (_sum/_count): keep its ratio to the midpoint mean of the original fill
    base = sum(max(0.0, c - p) * (lo + hi) / 2 for (lo, hi, c), p in zip(d.bounds, _prevs(d), strict=True))
    return LengthDist(tuple(bounds), mean * (d.mean / base) if base > 0 else mean)


def _prevs(d: LengthDist) -> list[float]:
    return [0.0, *(c for _, _, c in d.bounds[:-1])]


def perturb(w: Workload, rng: random.Random, n: float) -> Workload:
    """The workload with its lengths and, for an open loop, its rate redrawn as another n requests would show."""
    rate = w.rate_per_s
    if w.kind == "open" and rate > 0:
        rate = rng.gammavariate(n, rate / n)
    computed = resample_length(w.computed, rng, n) if w.computed is not None else None
    return replace(
        w,
        rate_per_s=rate,
        prompt=resample_length(w.prompt, rng, n),
        output=resample_length(w.output, rng, n),
        computed=computed,
    )


def step_draws(
    rows: list[Row], physical: StepModel | None, k: int, seed: int, point: StepModel, itl_scale: float = 1.0
) -> list[StepModel]:
    """k step models drawn from the fit's posterior, each calibrated as the point was (`calibration`), so the
    members spread about the point (the point k times where the fit fails)."""
    rng = random.Random(f"kvdoctor-steps-{seed}")
    try:
        draws = posterior_draws(rows, physical, k, rng)
    except (ValueError, ZeroDivisionError):
        return [point] * k
    return [d.decode_scaled(itl_scale) for d in draws] if itl_scale != 1.0 else draws


def member_seconds(span_s: float, duration_s: float, rate_per_s: float = 0.0) -> float:
    """How long one member simulates: the window's length, within bounds, never past the point run, and short
    enough that an open loop of rate_per_s (per engine) stays within MEMBER_REQUESTS arrivals."""
    secs = min(duration_s, max(MIN_MEMBER_S, min(span_s, MAX_MEMBER_S)))
    if rate_per_s > 0:
        secs = min(secs, max(MIN_BUDGET_S, MEMBER_REQUESTS / rate_per_s - MEMBER_WARMUP_S))
    return secs


def run_members(
    basis: Basis, changes: dict[str, float | str], gpu_memory_bytes: float | None, duration_s: float
) -> tuple[list[Quantities], list[Quantities], float]:
    """The members of both sides, paired (one perturbation each, before and after the change)."""
    n = max(5.0, basis.measured.requests_per_s * basis.span_s)
    if basis.member_steps is None:  # the same draws for every change of this window
        basis.member_steps = step_draws(
            basis.rows, basis.physical, MEMBERS, basis.seed, basis.step, basis.itl_scale
        )
    steps = basis.member_steps
    _, w_after, r_after, _ = knobs.apply(
        basis.engine, basis.workload, basis.replicas, changes, basis.info, gpu_memory_bytes
    )
    sides = ((basis.workload, basis.replicas), (w_after, r_after))
    rates = [w.rate_per_s / max(1, r) for w, r in sides if w.kind == "open"]
    secs = member_seconds(basis.span_s, duration_s, max(rates, default=0.0))
    known = basis.members_now.get(secs)  # the unchanged side's members, simulated once per length
    now, after = [], []
    for i, step in enumerate(steps):
        w = perturb(basis.workload, random.Random(f"kvdoctor-interval-{basis.seed}-{i}"), n)
        seed = basis.seed + 1 + i
        if known is None:
            res = simulate(basis.engine, step, w, basis.replicas, secs, seed, MEMBER_WARMUP_S)
            now.append(quantities(res, basis.replicas, basis.buckets, basis.sigma))
        e_a, w_a, r_a, _ = knobs.apply(basis.engine, w, basis.replicas, changes, basis.info, gpu_memory_bytes)
        res = simulate(e_a, step, w_a, r_a, secs, seed, MEMBER_WARMUP_S)
        after.append(quantities(res, r_a, basis.buckets, basis.sigma))
    if known is None:
        basis.members_now[secs] = known = now
    return [replace(q) for q in known], after, secs
