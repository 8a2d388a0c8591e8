"""The limit is the one whose relief helps: what the cap ×2, the cache ×2 and a second replica each buy.

The rule pack names a limit from thresholds; the simulator can say whether relieving it would help. When the rule's
limit's own relief buys nothing (no throughput, no gain on the quantity that suffers) while another relief does, the
limit is the other one and the rule's is co-binding. The diagnosis keeps both: its verdict becomes the limit whose
relief helps, its evidence keeps the rule's (`limit_rule`, `co_binding`; the pack's `bottleneck` label and alert stay
the rule's, the Prometheus-only path cannot simulate), and a `relief_check` finding says what the simulator found,
with the advice leading with the change that helps.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvdoctor import fmt
from kvdoctor.verdicts import Advice, Diagnosis, Effect, Finding, Verdict

NEAR = 0.6  # ITL p50 at this share of the ITL from which compute is named: compute is within reach
FULL = 0.6  # KV usage from which the cache may be co-binding
BUYS = 1.10  # a relief helps when it improves the suffering quantity by at least 10 %…
THROUGHPUT_BUYS = 1.05  # …or the throughput by at least 5 %
LABELS = {"batch_cap": "the batch cap", "kv_cache": "the KV cache", "compute": "compute"}
QUANTITY = {"ttft_p95_s": "TTFT p95", "itl_p50_s": "ITL p50"}


@dataclass(frozen=True)
class Relief:
    """One relief: the limit it relieves, the change the simulator tries, and how a person says it."""

    limit: str
    change: dict[str, float | str]
    text: str


def borderline(d: Diagnosis) -> bool:
    """Another limit's thresholds hold or nearly do: slow tokens beside a cap or a full cache, a queue or a fuller
    cache beside compute. A clear limit is not second-guessed (each check costs three simulations)."""
    ev = d.evidence
    itl, base = _num(ev.get("itl_p50_s")), _num(ev.get("itl_batch_baseline_s"))
    threshold = _num(ev.get("itl_compute_threshold_s")) or (2.5 * base if base else None)
    slow = bool(itl and threshold and itl >= NEAR * threshold)
    full = (_num(ev.get("kv_usage_max_1m")) or 0.0) >= FULL
    queue = (_num(ev.get("waiting_avg_1m")) or 0.0) >= 1
    return {"batch_cap": slow or full, "kv_cache": slow, "compute": queue or full}.get(d.verdict, False)


def reliefs(d: Diagnosis) -> list[Relief]:
    """The reliefs worth simulating for a limited, borderline diagnosis (none otherwise)."""
    if d.verdict not in LABELS or not borderline(d):
        return []
    ev = d.evidence
    out = []
    cap = (
        _num(ev.get("batch_cap_configured"))
        or _num(ev.get("batch_cap_inferred"))
        or _num(ev.get("running_max_1m"))
    )
    if cap:
        out.append(
            Relief("batch_cap", {"max_num_seqs": int(cap) * 2}, f"raising --max-num-seqs to {int(cap) * 2}")
        )
    tokens = _num(ev.get("kv_cache_tokens"))
    if tokens:
        out.append(Relief("kv_cache", {"kv_cache_tokens": int(tokens) * 2}, "a KV cache twice the size"))
    out.append(Relief("compute", {"replicas": 2}, "a second replica"))
    return out


def suffering(d: Diagnosis) -> str:
    """The quantity the limit hurts: first-token latency while requests queue, else inter-token latency."""
    waiting = _num(d.evidence.get("waiting_avg_1m"))
    return "ttft_p95_s" if waiting and waiting >= 1 else "itl_p50_s"


def gain(effect: Effect, quantity: str) -> tuple[float, float]:
    """(factor on the suffering quantity, factor on throughput); above 1 is better, 1.0 where not predicted."""
    a, b = effect.now.get(quantity), effect.after.get(quantity)
    lat = a / b if a and b and a > 0 and b > 0 else 1.0
    x, y = effect.now.get("generation_tokens_per_s"), effect.after.get("generation_tokens_per_s")
    tps = y / x if x and y and x > 0 else 1.0
    return lat, tps


def check(d: Diagnosis, effects: dict[str, tuple[Relief, Effect]]) -> Finding | None:
    """The relief_check finding when the simulator names another limit than the rule did; None when they agree."""
    rule = d.verdict
    if rule not in effects or "compute" not in effects:
        return None  # the rule's own relief or the replica not predicted yet
    q = suffering(d)

    def helps(limit: str) -> bool:
        lat, tps = gain(effects[limit][1], q)
        return lat >= BUYS or tps >= THROUGHPUT_BUYS

    if helps(rule):
        return None
    others = [k for k in effects if k not in (rule, "compute") and helps(k)]
    checked = max(others, key=lambda k: gain(effects[k][1], q)[0]) if others else "compute"
    if not helps(checked):
        return None  # nothing the simulator tries helps: no better name than the rule's
    relief, eff = effects[rule]
    better_relief, better = effects[checked]
    now_tps, after_tps = eff.now.get("generation_tokens_per_s"), eff.after.get("generation_tokens_per_s")
    tps = f" ({fmt.sig3(now_tps)} → {fmt.sig3(after_tps)} tok/s)" if now_tps and after_tps else ""
    lat, _ = gain(better, q)
    summary = (
        f"{LABELS[rule]} is reached, but {relief.text} buys no throughput{tps}: {checked.replace('_', ' ')}-bound; "
        f"{better_relief.text} {_cut(lat, q)}"
    )
    evidence: dict[str, float | str] = {
        "limit_rule": rule,
        "limit_checked": checked,
        "co_binding": rule,
        "suffering": q,
        f"{rule}_relief_gain": round(gain(eff, q)[0], 3),
        f"{checked}_relief_gain": round(lat, 3),
    }
    return Finding(
        "relief_check",
        "info",
        summary,
        f"The rule pack names {rule} from its thresholds; the what-if simulation of each relief says "
        f"{checked.replace('_', ' ')} is what limits here: {eff.summary()} for {relief.text}, "
        f"{better.summary()} for {better_relief.text}.",
        evidence,
        [
            Advice(
                _flag(checked),
                f"{better_relief.text} first: {better.summary()}",
                "what-if",
                dict(better_relief.change),
                better,
            )
        ],
        bottleneck="",
    )


def lead_with(d: Diagnosis, finding: Finding) -> None:
    """Put the change that helps first in the diagnosis' advice (the rule's own advice follows it)."""
    d.advice = [*finding.advice, *(a for a in d.advice if a.change != finding.advice[0].change)]


def name_the_limit(d: Diagnosis, finding: Finding) -> None:
    """The verdict becomes the limit whose relief helps; the evidence keeps the rule's name as co-binding."""
    checked, rule = finding.evidence.get("limit_checked"), finding.evidence.get("limit_rule")
    if not isinstance(checked, str) or checked not in LABELS or rule != d.verdict:
        return
    d.evidence = {**d.evidence, "limit_rule": rule, "co_binding": rule, "limit_checked": checked}
    d.verdict = Verdict(checked)


def _cut(factor: float, quantity: str) -> str:
    label = QUANTITY.get(quantity, quantity)
    if 1.9 <= factor <= 2.1:
        return f"halves {label}"
    return f"cuts {label} {factor:.1f}×" if factor > 2.1 else f"cuts {label} by {1 - 1 / factor:.0%}"


def _flag(limit: str) -> str:
    return {"batch_cap": "--max-num-seqs", "kv_cache": "--kv-cache-memory-bytes"}.get(limit, "replicas")


def _num(v: float | str | None) -> float | None:
    return float(v) if isinstance(v, int | float) and v > 0 else None
