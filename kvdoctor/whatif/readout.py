"""A simulation read the way vLLM's metrics read: one replica's run, its quantiles through the server's buckets."""

from __future__ import annotations

import math
from dataclasses import replace

from kvdoctor.ceiling import COLD_START_ITL_S, COLD_START_RUNNING, compute_threshold_ratio
from kvdoctor.promql.quantile import bucket_quantile
from kvdoctor.whatif import histo
from kvdoctor.whatif.model import Engine, SimResult, StepModel, Workload
from kvdoctor.whatif.plateau import busiest
from kvdoctor.whatif.profile import busiest_span
from kvdoctor.whatif.sim import Simulator
from kvdoctor.whatif.window import Quantities, Snap, measure

WARMUP_S = 30.0
# the limits a rising load meets at its top, a queue its window's means dilute: where the busiest part of a profile
# window names one, it names the window's. Compute is judged on the window as a whole, as the pack judges it on a
# minute's ITL and batch: a part's burst of batch and ITL (busy) is not compute
PEAK_LIMITS = ("batch_cap", "kv_cache")
REPEAT_AFTER = 1.5  # a run this many times its profile's window long simulates the window again instead
REPEAT_SEED = 7919  # the repetitions' seeds apart from the engines' (seed + engine)


def simulate(
    engine: Engine,
    step: StepModel,
    workload: Workload,
    replicas: int,
    duration_s: float,
    seed: int = 0,
    warmup_s: float = WARMUP_S,
) -> SimResult:
    """One replica's simulation with its share of the load; where the engines carry uneven shares
    (`Workload.shares`), each engine's with its own, read as one replica's average."""
    if workload.split_unevenly(replicas):
        return _average(
            [
                _run(engine, step, workload.scaled(share), duration_s, seed + i, warmup_s)
                for i, share in enumerate(workload.shares)
            ]
        )
    share = workload.scaled(1.0 / replicas) if replicas > 1 else workload
    return _run(engine, step, share, duration_s, seed, warmup_s)


def _run(
    engine: Engine, step: StepModel, workload: Workload, duration_s: float, seed: int, warmup_s: float
) -> SimResult:
    sim = Simulator(engine, step, prefix_hit_ratio=workload.prefix_hit_ratio)
    span = workload.profile_span_s
    if not workload.profile or span <= 0 or duration_s < REPEAT_AFTER * span:
        return sim.run_workload(workload, duration_s, warmup_s, seed)
    # a profile keeps its window's time scale: stretched over a longer run, an overload at its peak would last as
    # many times longer and build as many times the queue; the run is the window again, with other draws, instead
    n = max(1, round(duration_s / span))
    return _pooled(
        [sim.run_workload(workload, duration_s / n, warmup_s, seed + REPEAT_SEED * i) for i in range(n)]
    )


# what engines' runs add up to: observations, counts, integrals over time, and the queue's ends (its growth)
_POOLED = (
    *("ttft", "queue", "itl", "kv_samples", "generation_tokens", "running_area", "waiting_area"),
    *("finished", "preemptions", "rejected", "steps", "waiting_start", "waiting_end"),
    *("queued_s", "queued_finished"),
)


def _pooled(runs: list[SimResult]) -> SimResult:
    """Repetitions of one engine's run as one run over their spans added up (observations and counts pooled)."""
    if len(runs) == 1:
        return runs[0]
    out = replace(_average(runs), engine_runs=[])
    if out.peak is not None:
        out.peak = replace(out.peak, engine_runs=[])
    return out


def _average(runs: list[SimResult]) -> SimResult:
    """Engines' runs as one replica's average: every observation and count pooled (vLLM's histograms and counters
    sum over engines) over their spans added up, so each rate is the engines' mean; KV usage and the batch are the
    highest engine's, as the pack reads them."""
    out = SimResult(
        span_s=sum(r.span_s for r in runs), running_max=max(r.running_max for r in runs), engine_runs=runs
    )
    for r in runs:
        for name in _POOLED:
            setattr(out, name, getattr(out, name) + getattr(r, name))
    peaks = [r.peak for r in runs if r.peak is not None]
    if len(peaks) == len(runs):
        out.peak = _average(peaks)
    return out


def quantities(
    res: SimResult, replicas: int, buckets: dict[str, tuple[float, ...]], sigma: float = 0.0
) -> Quantities:
    """A SimResult in vLLM's terms: quantiles through the server's own buckets, sums over replicas."""
    span = res.span_s
    itl = histo.grouped(res.itl)  # one entry a step: grouped once for both quantiles
    return Quantities(
        ttft_p50_s=hist_q(0.5, [(v, 1) for v in res.ttft], buckets["ttft"]),
        ttft_p95_s=hist_q(0.95, [(v, 1) for v in res.ttft], buckets["ttft"]),
        itl_p50_s=histo.quantile_grouped(0.5, itl, buckets["itl"], sigma),
        itl_p95_s=histo.quantile_grouped(0.95, itl, buckets["itl"], sigma),
        queue_time_p95_s=hist_q(0.95, [(v, 1) for v in res.queue], buckets["queue"]),
        generation_tokens_per_s=res.generation_tokens / span * replicas,
        requests_per_s=res.finished / span * replicas,
        running=res.running_area / span * replicas,
        waiting=res.waiting_area / span * replicas,
        kv_usage_max=max(res.kv_samples) if res.kv_samples else 0.0,
        preemptions_per_s=res.preemptions / span * replicas,
    )


