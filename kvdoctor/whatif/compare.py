"""Predictions against what was measured: relative errors, directions, and recorded before/after pairs."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kvdoctor.whatif.knobs import KnobError, parse_knob
from kvdoctor.whatif.predict import Prediction, predict
from kvdoctor.whatif.resolution import window_resolution
from kvdoctor.whatif.sources import recording_snaps
from kvdoctor.whatif.window import Quantities, in_window, measure

# The quantities the accuracy targets are stated on (#21's done line), and the others a follow-up reports.
HEADLINE = ("ttft_p50_s", "itl_p50_s", "generation_tokens_per_s", "ttft_p95_s", "itl_p95_s")
COMPARED = (*HEADLINE, "queue_time_p95_s", "requests_per_s", "running", "waiting")
COVERED = HEADLINE  # the quantities whose 80 % intervals the benchmark scores
FLAT = 0.05  # a measured change under 5 % has no direction


def error_ratio(predicted: float, measured: float) -> float:
    """|predicted − measured| / measured (NaN when either is unknown or measured is 0)."""
    if not (math.isfinite(predicted) and math.isfinite(measured)) or measured == 0:
        return math.nan
    return abs(predicted - measured) / abs(measured)


def errors(predicted: Quantities, measured: Quantities, keys: tuple[str, ...] = COMPARED) -> dict[str, float]:
    """Relative error per quantity."""
    return {k: error_ratio(getattr(predicted, k), getattr(measured, k)) for k in keys}


def direction(before: float, after: float) -> int:
    """+1 up, −1 down, 0 within FLAT of before."""
    if not (math.isfinite(before) and math.isfinite(after)) or before == 0:
        return 0
    change = (after - before) / abs(before)
    return 0 if abs(change) < FLAT else (1 if change > 0 else -1)


@dataclass
class PairResult:
    """One recorded flag change: the prediction made from before, and what after measured."""

    name: str
    change: dict[str, float | str]
    prediction: Prediction
    after: Quantities
    unchanged_error: dict[str, float] = field(default_factory=dict)
    changed_error: dict[str, float] = field(default_factory=dict)
    direction_right: dict[str, bool] = field(default_factory=dict)
    inside_unchanged: dict[str, bool] = field(default_factory=dict)  # measured within the 80 % interval
    inside_changed: dict[str, bool] = field(default_factory=dict)
    width_changed: dict[str, float] = field(default_factory=dict)  # (p90 − p10) / predicted
    # the after side's latency quantiles: the error vLLM's buckets leave however good the prediction
    resolution_after: dict[str, float] = field(default_factory=dict)


def coverage(
    pred: Prediction, measured_after: Quantities, keys: tuple[str, ...] = COVERED
) -> tuple[dict[str, bool], dict[str, bool], dict[str, float]]:
    """Whether the window and the after measurement fell inside each side's interval, and the after widths."""
    now, after = pred.band_now, pred.band_after
    if now is None or after is None:
        return {}, {}, {}
    inside_now = {k: now.inside(k, getattr(pred.measured, k)) for k in keys}
    inside_after = {k: after.inside(k, getattr(measured_after, k)) for k in keys}
    width = {}
    for k in keys:
        p, lo, hi = getattr(pred.predicted, k), getattr(after.low, k), getattr(after.high, k)
        if math.isfinite(p) and p > 0 and math.isfinite(lo) and math.isfinite(hi):
            width[k] = (hi - lo) / p
    return (
        {k: v for k, v in inside_now.items() if v is not None},
        {k: v for k, v in inside_after.items() if v is not None},
        width,
    )


# Turning on what the before side does not measure (speculation's acceptance, the traffic's prefix hits) cannot be
# predicted from it; turning it off can, from the after side: such a pair is scored in reverse.
REVERSIBLE: dict[str, float | str] = {"num_speculative_tokens": 0, "enable_prefix_caching": "false"}


