"""What one evaluation of one (target, model) contributes to the report: a `Step`, read from a diagnosis."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvdoctor.verdicts import LIMITS, Diagnosis


@dataclass
class Step:
    """One evaluation of one (target, model): its class for dt seconds, what was served in it, the gauges."""

    t: float
    dt: float
    cls: str
    finding: str = ""  # the finding that explains a limit (or target_down)
    requests: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    kv: float | None = None
    running: float | None = None
    waiting: float | None = None
    cap: float | None = None  # configured --max-num-seqs, else the inferred plateau
    gen_tps: float | None = None
    itl_p50: float | None = None
    itl_baseline: float | None = None
    preemptions_per_s: float | None = None


def opt(v: object) -> float | None:
    """v as a float when it is a finite count, rate or ratio, else None."""
    # evidence that is no count, rate or ratio (±Inf, negative) is left out like a missing value
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        return None
    return float(v)


def merged_evidence(d: Diagnosis) -> dict[str, float | str]:
    """The diagnosis evidence with its findings' evidence added (what kvdoctor exports as gauges)."""
    evidence = dict(d.evidence)
    for f in d.findings:
        evidence.update({k: v for k, v in f.evidence.items() if k not in evidence})
    return evidence


def step_from_diagnosis(d: Diagnosis, t: float, dt: float) -> Step:
    """A step from one diagnosis: its class (down when the target is down), explaining finding and gauges."""
    ev = merged_evidence(d)
    names = [f.name for f in d.findings]
    cls, finding = str(d.verdict), ""
    if cls == "unknown" and "target_down" in names:
        cls, finding = "down", "target_down"
    elif cls in LIMITS:
        finding = next((f.name for f in d.findings if f.bottleneck == cls), cls)
    cap = opt(ev.get("batch_cap_configured")) or opt(ev.get("batch_cap_inferred"))
    return Step(
        t,
        dt,
        cls,
        finding,
        kv=opt(ev.get("kv_usage")),
        running=opt(ev.get("running")),
        waiting=opt(ev.get("waiting")),
        cap=cap,
        gen_tps=opt(ev.get("generation_tokens_per_s")),
        itl_p50=opt(ev.get("itl_p50_s")),
        itl_baseline=opt(ev.get("itl_baseline_s")),
        preemptions_per_s=opt(ev.get("preemptions_per_s")),
    )