def hist_q(q: float, obs: list[tuple[float, int]], bounds: tuple[float, ...]) -> float:
    """histogram_quantile of (value, weight) observations counted into the bounds (and +Inf)."""
    if not obs:
        return math.nan
    counts = [0.0] * (len(bounds) + 1)
    for v, w in obs:
        lo, hi = 0, len(bounds)
        while lo < hi:  # first bound ≥ v
            mid = (lo + hi) // 2
            if bounds[mid] < v:
                lo = mid + 1
            else:
                hi = mid
        counts[lo] += w
    cum, total = [], 0.0
    for c in counts:
        total += c
        cum.append(total)
    return bucket_quantile(q, [*zip(bounds, cum[:-1], strict=True), (math.inf, cum[-1])])


def classify(
    res: SimResult,
    q: Quantities,
    engine: Engine,
    light_itl_s: float | None,
    replicas: int,
    buckets: dict[str, tuple[float, ...]],
    sigma: float,
) -> str:
    """verdict() of a run read as q; where the engines ran uneven shares, the busiest engine's: the pack judges each
    engine, and the loaded one names the limit while another has room. Where the arrivals followed a profile and the
    run's busiest part (`SimResult.peak`) names a queue's limit (PEAK_LIMITS), that one: a load that rises into it
    meets it there, not on average."""
    if res.peak is not None:
        peak = res.peak  # recorded without a peak of its own
        at_peak = classify(
            peak, quantities(peak, replicas, buckets, sigma), engine, light_itl_s, replicas, buckets, sigma
        )
        if at_peak in PEAK_LIMITS:
            return at_peak
    if not res.engine_runs:
        return verdict(q, engine, light_itl_s, replicas)
    busiest = max(res.engine_runs, key=lambda r: r.running_area + r.waiting_area)
    return verdict(quantities(busiest, 1, buckets, sigma), engine, light_itl_s)


def measured_class(
    window: list[Snap],
    q: Quantities,
    engine: Engine,
    light_itl_s: float | None,
    replicas: int,
    profile: tuple[float, ...] = (),
) -> str:
    """verdict() of what the window measured (q); where the engines carried the requests unevenly, the busiest
    engine's, read from its own running and waiting (one at its cap with a queue while another has seats). Where
    its arrivals followed a profile and its busiest part names a queue's limit, that one, as `classify` judges a run."""
    if profile:
        lo, hi = busiest_span(window[0].t, window[-1].t, profile)
        part = [s for s in window if lo <= s.t <= hi]
        at_peak = (
            measured_class(part, measure(part), engine, light_itl_s, replicas) if len(part) >= 2 else None
        )
        if at_peak in PEAK_LIMITS:
            return at_peak
    one = busiest(window)
    if one is None:
        return verdict(q, engine, light_itl_s, replicas)
    return verdict(replace(q, running=one[0], waiting=one[1]), engine, light_itl_s)


def verdict(q: Quantities, engine: Engine, light_itl_s: float | None, replicas: int = 1) -> str:
    """The class the rule pack would give these quantities (its thresholds, on window means), against the light-load
    ITL baseline (None: not learned yet, the pack's cold-start test)."""
    if not q.requests_per_s or q.requests_per_s <= 0:
        return "idle"
    kv, waiting, pre = q.kv_usage_max, q.waiting, q.preemptions_per_s
    if kv >= 0.85 and (waiting >= 1 or pre > 0):
        return "kv_cache"
    if q.running >= 0.9 * engine.max_num_seqs * replicas and waiting >= 1 and kv < 0.8 and pre <= 0:
        return "batch_cap"
    batch = q.running / max(replicas, 1)
    if light_itl_s is None:
        slow = COLD_START_ITL_S if batch >= COLD_START_RUNNING else math.inf
    else:
        slow = compute_threshold_ratio(batch) * light_itl_s  # the pack's compute test
    if q.itl_p50_s > slow and kv < 0.85 and pre <= 0:
        return "compute"
    return "healthy"


REFUSED_NOTE = 0.01  # share of simulated requests refused from which a prediction says so


def refused(res: SimResult, engine: Engine, side: str) -> str | None:
    """What share of a run's requests vLLM would have refused (too long for max_model_len or the whole cache), in
    words; None below REFUSED_NOTE."""
    asked = res.rejected + res.finished
    if not asked or res.rejected / asked < REFUSED_NOTE:
        return None
    return (
        f"{res.rejected / asked:.0%} of the requests simulated {side} are refused, as vLLM refuses them: prompt + "
        f"output tokens over max_model_len {engine.max_model_len} or more than the whole KV cache"
    )
