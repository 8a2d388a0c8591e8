"""One place that turns a window of metrics and a set of changes into measured / unchanged / predicted quantities."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kvdoctor.capacity.arch import ModelSpec
from kvdoctor.capacity.presets import GpuSpec
from kvdoctor.jsondoc import JsonObject
from kvdoctor.whatif import histo, intervals, knobs, members, spec
from kvdoctor.whatif.intervals import Band, Reader
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
from kvdoctor.whatif.readout import WARMUP_S, quantities, simulate, verdict
from kvdoctor.whatif.saturation import Overload, as_dict, detect
from kvdoctor.whatif.stepfit import Row, fit_rows, history_rows
from kvdoctor.whatif.window import Quantities, Snap, delta_buckets, hist_name, measure
from kvdoctor.whatif.workload import WindowError, bound_duration, infer_engine, infer_workload

MIN_SIM_S, MAX_SIM_S = 120.0, 600.0
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
    band_now: Band | None = None  # the 80 % interval of each side (p10, p90)
    band_after: Band | None = None
    member_s: float = 0.0  # how long each of the interval's short simulations ran

    def to_dict(self) -> JsonObject:
        """The `--json` shape."""
        w, s = self.workload, self.step
        now = (
            self.band_now.sides("predicted_unchanged", self.overload_now is not None) if self.band_now else {}
        )
        after = self.band_after.sides("predicted", self.overload_after is not None) if self.band_after else {}
        return {
            "measured": self.measured.to_dict(),
            "predicted_unchanged": {**self.unchanged.to_dict(), **as_dict(self.overload_now)},
            **now,
            "predicted": {**self.predicted.to_dict(), **as_dict(self.overload_after)},
            **after,
            "interval": intervals.describe(self.member_s, self.band_after),
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
            "engine": {"now": knobs.settings(self.engine), "after": knobs.settings(self.engine_after)},
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
                "provenance": dict(
                    zip(
                        ("c0_s", "c_decode_s", "c_prefill_s", "c_kv_s", "c_attn_s"),
                        s.provenance,
                        strict=False,
                    )
                ),
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
        f"{e.num_gpu_blocks} blocks of {e.block_size} tokens, max_model_len {e.max_model_len}, "
        f"prefix caching {'on' if e.enable_prefix_caching else 'off'}, "
        f"num_speculative_tokens {e.num_speculative_tokens} ({e.accepted_per_step:.3g} tokens per decode step)"
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
    rows: list[Row] = field(default_factory=list)  # the step fit's rows, refitted resampled for the intervals
    physical: StepModel | None = None  # the roofline prior the fit leaned on, if any
    span_s: float = 0.0  # the window's length


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
    rows = history_rows(history, engine.max_num_batched_tokens)
    try:
        step = fit_rows(rows, physical)
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
        workload,
        engine,
        step,
        replicas,
        info,
        measured,
        duration,
        buckets,
        sigma,
        res_now,
        notes,
        seed,
        rows,
        physical,
        span,
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
    if "num_speculative_tokens" in changes and engine.speculation is not None:  # does throughput drop?
        batches = (unchanged.running / replicas, predicted.running / r_after)
        context = workload.prompt.mean + workload.output.mean / 2
        assumptions.append(spec.capacity_note(engine, after, step, batches, context))
    if replicas > 1 or r_after != replicas:
        assumptions.append(
            f"{replicas} engine(s) now, {r_after} after; each simulated with its share of the load"
        )
    assumptions.append(f"simulated {duration:.0f} s after a {WARMUP_S:.0f} s warm-up, seed {seed}")
    if bound_note and bound_note not in assumptions:
        assumptions.append(bound_note)
    assumptions.append(f"step-to-step jitter ±{sigma:.0%} (lognormal), fitted to the window's ITL histogram")
    over = detect(now, workload, replicas), detect(res_after, w_after, r_after)  # capacity past saturation
    # the intervals: a few short perturbed simulations of both sides, widened where the history never was
    now_m, after_m, member_s = members.run_members(basis, changes, gpu_memory_bytes, duration)
    seen = intervals.seen_range(history, basis.rows)
    miss = intervals.misses(unchanged, measured)
    flags = intervals.unseen(seen, unchanged, workload, replicas)
    band_now = intervals.band(unchanged, Reader(now, buckets, sigma), now_m, flags)
    flags = intervals.unseen(seen, predicted, w_after, r_after)
    band_after = intervals.band(predicted, Reader(res_after, buckets, sigma), after_m, flags, miss)
    assumptions.append(
        f"80 % intervals (p10-p90) from {len(after_m)} short simulations of {member_s:.0f} s each side: "
        + "; ".join(intervals.SOURCES)
    )
    if band_after.unseen:
        assumptions.append("after the change " + "; ".join(band_after.unseen) + ": its intervals are widened")
    return Prediction(
        measured,
        unchanged,
        predicted,
        workload,
        step,
        engine,
        after,
        changes,
        assumptions,
        *over,
        band_now,
        band_after,
        member_s,
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
