"""One place that turns a window of metrics and a set of changes into measured / unchanged / predicted quantities."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kvdoctor.capacity.arch import ModelSpec
from kvdoctor.capacity.presets import GpuSpec
from kvdoctor.promql.quantile import bucket_quantile
from kvdoctor.signals import compute_threshold_ratio
from kvdoctor.whatif import histo, knobs
from kvdoctor.whatif.model import (
    ITL_BUCKETS,
    QUEUE_BUCKETS,
    TTFT_BUCKETS,
    Engine,
    SimResult,
    StepModel,
    Workload,
)
from kvdoctor.whatif.prior import physical_prior
from kvdoctor.whatif.saturation import Overload, as_dict, detect
from kvdoctor.whatif.sim import Simulator
from kvdoctor.whatif.stepfit import fit_step_model
from kvdoctor.whatif.window import Quantities, Snap, delta_buckets, hist_name, measure
from kvdoctor.whatif.workload import WindowError, bound_duration, infer_engine, infer_workload

MIN_SIM_S, MAX_SIM_S, WARMUP_S = 120.0, 600.0, 30.0
MIN_REQUESTS = 600


@dataclass
class Prediction:
    """What the window measured, what the model predicts for it unchanged, and after the changes."""

    measured: Quantities
    unchanged: Quantities
    predicted: Quantities
    workload: Workload
    step: StepModel
    engine: Engine
    engine_after: Engine
    changes: dict[str, float | str] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)
    overload_now: Overload | None = None  # set when that side's open-loop arrivals outpace its capacity
    overload_after: Overload | None = None

    def to_dict(self) -> dict[str, Any]:
        """The `--json` shape."""
        w, s = self.workload, self.step
        return {
            "measured": self.measured.to_dict(),
            "predicted_unchanged": {**self.unchanged.to_dict(), **as_dict(self.overload_now)},
            "predicted": {**self.predicted.to_dict(), **as_dict(self.overload_after)},
            "workload": {
                "kind": w.kind,
                "requests_per_s": _r(w.rate_per_s),
                "population": w.population,
                "think_s": w.think_s,
                "prompt_tokens_mean": _r(w.prompt.mean),
                "output_tokens_mean": _r(w.output.mean),
                "prefix_hit_ratio": _r(w.prefix_hit_ratio),
                "why": w.why,
            },
            "step_model": {
                "c0_s": _r(s.c0),
                "c_decode_s": _r(s.c_decode),
                "c_prefill_s": _r(s.c_prefill),
                "c_kv_s": _r(s.c_kv),
                "c_attn_s": _r(s.c_attn),
                "source": s.source,
                "residual_ratio": _r(s.residual_ratio),
                "operating_points": s.points,
                "notes": list(s.notes),
            },
            "assumptions": [
                *self.assumptions,
                f"engine now: {_engine(self.engine)}; after: {_engine(self.engine_after)}",
            ],
        }


def _r(v: float) -> float | None:
    return float(f"{v:.4g}") if math.isfinite(v) else None


def _engine(e: Engine) -> str:
    return (
        f"max_num_seqs {e.max_num_seqs}, max_num_batched_tokens {e.max_num_batched_tokens}, "
        f"{e.num_gpu_blocks} blocks of {e.block_size} tokens, max_model_len {e.max_model_len}"
    )


@dataclass
class Basis:
    """What a window teaches once: workload, engine, step model, buckets, jitter; many simulations reuse it."""

    workload: Workload
    engine: Engine
    step: StepModel
    replicas: int
    info: dict[str, str]
    measured: Quantities
    duration_s: float
    buckets: dict[str, tuple[float, ...]]
    sigma: float
    now: SimResult
    notes: list[str]
    seed: int = 0


def learn(
    history: list[Snap],
    window: list[Snap],
    *,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    seed: int = 0,
    model: ModelSpec | None = None,
    gpu: GpuSpec | None = None,
) -> Basis:
    """Learn workload and engine from the window, step times from the history, and simulate it unchanged."""
    if len(window) < 5:
        raise WindowError(f"{len(window)} scrapes in the window; the what-if needs at least 5")
    workload = infer_workload(window)
    engine, notes = infer_engine(window, max_num_seqs, max_num_batched_tokens)
    physical = None
    if model is not None and gpu is not None:
        physical = physical_prior(model, gpu, _kv_bytes_per_token(window[-1].info))
        if physical is None:
            notes.append(
                f"no roofline prior: the {gpu.name} preset has no bandwidth/FLOP/s or the model no size"
            )
    try:
        step = fit_step_model(history, engine.max_num_batched_tokens, physical)
    except ValueError as exc:
        raise WindowError(str(exc)) from None
    replicas = max(1, window[-1].engines)
    measured = measure(window)
    span = window[-1].t - window[0].t
    # long enough for the tail quantiles to settle: a few hundred finished requests
    duration = min(MAX_SIM_S, max(MIN_SIM_S, 2 * span, MIN_REQUESTS / max(measured.requests_per_s, 1e-3)))
    duration, bound_note = bound_duration([(workload, replicas)], duration, WARMUP_S)
    if bound_note:
        notes.append(bound_note)
    buckets = _bounds(window[-1])
    res_now = simulate(engine, step, workload, replicas, duration, seed)
    a, b = window[0], window[-1]
    sigma = histo.fit_sigma(res_now.itl, buckets["itl"], delta_buckets(a, b, hist_name(b, "itl")))
    info = window[-1].info
    return Basis(
        workload, engine, step, replicas, info, measured, duration, buckets, sigma, res_now, notes, seed
    )


def predict(
    history: list[Snap],
    window: list[Snap],
    changes: dict[str, float | str],
    *,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    gpu_memory_bytes: float | None = None,
    measured_bottleneck: str | None = None,
    seed: int = 0,
    model: ModelSpec | None = None,
    gpu: GpuSpec | None = None,
) -> Prediction:
    """Learn workload and engine from the window, step times from the history; simulate before and after."""
    basis = learn(
        history,
        window,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        seed=seed,
        model=model,
        gpu=gpu,
    )
    workload, engine, step, replicas = basis.workload, basis.engine, basis.step, basis.replicas
    duration, buckets, sigma, measured = basis.duration_s, basis.buckets, basis.sigma, basis.measured
    after, w_after, r_after, change_notes = knobs.apply(
        engine, workload, replicas, changes, basis.info, gpu_memory_bytes
    )
    # a change that adds load may pass the arrivals' cap where the window did not: both sides then run shorter
    duration, bound_note = bound_duration([(workload, replicas), (w_after, r_after)], duration, WARMUP_S)
    now = (
        basis.now
        if duration == basis.duration_s
        else simulate(engine, step, workload, replicas, duration, seed)
    )
    res_after = simulate(after, step, w_after, r_after, duration, seed)
    unchanged = quantities(now, replicas, buckets, sigma)
    predicted = quantities(res_after, r_after, buckets, sigma)
    light = step.duration(1, 0, 0.0)
    measured.bottleneck = measured_bottleneck or verdict(measured, engine, light, replicas)
    unchanged.bottleneck = verdict(unchanged, engine, light, replicas)
    predicted.bottleneck = verdict(predicted, after, light, r_after)
    assumptions = [workload.why, *basis.notes, *change_notes, *step.notes]
    if replicas > 1 or r_after != replicas:
        assumptions.append(
            f"{replicas} engine(s) now, {r_after} after; each simulated with its share of the load"
        )
    assumptions.append(f"simulated {duration:.0f} s after a {WARMUP_S:.0f} s warm-up, seed {seed}")
    if bound_note and bound_note not in assumptions:
        assumptions.append(bound_note)
    assumptions.append(f"step-to-step jitter ±{sigma:.0%} (lognormal), fitted to the window's ITL histogram")
    over = detect(now, workload, replicas), detect(res_after, w_after, r_after)  # capacity past saturation
    return Prediction(
        measured, unchanged, predicted, workload, step, engine, after, changes, assumptions, *over
    )


def _kv_bytes_per_token(info: dict[str, str]) -> float:
    try:
        return float(info["kv_cache_memory_bytes"]) / float(info["kv_cache_size_tokens"])
    except (KeyError, ValueError, ZeroDivisionError):
        return 0.0


def _bounds(snap: Snap) -> dict[str, tuple[float, ...]]:
    def finite(name: str, default: tuple[float, ...]) -> tuple[float, ...]:
        b = sorted(le for le in snap.buckets.get(name, {}) if math.isfinite(le))
        return tuple(b) or default

    return {
        "ttft": finite("vllm:time_to_first_token_seconds", TTFT_BUCKETS),
        "itl": finite(hist_name(snap, "itl"), ITL_BUCKETS),
        "queue": finite("vllm:request_queue_time_seconds", QUEUE_BUCKETS),
    }


def simulate(
    engine: Engine,
    step: StepModel,
    workload: Workload,
    replicas: int,
    duration_s: float,
    seed: int = 0,
) -> SimResult:
    """One replica's simulation with its share of the load."""
    share = workload.scaled(1.0 / replicas) if replicas > 1 else workload
    sim = Simulator(engine, step, prefix_hit_ratio=workload.prefix_hit_ratio)
    return sim.run_workload(share, duration_s, WARMUP_S, seed)


