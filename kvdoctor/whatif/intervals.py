"""80 % intervals (p10–p90) on every predicted quantity, from the errors a window of metrics lets us measure.

Beside the point prediction run a few short simulations ("members"), each perturbed by every measurable source:
- the step model, its coefficients drawn from the fit's posterior (what the prior and the history's range leave open);
- the workload: its length histograms' counts resampled (a Dirichlet on the window's N finished requests, which
  also varies the fill inside vLLM's coarse length buckets), an open loop's rate by its Poisson count, and the
  simulation seed (arrivals and lengths drawn anew);
- the measurement itself: a member runs about as long as the window did, so it carries the sampling noise a window
  that long shows, which the long point run averages away.
Their log-spread around the point (RMS about the point, so a short run's bias counts) is combined with
- after a change, the unchanged prediction's miss on the window itself (the model's error where it can be checked);
- a widening where the prediction leaves what the history showed (a batch, a context per request or KV pressure it
  never saw), said in words.
A rate or a level gets point × exp(∓1.28·σ), a normal in log space. A latency quantile is read, as the server reads
it, through vLLM's histogram buckets (the resolution no model beats): its bounds are the point run's observations
multiplied by exp(∓1.28·σ) and read through the buckets, so a quantile near a bucket edge gets the jump the
server's histogram makes. A quantity that is 0 somewhere is spread linearly.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, fields
from typing import Any

from kvdoctor.whatif import histo
from kvdoctor.whatif.members import MEMBERS
from kvdoctor.whatif.model import SimResult, Workload
from kvdoctor.whatif.readout import hist_q
from kvdoctor.whatif.saturation import DURATION_DEPENDENT
from kvdoctor.whatif.stepfit import Row
from kvdoctor.whatif.window import Quantities, Snap

COVERAGE = 0.8
Z = 1.2816  # the standard normal's 90th percentile: ±Z σ holds 80 %
EXTRAP = 0.4  # log-σ added per e-fold a batch or a context goes beyond the largest seen
KV_UNSEEN = 0.4  # log-σ added when the prediction has KV pressure (preemptions) the history never had
KV_PRESSURE = 0.85  # the pack's kv_cache threshold
BEYOND = 1.2  # further than this × the largest seen (and one request more) is outside the seen range
QUANTILE_OF = {
    "ttft_p50_s": ("ttft", 0.5),
    "ttft_p95_s": ("ttft", 0.95),
    "itl_p50_s": ("itl", 0.5),
    "itl_p95_s": ("itl", 0.95),
    "queue_time_p95_s": ("queue", 0.95),
}
# rates and levels move less than latencies when a prediction extrapolates: a closed loop's throughput is held by
# its clients, a gauge by its cap
DAMPED = {"generation_tokens_per_s": 0.5, "requests_per_s": 0.5, "running": 0.5, "kv_usage_max": 0.5}
KEYS = tuple(f.name for f in fields(Quantities) if f.name != "bottleneck")
SOURCES = (
    "step-model coefficients drawn from the fit's posterior",
    "length histograms resampled (Dirichlet on the window's requests) and the open-loop rate by its count",
    "simulation seeds, each member as long as the window",
    "vLLM's bucket edges: each quantile's bounds are the simulated observations shifted by the spread and read "
    "through the server's buckets",
    "after a change: the unchanged prediction's miss on the window",
)


@dataclass(frozen=True)
class Seen:
    """The range the history showed: largest batch per engine, context per request, KV usage, any preemption."""

    batch_max: float
    context_max: float
    kv_max: float
    preempted: bool


@dataclass
class Band:
    """p10 and p90 of one side's quantities, what made it wider, and the buckets its quantiles are read through."""

    low: Quantities
    high: Quantities
    unseen: list[str] = field(default_factory=list)
    resolution: dict[str, tuple[float, float]] = field(default_factory=dict)

    def sides(self, prefix: str, overloaded: bool) -> dict[str, dict[str, Any]]:
        """`{prefix}_p10` and `{prefix}_p90` for `--json`; past saturation the growing quantities have none."""
        out: dict[str, dict[str, Any]] = {}
        for suffix, q in (("p10", self.low), ("p90", self.high)):
            d = q.to_dict()
            out[f"{prefix}_{suffix}"] = {
                k: None if overloaded and k in DURATION_DEPENDENT else d[k] for k in KEYS
            }
        return out

    def inside(self, key: str, value: float) -> bool | None:
        """Whether value lies in [p10, p90] of key (None when either is unknown)."""
        lo, hi = getattr(self.low, key), getattr(self.high, key)
        if not all(math.isfinite(v) for v in (lo, hi, value)):
            return None
        return lo * (1 - 1e-9) <= value <= hi * (1 + 1e-9)


