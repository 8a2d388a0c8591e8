"""After a restart with another configuration: what was predicted for that change against what is now measured."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from kvdoctor import fmt
from kvdoctor.verdicts import Finding
from kvdoctor.whatif.compare import COMPARED, errors
from kvdoctor.whatif.intervals import Band
from kvdoctor.whatif.model import Workload
from kvdoctor.whatif.offload import Offload
from kvdoctor.whatif.plateau import plateau
from kvdoctor.whatif.predict import predict
from kvdoctor.whatif.saturation import DURATION_DEPENDENT
from kvdoctor.whatif.sharing import Simulate
from kvdoctor.whatif.sources import default_window
from kvdoctor.whatif.window import Quantities, Snap, measure
from kvdoctor.whatif.workload import WindowError, infer_workload, info_count

SETTLE_S = 30.0  # steady traffic after the restart before the new configuration is judged
SAME_LOAD = 1.5  # before and after loads further apart than this are not compared
RAMP_S = 10.0  # skipped after the restart while the queue refills
SHOWN = ("ttft_p50_s", "ttft_p95_s", "itl_p50_s", "generation_tokens_per_s")
LABELS = {
    "ttft_p50_s": "TTFT p50",
    "ttft_p95_s": "TTFT p95",
    "itl_p50_s": "ITL p50",
    "generation_tokens_per_s": "throughput",
}


@dataclass
class FollowUp:
    """A configuration change the target went through, the prediction for it and what it measured since."""

    target: str
    change: dict[str, float | str]
    restart_t: float
    predicted: Quantities
    measured: Quantities
    errors: dict[str, float] = field(default_factory=dict)
    t: float = 0.0
    band: Band | None = None  # the prediction's 80 % interval

    def inside(self) -> dict[str, bool]:
        """Per shown quantity with an interval: whether the measured value fell inside it."""
        if self.band is None:
            return {}
        got = {k: self.band.inside(k, getattr(self.measured, k)) for k in SHOWN}
        return {k: v for k, v in got.items() if v is not None}

    def finding(self) -> Finding:
        """The follow-up as an info finding: summary, the error ratios and the share inside its interval."""
        change = ", ".join(f"{k} {v}" for k, v in self.change.items())
        parts = []
        inside = self.inside()
        for k in SHOWN:
            p, m = getattr(self.predicted, k), getattr(self.measured, k)
            if math.isfinite(p) and math.isfinite(m):
                span = ""
                if k in inside and self.band is not None:
                    lo, hi = getattr(self.band.low, k), getattr(self.band.high, k)
                    span = f" (80 %: {_fmt(k, lo)}–{_fmt(k, hi)})"
                said = f", {'inside' if inside[k] else 'outside'}" if k in inside else ""
                parts.append(f"{LABELS[k]} predicted {_fmt(k, p)}{span}, measured {_fmt(k, m)}{said}")
        ev: dict[str, float | str] = {
            f"prediction_error_{k}": v for k, v in self.errors.items() if math.isfinite(v)
        }
        if inside:
            ev["prediction_inside_share"] = sum(inside.values()) / len(inside)
        ev["change"] = change
        return Finding(
            "prediction_check",
            "info",
            f"after the restart with {change}: " + "; ".join(parts),
            "kvdoctor predicted this change from the metrics before the restart; the error ratios compare that "
            "prediction with the first minutes after it",
            ev,
            since=self.restart_t,
        )


def _fmt(key: str, v: float) -> str:
    if not key.endswith("_per_s"):
        return f"{v * 1000:.3g} ms" if v < 1 else f"{v:.3g} s"
    return f"{fmt.sig3(v)} tok/s"


def inferred_change(before: list[Snap], after: list[Snap]) -> dict[str, float | str] | None:
    """The change the restart made, as far as the metrics tell: a new cache size, or a new batch-cap plateau."""
    a, b = before[-1].info, after[-1].info
    if a and b and a.get("num_gpu_blocks") != b.get("num_gpu_blocks"):
        try:
            return {
                "kv_cache_tokens": info_count(b, "num_gpu_blocks", "0") * info_count(b, "block_size", "16")
            }
        except WindowError:  # a size that is no count: no change to check
            return None
    cap_before, cap_after = plateau(before), plateau(after)
    if cap_after is not None and cap_after != cap_before:
        return {"max_num_seqs": cap_after}
    return None


def comparable(a: Workload, b: Workload) -> bool:
    """The same offered load within a third: the same client population, or the same arrival rate."""
    if a.kind != b.kind:
        return False
    x, y = (a.population, b.population) if a.kind == "closed" else (a.rate_per_s, b.rate_per_s)
    return x > 0 and y > 0 and 1 / SAME_LOAD <= y / x <= SAME_LOAD


@dataclass
class Case:
    """What a follow-up compares: the history before the restart, its steady window, the steady load after it, and
    the change the metrics show."""

    before: list[Snap]
    window: list[Snap]
    after: list[Snap]
    change: dict[str, float | str]
    t: float  # the end of the steady load after the restart


def case(history: list[Snap], restart_t: float) -> Case | None:
    """The follow-up's inputs once the load after the restart has settled and the metrics tell what changed at the
    same load; None otherwise. Cheap (no simulation): the daemon asks it before sending a history to simulate."""
    before = [s for s in history if s.t < restart_t]
    after = [s for s in history if s.t >= restart_t + RAMP_S]
    if len(before) < 5 or len(after) < 5:
        return None
    lo, hi = default_window(after)  # the steady load since the restart, once it has lasted SETTLE_S
    after = [s for s in after if lo <= s.t <= hi]
    if len(after) < 5 or hi - lo < SETTLE_S:
        return None
    blo, bhi = default_window(before)
    window = [s for s in before if blo <= s.t <= bhi]
    # steady load against steady load: a whole history's ramp-up held no plateau, and read as a new batch cap
    change = inferred_change(window, after)
    if not change:
        return None  # the metrics do not tell what changed: nothing to hold a prediction against
    try:
        if not comparable(infer_workload(window), infer_workload(after)):
            return None  # the traffic changed too: a different load, not the change, would be measured
    except (WindowError, ValueError, ZeroDivisionError):
        return None
    return Case(before, window, after, change, hi)


def follow_up(target: str, history: list[Snap], restart_t: float) -> FollowUp | None:
    """Predict the change from before the restart and measure after it; None while too little is known."""
    c = case(history, restart_t)
    if c is None:
        return None
    before, window, after, change = c.before, c.window, c.after, c.change
    try:
        p = predict(before, window, change)
        measured = measure(after)
    except (WindowError, ValueError, ZeroDivisionError):
        return None
    predicted, band = p.predicted, p.band_after
    if p.overload_after is not None:  # past saturation its TTFT only said how long was simulated: not held
        predicted = replace(predicted)
        for k in DURATION_DEPENDENT:
            setattr(predicted, k, math.nan)
        if band is not None:
            band = Band(replace(band.low), replace(band.high), band.unseen, band.resolution)
            for q in (band.low, band.high):
                for k in DURATION_DEPENDENT:
                    setattr(q, k, math.nan)
    errs = errors(predicted, measured, COMPARED)
    return FollowUp(target, change, restart_t, predicted, measured, errs, c.t, band)


def checked(
    target: str, history: list[Snap], restart_t: float, offload: Offload | None, simulate: bool = True
) -> FollowUp | None:
    """follow_up, in the offload's child once its case is made; raises Simulate for that instead when not to simulate."""
    # the case's cheap checks (0.1 ms) answer here what needs no simulation: nothing queued for the worker, nor sent
    # to the child (~1 ms to pickle the history, ~1.2 ms to unpickle); inline, follow_up makes the case itself
    if (offload is not None or not simulate) and case(history, restart_t) is None:
        return None  # not settled, or no change to check
    if not simulate:
        raise Simulate
    return (
        offload.run(follow_up, target, history, restart_t)
        if offload
        else follow_up(target, history, restart_t)
    )
