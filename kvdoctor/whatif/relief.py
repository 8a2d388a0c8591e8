"""The limit is the one whose relief helps: what the cap ×2, the cache ×2 and a second replica each buy.

The rule pack names a limit from thresholds; the simulator can say whether relieving it would help (`gains.py`: help is
capacity while the server is saturated, short of the compute ceiling; below capacity, the suffering latency cut alone).
The cap ×2 and the cache ×2 each relieve one resource; a second replica relieves all of them, so compute is named only
when no single-resource relief helps and the replica does.

When that names another limit than the rule's, the diagnosis keeps both: its verdict becomes the limit whose relief
helps, its evidence keeps the rule's (`limit_rule`, `co_binding`; the pack's `bottleneck` label and alert stay the
rule's, the Prometheus-only path cannot simulate), and a `relief_check` finding says what the simulator found, with
the advice leading with the change that helps.

A window at its capacity's edge is saturated in one simulation draw (seed) and not in the next, and the check would
name the limit that draw's arrivals chose: it is judged on DRAWS draws, the first two asked together and a third only
where they differ, and names what most say. Draw 0 is the advice's own prediction; the others are point values only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvdoctor import fmt
from kvdoctor.ceiling import CEILING_SHARE
from kvdoctor.verdicts import Advice, Diagnosis, Effect, Finding, Verdict
from kvdoctor.whatif.gains import BUYS, NOISE, ceiling_share, ends_overload, gain, helps, score

NEAR = 0.6  # ITL p50 at this share of the ITL from which compute is named: compute is within reach
FULL = 0.6  # KV usage from which the cache may be co-binding
LABELS = {"batch_cap": "the batch cap", "kv_cache": "the KV cache", "compute": "compute"}
REACHED = {"batch_cap": "is reached", "kv_cache": "is full", "compute": "is at its ceiling"}
QUANTITY = {"ttft_p95_s": "TTFT p95", "itl_p50_s": "ITL p50"}
# simulation draws (seeds) a check is judged on: a window at its capacity's edge is saturated in one draw and not in
# the next, so the verdict is what most draws say; a second draw that agrees with the first settles it
DRAWS = 3


@dataclass(frozen=True)
class Relief:
    """One relief: the limit it relieves, the change the simulator tries, and how a person says it."""

    limit: str
    change: dict[str, float | str]
    text: str


def borderline(d: Diagnosis) -> bool:
    """Another limit's thresholds hold or nearly do: slow tokens beside a cap or a full cache, a queue or a fuller
    cache beside compute. A clear limit is not second-guessed (each check costs three simulations a draw)."""
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
    # the cap the diagnosis advises (one number for the advice and its check), else x2 the cap it saw
    advised = next((a.change for a in d.advice if a.flag == "--max-num-seqs" and a.change), None)
    cap = (
        _num(ev.get("batch_cap_configured"))
        or _num(ev.get("batch_cap_inferred"))
        or _num(ev.get("running_max_1m"))
    )
    raised = _num(advised.get("max_num_seqs")) if advised else (cap * 2 if cap else None)
    if raised:
        out.append(
            Relief("batch_cap", {"max_num_seqs": int(raised)}, f"raising --max-num-seqs to {int(raised)}")
        )
    tokens = _num(ev.get("kv_cache_tokens"))
    if tokens:
        out.append(Relief("kv_cache", {"kv_cache_tokens": int(tokens) * 2}, "a KV cache twice the size"))
    # the simulation counts engines: a second copy of a data-parallel server doubles them
    engines = int(_num(ev.get("engines")) or 1)
    out.append(Relief("compute", {"replicas": 2 * engines}, "a second replica"))
    return out


def suffering(d: Diagnosis) -> str:
    """The quantity the limit hurts: first-token latency while requests queue, else inter-token latency."""
    waiting = _num(d.evidence.get("waiting_avg_1m"))
    return "ttft_p95_s" if waiting and waiting >= 1 else "itl_p50_s"


def check(d: Diagnosis, effects: dict[str, tuple[Relief, Effect]]) -> Finding | None:
    """The relief_check finding when the simulator names another limit than the rule did; None when they agree."""
    rule = d.verdict
    if any(r.limit not in effects for r in reliefs(d)) or rule not in effects or "compute" not in effects:
        return None  # a relief not predicted yet: no name from half the answer
    q = suffering(d)
    single = [k for k in effects if k != "compute" and helps(effects[k][1], q)]
    if single:
        checked = max(single, key=lambda k: score(effects[k][1], q))
    elif helps(effects["compute"][1], q):
        checked = "compute"  # only the replica, which adds compute beside the slots and the cache, helps
    else:
        return None  # nothing the simulator tries helps: no better name than the rule's
    if checked == rule:
        return None
    relief, eff = effects[rule]
    better_relief, better = effects[checked]
    named = checked.replace("_", " ")
    if helps(eff, q):  # a replica for compute, or a relief that buys less: the other resource binds first
        summary = (
            f"{named}-bound before {rule.replace('_', ' ')}: {better_relief.text} {_buys(better, q)}; "
            f"{relief.text} {_buys(eff, q)}"
        )
    else:
        summary = (
            f"{LABELS[rule]} {REACHED[rule]}, but {relief.text} buys {_bought(eff, q)}: "
            f"{named}-bound; {better_relief.text} {_buys(better, q)}"
        )
    g_rule, g_checked = gain(eff, q), gain(better, q)
    evidence: dict[str, float | str] = {
        "limit_rule": rule,
        "limit_checked": checked,
        "co_binding": rule,
        "suffering": q,
        "saturated": "yes" if better.saturated else "no",
        f"{rule}_relief_throughput_gain": round(g_rule.throughput, 3),
        f"{rule}_relief_gain": round(g_rule.latency, 3),
        f"{checked}_relief_throughput_gain": round(g_checked.throughput, 3),
        f"{checked}_relief_gain": round(g_checked.latency, 3),
        f"{rule}_relief_ceiling_share": round(ceiling_share(g_rule), 3),
    }
    why = (
        "at capacity only more throughput relieves the queue"
        if better.saturated
        else "below capacity every request is served either way"
    )
    return Finding(
        "relief_check",
        "info",
        summary,
        f"The rule pack names {rule} from its thresholds; the what-if simulation of each relief says "
        f"{named} is what limits here ({why}): {eff.summary()} for {relief.text}, "
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


def apply(d: Diagnosis, effect_of: Callable[[dict[str, float | str], int], Effect | None]) -> None:
    """Check a limited diagnosis' reliefs with `effect_of` (a cached prediction of a change at a simulation draw, or
    None) over up to DRAWS draws; name the limit that most of them say helps."""
    rs = reliefs(d)
    # each draw's check: a finding where it names another limit than the rule's
    said: list[Finding | None] = []
    missing = False
    for draw in range(DRAWS if rs else 0):
        if majority(said) is not None or (missing and draw >= 2):
            break  # the first two draws are asked together (queued at once in background mode), a third if they differ
        got = {}
        for r in rs:
            eff = effect_of(r.change, draw)
            if eff is not None:
                got[r.limit] = (r, eff)
        missing = missing or len(got) < len(rs)
        said.append(check(d, got))
    top = majority(said)
    if missing or top is None:
        return  # a draw not predicted yet (no name from part of the answer), or no majority: the rule's name stands
    finding = next((f for f in said if _named(f) == top), None)
    if finding is not None:
        d.findings.append(finding)
        lead_with(d, finding)
        name_the_limit(d, finding)


def majority(said: list[Finding | None]) -> str | None:
    """The limit more than half of DRAWS draws name ("" for the rule's), None while no limit has that many."""
    names = [_named(f) for f in said]
    return next((n for n in names if names.count(n) * 2 > DRAWS), None)


def _named(finding: Finding | None) -> str:
    return str(finding.evidence["limit_checked"]) if finding is not None else ""


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


def _bought(eff: Effect, quantity: str) -> str:
    """What the rule's own relief buys, said against capacity: `no throughput (52 tok/s either way)`."""
    g = gain(eff, quantity)
    a, b = eff.now.get("generation_tokens_per_s"), eff.after.get("generation_tokens_per_s")
    rates = f"{fmt.sig3(a)} → {fmt.sig3(b)} tok/s" if a and b else ""
    if abs(g.throughput - 1) < NOISE:
        text = f"no throughput ({fmt.sig3(a)} tok/s either way)" if a and b else "no throughput"
    else:
        text = f"{g.throughput - 1:+.0%} throughput" + (f" ({rates})" if rates else "")
        if eff.saturated and (share := ceiling_share(g)) >= CEILING_SHARE:
            text += (
                f" for ITL p50 ×{g.slower:.1f}: the added batch runs at {share:.0%} of the compute ceiling"
            )
    if eff.saturated and g.latency >= BUYS:
        moved = _span(eff, quantity)
        text += f"; {QUANTITY.get(quantity, quantity)} {moved} at the same throughput only moves the wait into decoding"
    elif eff.saturated and eff.overloaded_now:
        text += "; the queue grows either way"
    return text


def _buys(eff: Effect, quantity: str) -> str:
    """What the relief that helps buys: `doubles throughput (52 → 104 tok/s) and cuts TTFT p95 7.2×`."""
    g = gain(eff, quantity)
    label = QUANTITY.get(quantity, quantity)
    if not eff.saturated:
        return _cut(g.latency, label)
    a, b = eff.now.get("generation_tokens_per_s"), eff.after.get("generation_tokens_per_s")
    rates = f" ({fmt.sig3(a)} → {fmt.sig3(b)} tok/s)" if a and b else ""
    more = (
        "doubles throughput" if 1.9 <= g.throughput <= 2.1 else f"raises throughput {g.throughput - 1:+.0%}"
    )
    text = more + rates
    if g.latency >= BUYS:
        text += f" and {_cut(g.latency, label)}"
    elif ends_overload(eff) and (after := eff.after.get(quantity)) is not None:
        text += f" and ends the overload ({label} ≈{fmt.sig3(after)} s)"
    return text


def _span(eff: Effect, quantity: str) -> str:
    a, b = eff.now.get(quantity), eff.after.get(quantity)
    return f"{fmt.sig3(a)} → {fmt.sig3(b)} s" if a is not None and b is not None else ""


def _cut(factor: float, label: str) -> str:
    if 1.9 <= factor <= 2.1:
        return f"halves {label}"
    return f"cuts {label} {factor:.1f}×" if factor > 2.1 else f"cuts {label} by {1 - 1 / factor:.0%}"


def _flag(limit: str) -> str:
    return {"batch_cap": "--max-num-seqs", "kv_cache": "--kv-cache-memory-bytes"}.get(limit, "replicas")


def _num(v: float | str | None) -> float | None:
    return float(v) if isinstance(v, int | float) and v > 0 else None
