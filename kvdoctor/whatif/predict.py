"""One place that turns a window of metrics and a set of changes into measured / unchanged / predicted quantities."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kvdoctor.capacity.arch import ModelSpec
from kvdoctor.capacity.presets import GpuSpec
from kvdoctor.jsondoc import JsonObject
from kvdoctor.whatif import intervals, knobs, members, spec
from kvdoctor.whatif.intervals import Band, Reader
from kvdoctor.whatif.learn import MIN_REQUESTS, MIN_SIM_S, Basis, learn, learned
from kvdoctor.whatif.ledger import Recall
from kvdoctor.whatif.model import Engine, SimResult, StepModel, Workload
from kvdoctor.whatif.profile import busiest_span
from kvdoctor.whatif.readout import (
    PEAK_LIMITS,
    WARMUP_S,
    classify,
    measured_class,
    quantities,
    refused,
    simulate,
    verdict,
)
from kvdoctor.whatif.saturation import Overload, as_dict, detect
from kvdoctor.whatif.window import Quantities, Snap
from kvdoctor.whatif.workload import bound_duration

__all__ = [
    "MIN_REQUESTS",
    "MIN_SIM_S",
    "WARMUP_S",
    "Basis",
    "Prediction",
    "learn",
    "predict",
    "quantities",
    "simulate",
    "verdict",
]


# the class kvdoctor gave over [from, to] of the window, replaying its source (None: not known)
Replayed = Callable[[float, float], str | None]


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

    def not_reproduced(self) -> list[str]:
        """What the window measured that its own, unchanged prediction misses widely: a window the model misread."""
        return intervals.not_reproduced(self.unchanged, self.measured, self.band_now)

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
            "not_reproduced": self.not_reproduced(),
            "workload": {
                "kind": w.kind,
                "requests_per_s": _r(w.rate_per_s),
                "population": w.population,
                "think_s": w.think_s,
                "prompt_tokens_mean": _r(w.prompt.mean),
                "output_tokens_mean": _r(w.output.mean),
                "prefix_hit_ratio": _r(w.prefix_hit_ratio),
                # each data-parallel engine's share where they carried the load unevenly ([]: split evenly)
                "engine_shares": [_r(x) for x in w.shares],
                # an open loop's rate in equal parts of the window, over its mean, where it was uneven ([]: level)
                "arrival_profile": [_r(x) for x in w.profile],
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


def predict(
    history: list[Snap],
    window: list[Snap],
    changes: dict[str, float | str],
    *,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    gpu_memory_bytes: float | None = None,
    measured_bottleneck: Replayed | None = None,
    seed: int = 0,
    model: ModelSpec | None = None,
    gpu: GpuSpec | None = None,
    with_intervals: bool = True,
    recall: Recall | None = None,
) -> Prediction:
    """Learn workload and engine from the window, step times from the history (and `recall`, the target's step
    ledger); simulate before and after.

    The learned window is shared (`learn.learned`): other changes of the same window only simulate their side.
    Without `with_intervals` the 80 % bands (eight short simulations) are left out: the point values are the same.
    """
    basis = learned(
        history,
        window,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        seed=seed,
        model=model,
        gpu=gpu,
        recall=recall,
    )
    workload, engine, step, replicas = basis.workload, basis.engine, basis.step, basis.replicas
    duration, buckets, sigma = basis.duration_s, basis.buckets, basis.sigma
    measured = replace(basis.measured)  # its bottleneck is this call's: the learned window is shared
    after, w_after, r_after, change_notes = knobs.apply(
        engine, workload, replicas, changes, basis.info, gpu_memory_bytes
    )
    # a change that adds load may pass the arrivals' cap where the window did not: both sides then run shorter
    duration, bound_note = bound_duration([(workload, replicas), (w_after, r_after)], duration, WARMUP_S)
    now = basis.unchanged(duration)
    res_after = basis.run(after, w_after, r_after, duration)  # a relief's run is a headroom probe's too
    unchanged = basis.unchanged_quantities(duration)
    predicted = quantities(res_after, r_after, buckets, sigma)
    light = basis.light_itl_s
    measured.bottleneck = _measured_class(
        window, measured, engine, light, replicas, workload, measured_bottleneck
    )
    unchanged.bottleneck = classify(now, unchanged, engine, light, replicas, buckets, sigma)
    predicted.bottleneck = classify(res_after, predicted, after, light, r_after, buckets, sigma)
    assumptions = [workload.why, *basis.notes, *change_notes, *step.notes]
    sides = ((now, engine, "now"), (res_after, after, "after the change"))
    assumptions += [n for res, e, side in sides if (n := refused(res, e, side)) is not None]
    if workload.profile:
        t0 = window[0].t
        judged = busiest_span(window[0].t, window[-1].t, workload.profile)
        assumptions.append(
            f"a batch cap or KV cache limit is judged at the window's busiest part ({judged[0] - t0:.0f}-"
            f"{judged[1] - t0:.0f} s in, {workload.rate_per_s * max(workload.profile):.3g} req/s), where a rising "
            "load meets it; the rest on the whole window"
        )
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
    p = Prediction(measured, unchanged, predicted, workload, step, engine, after, changes, assumptions, *over)
    if with_intervals:
        _intervals(p, basis, history, (now, (res_after, w_after, r_after)), gpu_memory_bytes, duration)
    return p


def _measured_class(
    window: list[Snap],
    measured: Quantities,
    engine: Engine,
    light: float | None,
    replicas: int,
    workload: Workload,
    replayed: Replayed | None,
) -> str:
    """The class the window measured: kvdoctor's own (a replay of its source) where known, else `measured_class`;
    where the arrivals followed a profile, its busiest part's when that names a queue's limit, as `classify`."""
    if replayed is None:
        return measured_class(window, measured, engine, light, replicas, workload.profile)
    whole = replayed(window[0].t, window[-1].t)  # first: the busiest part is then read from the same cycles
    if workload.profile:
        at_peak = replayed(*busiest_span(window[0].t, window[-1].t, workload.profile))
        if at_peak in PEAK_LIMITS:
            return at_peak
    return whole or measured_class(window, measured, engine, light, replicas)


def _intervals(
    p: Prediction,
    basis: Basis,
    history: list[Snap],
    runs: tuple[SimResult, tuple[SimResult, Workload, int]],
    gpu_memory_bytes: float | None,
    duration_s: float,
) -> None:
    """The 80 % bands of both sides: a few short perturbed simulations, widened where the history never was."""
    buckets, sigma = basis.buckets, basis.sigma
    now_m, after_m, member_s = members.run_members(basis, p.changes, gpu_memory_bytes, duration_s)
    seen = intervals.seen_range(history, basis.rows)
    # the batches the step ledger recalls were seen too, before the history's start
    seen = replace(seen, batch_max=max(seen.batch_max, basis.recalled_batch))
    miss = intervals.misses(p.unchanged, p.measured)
    flags = intervals.unseen(seen, p.unchanged, p.workload, basis.replicas)
    p.band_now = intervals.band(p.unchanged, Reader(runs[0], buckets, sigma), now_m, flags)
    res_after, w_after, r_after = runs[1]
    flags = intervals.unseen(seen, p.predicted, w_after, r_after)
    p.band_after = intervals.band(p.predicted, Reader(res_after, buckets, sigma), after_m, flags, miss)
    p.member_s = member_s
    p.assumptions.append(
        f"80 % intervals (p10-p90) from {len(after_m)} short simulations of {member_s:.0f} s each side: "
        + "; ".join(intervals.SOURCES)
    )
    if p.band_after.unseen:
        p.assumptions.append(
            "after the change " + "; ".join(p.band_after.unseen) + ": its intervals are widened"
        )