def seen_range(history: list[Snap], rows: list[Row]) -> Seen:
    """What the history covered, from its scrapes and its step-fit rows."""
    batch = max((s.get("vllm:num_requests_running", 0.0) / max(1, s.engines) for s in history), default=0.0)
    kv = max((v for s in history if math.isfinite(v := s.get("kv"))), default=0.0)
    pre = "vllm:num_preemptions_total"
    preempted = any(b.get(pre, 0.0) > a.get(pre, 0.0) for a, b in itertools.pairwise(history))
    context = max((x[3] / x[1] for x, _, _ in rows if x[1] > 0), default=0.0)  # context tokens per decoder
    return Seen(batch, context, kv, preempted)


def unseen(seen: Seen, q: Quantities, w: Workload, replicas: int) -> list[tuple[str, float]]:
    """Each way a side leaves the seen range, in words, with the log-σ it adds."""
    out = []
    batch = q.running / max(1, replicas)
    if math.isfinite(batch) and batch > max(seen.batch_max * BEYOND, seen.batch_max + 1):
        why = f"batch {batch:.0f} never seen (largest {seen.batch_max:.0f})"
        out.append((why, EXTRAP * math.log(batch / max(seen.batch_max, 1.0))))
    context = w.prompt.mean + w.output.mean / 2
    if seen.context_max > 0 and context > BEYOND * seen.context_max:
        why = f"context {context:.0f} tokens a request never seen (largest {seen.context_max:.0f})"
        out.append((why, EXTRAP * math.log(context / seen.context_max)))
    pressure = q.kv_usage_max >= KV_PRESSURE or q.preemptions_per_s > 0
    if pressure and seen.kv_max < KV_PRESSURE and not seen.preempted:
        out.append(("KV pressure never seen", KV_UNSEEN))
    return out


# the window's own prediction should give back what the window measured: off by more than this factor and outside
# its interval, the simulation did not reproduce the window (a constraint it does not model, a window that is no level)
NOT_REPRODUCED = {
    "running": ("running", 1.5),
    "generation_tokens_per_s": ("tokens/s", 1.5),
    "ttft_p50_s": ("TTFT p50", 3.0),
}


def not_reproduced(unchanged: Quantities, measured: Quantities, band: Band | None) -> list[str]:
    """What the window measured that its own prediction misses by a wide factor and outside its interval, in words."""
    out = []
    for key, (label, factor) in NOT_REPRODUCED.items():
        u, m = getattr(unchanged, key), getattr(measured, key)
        if not (math.isfinite(u) and math.isfinite(m) and u >= 0 and m > 0):
            continue
        # nothing simulated where the window served is the widest miss
        if u > 0 and max(u / m, m / u) <= factor:
            continue
        if band is None or not band.inside(key, m):
            out.append(f"{label} {u:.3g} predicted against {m:.3g} measured")
    return out


def misses(unchanged: Quantities, measured: Quantities) -> dict[str, float]:
    """|ln(unchanged / measured)| per quantity: how far the model missed the window it learned from."""
    out = {}
    for k in KEYS:
        u, m = getattr(unchanged, k), getattr(measured, k)
        if math.isfinite(u) and math.isfinite(m) and u > 0 and m > 0:
            out[k] = abs(math.log(u / m))
    return out


