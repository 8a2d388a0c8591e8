"""`kvdoctor whatif`'s table: measured, predicted unchanged and predicted after, side by side with intervals."""

from __future__ import annotations

import math
from typing import Any

from kvdoctor import fmt
from kvdoctor.whatif.predict import Prediction

SIDES = ("predicted_unchanged", "predicted")
ROWS = (
    ("TTFT p50", "ttft_p50_s", "s"),
    ("TTFT p95", "ttft_p95_s", "s"),
    ("ITL p50", "itl_p50_s", "s"),
    ("ITL p95", "itl_p95_s", "s"),
    ("Queue time p95", "queue_time_p95_s", "s"),
    ("Generation tokens/s", "generation_tokens_per_s", "n"),
    ("Requests/s", "requests_per_s", "n"),
    ("Running", "running", "n"),
    ("Waiting", "waiting", "n"),
    ("KV usage peak", "kv_usage_max", "%"),
    ("Preemptions/s", "preemptions_per_s", "n"),
    ("Class", "bottleneck", ""),
)


def _cell(v: Any, kind: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    if kind == "s":
        return f"{v * 1000:.3g} ms" if v < 1 else f"{v:.3g} s"
    if kind == "%":
        return f"{v:.0%}"
    if kind == "n":
        return fmt.sig3(v)
    return str(v)


def _grows(side: dict[str, Any], key: str) -> str:
    return " (grows)" if key in (side.get("duration_dependent") or ()) else ""


def _range(
    side: dict[str, Any], low: dict[str, Any] | None, high: dict[str, Any] | None, key: str, kind: str
) -> str:
    cell = _cell(side[key], kind) + _grows(side, key)
    lo, hi = (low or {}).get(key), (high or {}).get(key)
    if lo is None or hi is None or kind == "":
        return cell
    if kind == "s":  # the range in the value's unit, written once
        v = side[key]
        k, unit = (1000.0, " ms") if max(v, hi) < 1 else (1.0, " s")
        return f"{fmt.sig3(v * k)} ({fmt.sig3(lo * k)}–{fmt.sig3(hi * k)}){unit}"
    return f"{cell} ({_cell(lo, kind)}–{_cell(hi, kind)})"


def render(pred: Prediction) -> str:
    """The side-by-side table with 80 % intervals, the workload and step model it rests on, and the assumptions."""
    d = pred.to_dict()
    cols = ("measured now", "predicted unchanged", "predicted after")
    change = ", ".join(f"{k}={v}" for k, v in pred.changes.items())
    lines = [f"{'':22s}{cols[0]:>16s}{cols[1]:>28s}{cols[2]:>28s}    ({change})"]
    for label, key, kind in ROWS:
        m = _cell(d["measured"][key], kind)
        u, p = (_range(d[c], d.get(f"{c}_p10"), d.get(f"{c}_p90"), key, kind) for c in SIDES)
        lines.append(f"{label:22s}{m:>16s}{u:>28s}{p:>28s}")
    lines.append(f"{'':38s}(in brackets: the 80 % interval, p10–p90)")
    if d["interval"]["unseen"]:  # the history never showed this regime: the interval is widened, and why
        lines.append(
            "after the change, outside what the history showed: " + "; ".join(d["interval"]["unseen"])
        )
    missed = pred.not_reproduced()
    if missed:  # a model that cannot give back the window it learned from is no better after a change
        said = "; ".join(missed)
        lines.append(
            f"the window itself is not reproduced: {said} (what it predicts after the change inherits that miss)"
        )
    for side, o in (("unchanged", pred.overload_now), ("after", pred.overload_after)):
        if o is not None:  # past saturation the queue has no steady length: say how fast it grows instead
            lines.append(f"{side} {o.line()}; (grows): a value that depends on how long was simulated")
    s = pred.step
    lines += [
        "",
        f"step time = {s.c0 * 1000:.3g} ms + {s.c_decode * 1000:.3g} ms/decoding request + "
        f"{s.c_prefill * 1e6:.3g} µs/prefill token ({s.source}, fit error {s.residual_ratio:.0%}, "
        f"{s.points} batch sizes seen)",
        "assumptions:",
    ]
    lines += [f"  - {a}" for a in pred.assumptions]
    return "\n".join(lines)