def reverse_of(pair: dict[str, object]) -> dict[str, float | str] | None:
    """The change back from after to before (the pair's `reverse`, or turning off what it turned on), or None."""
    if "reverse" in pair:
        return dict(pair["reverse"])  # type: ignore[call-overload]
    change = dict(pair["change"])  # type: ignore[call-overload]
    return {k: REVERSIBLE[k] for k in change} if change and set(change) <= set(REVERSIBLE) else None


def run_pair(directory: Path, pair: dict[str, object], seed: int = 0) -> PairResult:
    """Predict from the before recording's heavy phase (history: all of it) and measure after's heavy phase.

    A change that cannot be predicted from before (KnobError) but can be undone is scored from after to before."""
    try:
        return _run(directory, pair, seed, dict(pair["change"]), ("before", "after"))  # type: ignore[call-overload]
    except KnobError:
        back = reverse_of(pair)
        if back is None:
            raise
        return _run(directory, pair, seed, back, ("after", "before"))


def _run(
    directory: Path, pair: dict[str, object], seed: int, raw: Mapping[str, object], sides: tuple[str, str]
) -> PairResult:
    first, second = sides
    before = recording_snaps(directory / str(pair[first]))
    after = recording_snaps(directory / str(pair[second]))
    lo, hi = _span(pair[f"heavy_{first}"])
    alo, ahi = _span(pair[f"heavy_{second}"])
    change = dict(parse_knob(f"{k}={v}") for k, v in raw.items())
    history = [s for s in before if s.t <= hi]
    # vLLM does not export its scheduler limits: pass the ones the server was started with, as an operator would
    flags = flag_values(str(pair.get(f"{first}_flags", "")))
    pred = predict(
        history,
        in_window(before, lo, hi),
        change,
        seed=seed,
        max_num_seqs=flags.get("--max-num-seqs"),
        max_num_batched_tokens=flags.get("--max-num-batched-tokens"),
    )
    after_window = in_window(after, alo, ahi)
    measured_after = measure(after_window)
    name = str(pair["name"]) + (" (reversed)" if first == "after" else "")
    result = PairResult(name, change, pred, measured_after, resolution_after=window_resolution(after_window))
    result.unchanged_error = errors(pred.unchanged, pred.measured, HEADLINE)
    result.changed_error = errors(pred.predicted, measured_after, HEADLINE)
    result.inside_unchanged, result.inside_changed, result.width_changed = coverage(pred, measured_after)
    for k in HEADLINE:
        real = direction(getattr(pred.measured, k), getattr(measured_after, k))
        guess = direction(getattr(pred.unchanged, k), getattr(pred.predicted, k))
        result.direction_right[k] = real == guess or (real == 0 and _small(pred, k))
    return result


def flag_values(cmdline: str) -> dict[str, int]:
    """The scheduler limits a `vllm serve` command line sets (--max-num-seqs N, --max-num-batched-tokens N)."""
    words = cmdline.replace("=", " ").split()
    out = {}
    for flag, value in itertools.pairwise(words):
        if flag in ("--max-num-seqs", "--max-num-batched-tokens") and value.isdigit():
            out[flag] = int(value)
    return out


def _small(pred: Prediction, k: str) -> bool:
    # a change vLLM did not show should be predicted as at most a small one
    return error_ratio(getattr(pred.predicted, k), getattr(pred.unchanged, k)) < 2 * FLAT


def _span(v: object) -> tuple[float, float]:
    if not isinstance(v, list | tuple) or len(v) != 2:
        raise ValueError(f"pairs.json: expected [from, to], got {v!r}")
    return float(v[0]), float(v[1])


def load_pairs(directory: Path) -> list[dict[str, object]]:
    """The pairs a fixture directory's pairs.json lists ([] when it has none)."""
    path = directory / "pairs.json"
    return list(json.loads(path.read_text())) if path.is_file() else []