def quantities(
    res: SimResult, replicas: int, buckets: dict[str, tuple[float, ...]], sigma: float = 0.0
) -> Quantities:
    """A SimResult in vLLM's terms: quantiles through the server's own buckets, sums over replicas."""
    span = res.span_s
    return Quantities(
        ttft_p50_s=_hist_q(0.5, [(v, 1) for v in res.ttft], buckets["ttft"]),
        ttft_p95_s=_hist_q(0.95, [(v, 1) for v in res.ttft], buckets["ttft"]),
        itl_p50_s=histo.quantile(0.5, res.itl, buckets["itl"], sigma),
        itl_p95_s=histo.quantile(0.95, res.itl, buckets["itl"], sigma),
        queue_time_p95_s=_hist_q(0.95, [(v, 1) for v in res.queue], buckets["queue"]),
        generation_tokens_per_s=res.generation_tokens / span * replicas,
        requests_per_s=res.finished / span * replicas,
        running=res.running_area / span * replicas,
        waiting=res.waiting_area / span * replicas,
        kv_usage_max=max(res.kv_samples) if res.kv_samples else 0.0,
        preemptions_per_s=res.preemptions / span * replicas,
    )


def _hist_q(q: float, obs: list[tuple[float, int]], bounds: tuple[float, ...]) -> float:
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


def verdict(q: Quantities, engine: Engine, light_itl_s: float, replicas: int = 1) -> str:
    """The class the rule pack would give these quantities (its thresholds, on window means)."""
    if not q.requests_per_s or q.requests_per_s <= 0:
        return "idle"
    kv, waiting, pre = q.kv_usage_max, q.waiting, q.preemptions_per_s
    if kv >= 0.85 and (waiting >= 1 or pre > 0):
        return "kv_cache"
    if q.running >= 0.9 * engine.max_num_seqs * replicas and waiting >= 1 and kv < 0.8 and pre <= 0:
        return "batch_cap"
    slow = compute_threshold_ratio(q.running / max(replicas, 1)) * light_itl_s  # the pack's compute test
    if q.itl_p50_s > slow and kv < 0.85 and pre <= 0:
        return "compute"
    return "healthy"
