"""A prediction as an advice's Effect: what an operator weighs, now and after, and how the load met the server."""

from __future__ import annotations

from dataclasses import replace

from kvdoctor.verdicts import Effect
from kvdoctor.whatif.predict import Prediction
from kvdoctor.whatif.saturation import DURATION_DEPENDENT, Overload
from kvdoctor.whatif.window import Quantities

EFFECT_KEYS = (
    "ttft_p50_s",
    "ttft_p95_s",
    "itl_p50_s",
    "queue_time_p95_s",
    "generation_tokens_per_s",
    "requests_per_s",
)


def effect_side(q: Quantities, overload: Overload | None = None) -> dict[str, float | None]:
    """One side of an Effect (now or after) from quantities predicted or measured."""
    d = q.to_dict()
    # past saturation these have no steady value to show: their size is the length simulated
    grows = DURATION_DEPENDENT if overload else ()
    return {k: None if k in grows else v for k, v in d.items() if k in EFFECT_KEYS and not isinstance(v, str)}


def effect_of(p: Prediction, change: dict[str, float | str], t: float) -> Effect:
    """The advice's effect from a prediction: now and after, the 80 % interval after, overload and unseen ranges."""
    now, after = effect_side(p.unchanged, p.overload_now), effect_side(p.predicted, p.overload_after)
    sides = (("now", p.overload_now), ("after", p.overload_after))
    said = [f"{side} {o.line()}" for side, o in sides if o]
    band = p.band_after
    low, high = (
        (effect_side(band.low, p.overload_after), effect_side(band.high, p.overload_after))
        if band
        else ({}, {})
    )
    eff = Effect(
        dict(change),
        now,
        after,
        p.predicted.bottleneck,
        t,
        overload="; ".join(said),
        after_p10=low,
        after_p90=high,
        unseen="; ".join(band.unseen) if band else "",
        not_reproduced="; ".join(p.not_reproduced()),
        closed_loop=p.workload.kind == "closed",
        overloaded_now=p.overload_now is not None,
    )
    return replace(eff, text=eff.summary())