class Reader:
    """One side's simulated observations, read through the server's buckets after multiplying them by a factor."""

    def __init__(self, res: SimResult, buckets: dict[str, tuple[float, ...]], sigma: float) -> None:
        self.res, self.buckets, self.sigma = res, buckets, sigma
        self.itl = histo.grouped(res.itl)  # grouped once: the ITL list holds one entry a step

    def read(self, key: str, factor: float) -> float:
        """The quantile `key` of the observations × factor, as vLLM's histogram would give it."""
        name, q = QUANTILE_OF[key]
        if name == "itl":
            return histo.quantile_grouped(q, self.itl, self.buckets["itl"], self.sigma, factor)
        values = self.res.ttft if name == "ttft" else self.res.queue
        return hist_q(q, [(v * factor, 1) for v in values], self.buckets[name]) if values else math.nan


def band(
    point: Quantities,
    reader: Reader,
    members: list[Quantities],
    flags: list[tuple[str, float]],
    miss: dict[str, float] | None = None,
) -> Band:
    """The 80 % interval of each quantity around the point, from the members' spread and the other sources."""
    low, high = Quantities(bottleneck=point.bottleneck), Quantities(bottleneck=point.bottleneck)
    wide = math.sqrt(sum(sd * sd for _, sd in flags))
    resolution: dict[str, tuple[float, float]] = {}
    for k in KEYS:
        p = getattr(point, k)
        if not math.isfinite(p):
            continue
        vals = [v for m in members if math.isfinite(v := getattr(m, k))]
        extra = DAMPED.get(k, 1.0) * wide
        off = (miss or {}).get(k, 0.0)
        if p > 0 and all(v > 0 for v in vals):
            spread = sum(math.log(v / p) ** 2 for v in vals) / len(vals) if vals else 0.0
            sd = math.sqrt(spread + extra**2 + off**2)
            if k in QUANTILE_OF:
                # the simulated observations shifted by ∓Zσ and read through the buckets: near an edge the read
                # quantile jumps as the server's histogram would make it jump
                lo, hi = reader.read(k, math.exp(-Z * sd)), reader.read(k, math.exp(Z * sd))
                resolution[k] = bucket_of(p, reader.buckets[QUANTILE_OF[k][0]])
            else:
                lo, hi = p * math.exp(-Z * sd), p * math.exp(Z * sd)
        else:  # a count or a queue that is 0 on some side: its spread in its own units
            spread = sum((v - p) ** 2 for v in vals) / len(vals) if vals else 0.0
            size = max([abs(p), *(abs(v) for v in vals)])
            sd = math.sqrt(spread + (size * extra) ** 2 + (size * off) ** 2)
            lo, hi = max(0.0, p - Z * sd), p + Z * sd
        if k == "kv_usage_max":
            hi = min(1.0, hi)
        setattr(low, k, min(lo, p) if math.isfinite(lo) else p)
        setattr(high, k, max(hi, p) if math.isfinite(hi) else p)
    return Band(low, high, [why for why, _ in flags], resolution)


def bucket_of(v: float, bounds: tuple[float, ...]) -> tuple[float, float]:
    """The histogram bucket (lower, upper edge] a value falls in; (last edge, inf) past the last."""
    lo = 0.0
    for b in bounds:
        if v <= b:
            return lo, b
        lo = b
    return lo, math.inf


def describe(secs: float, band_after: Band | None) -> dict[str, Any]:
    """The `interval` section of `--json`: what the intervals are and what widened them."""
    return {
        "coverage": COVERAGE,
        "members": MEMBERS,
        "member_s": round(secs, 1),
        "sources": list(SOURCES),
        "unseen": list(band_after.unseen) if band_after else [],
        "bucket_resolution": {
            k: [lo, hi if math.isfinite(hi) else None]
            for k, (lo, hi) in (band_after.resolution if band_after else {}).items()
        },
    }
