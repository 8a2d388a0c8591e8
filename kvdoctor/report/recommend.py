"""Recommendations with numbers, each naming the evidence behind it, from a built report document."""

from __future__ import annotations

from kvdoctor.report.document import IncidentSpan, Number, Recommendation, Report
from kvdoctor.report.economics import Prices
from kvdoctor.report.rows import Closeness

WEEK_H = 168.0
IDLE_HEAVY = 0.5  # a replica idle at least half the time
FLEET_IDLE = 0.2  # the fleet idle share that makes scaling with the traffic worth saying

ADVICE = {
    "kv_cache": "fp8 KV cache (--kv-cache-dtype fp8) doubles the tokens the cache holds; a shorter --max-model-len, "
    "a higher --gpu-memory-utilization or another replica also absorb it",
    "batch_cap": "raise --max-num-seqs: the KV cache had room for more sequences",
    "compute": "add a replica, or serve FP8/W8A8 weights; speculative decoding off at peak",
    "down": "check the vLLM process and its /metrics endpoint",
}
NAMES = {
    "kv_cache": "the KV-cache limit",
    "batch_cap": "the --max-num-seqs cap",
    "compute": "compute",
    "down": "down",
}


def _usd(v: float) -> str:
    return f"${v:,.2f}"


def _hours(v: float) -> str:
    # a short range's 0.08 and 0.11 GPU-hours must not both read "0.1"
    return f"{v:.2f}" if v < 10 else f"{v:,.1f}"


def _rec(kind: str, text: str, numbers: dict[str, Number], evidence: str) -> Recommendation:
    return Recommendation(kind, text, numbers, evidence)


def recommendations(doc: Report, prices: Prices) -> tuple[list[Recommendation], list[str]]:
    """(recommendations, notes) for a report document."""
    recs = [r for r in (_scaling(doc, prices), _peak(doc)) if r]
    recs += _limits(doc)
    econ = _economics(doc, prices)
    if econ:
        recs.append(econ)
    notes = []
    if prices.gpu_hour_usd is None:
        notes.append(
            f"No --gpu-hour-cost given: the report shows {doc.fleet.costs.gpu_hours:.1f} GPU-hours and the tokens "
            "served; a price per GPU-hour would add the cost, cost per 1M prompt and generation tokens, what "
            "not paying the idle hours or following the traffic would have cost, and (with --api-price-in and "
            "--api-price-out) the break-even against an API."
        )
    elif prices.api_in_usd is None or prices.api_out_usd is None:
        notes.append("No --api-price-in/--api-price-out given: the break-even against an API is left out.")
    return recs, notes


def _scaling(doc: Report, prices: Prices) -> Recommendation | None:
    f, c = doc.fleet.summary, doc.fleet.costs
    n, peak, quiet = (
        doc.fleet.replicas,
        doc.fleet.sizing.peak_replicas_needed,
        doc.fleet.sizing.quiet_replicas_needed,
    )
    if f.idle_share < FLEET_IDLE and (quiet is None or quiet >= n):
        return None
    heavy = [e.target for e in doc.targets if e.summary.idle_share >= IDLE_HEAVY]
    text = (
        f"{len(heavy)} of {n} replicas were idle at least half the time; the fleet was idle "
        f"{f.idle_share * 100:.0f} % of its {_hours(c.gpu_hours)} GPU-hours."
    )
    numbers: dict[str, Number] = {
        "replicas": n,
        "idle_replicas": len(heavy),
        "idle_share": f.idle_share,
        "gpu_hours": c.gpu_hours,
        "peak_replicas_needed": peak,
        "quiet_replicas_needed": quiet,
    }
    if peak is not None and quiet is not None:
        text += (
            f" The traffic needed {peak} at the peak hour and {quiet} in quiet hours: scale to {quiet} off-peak."
            f" Following the traffic hour by hour would have used {_hours(c.gpu_hours_following_traffic or 0.0)} "
            f"GPU-hours instead of {_hours(c.gpu_hours)}"
        )
        numbers["gpu_hours_following_traffic"] = c.gpu_hours_following_traffic
        if c.cost_usd is not None and c.cost_following_traffic_usd is not None:
            save = round(c.cost_usd - c.cost_following_traffic_usd, 2)
            week = round(save / doc.range.hours * WEEK_H, 2) if doc.range.hours else None
            text += f", {_usd(c.cost_following_traffic_usd)} instead of {_usd(c.cost_usd)}"
            if save > 0:
                text += f": save {_usd(save)}" + (f" ({_usd(week)}/week)" if week is not None else "")
            else:  # the replicas ran busier than the sizing's headroom lets one run: holding it costs more
                text += f": {_usd(-save)} more, to keep the {prices.headroom:.0%} headroom the sizing holds"
            numbers.update(
                {
                    "cost_usd": c.cost_usd,
                    "cost_following_traffic_usd": c.cost_following_traffic_usd,
                    "savings_usd": save,
                    "savings_per_week_usd": week,
                }
            )
        text += "."
    caps = "; ".join(
        f"{m or 'no model name'}: "
        + (
            f"{cap.generation_tokens_per_s_per_replica} tokens/s ({cap.basis})"
            if cap.generation_tokens_per_s_per_replica is not None
            else cap.basis
        )
        for m, cap in doc.capacity.items()
    )
    evidence = (
        f"time per class per target; hourly generation tokens/s against the throughput one replica "
        f"sustained ({caps}) with {prices.headroom * 100:.0f} % headroom"
    )
    return _rec("scale_with_traffic", text, numbers, evidence)


def _peak(doc: Report) -> Recommendation | None:
    peak, n = doc.fleet.sizing.peak_replicas_needed, doc.fleet.replicas
    if peak is None or peak <= n:
        return None
    busiest: Closeness | None = doc.fleet.summary.busiest_hour
    return _rec(
        "add_replicas",
        f"The peak hour ({busiest.start_iso if busiest else '?'}) needed {peak} replicas at {doc.headroom * 100:.0f} % "
        f"headroom; the fleet has {n}: add {peak - n} for that hour.",
        {
            "peak_replicas_needed": peak,
            "replicas": n,
            "peak_hour_generation_tokens_per_s": doc.fleet.summary.peak_hour_generation_tokens_per_s,
        },
        "the busiest hour's generation tokens/s against the throughput one replica sustained at saturation",
    )


def _limits(doc: Report) -> list[Recommendation]:
    out = []
    hour = doc.fleet.summary.busiest_hour
    busiest = hour.start if hour else None
    for e in doc.targets:
        by_cls: dict[str, list[IncidentSpan]] = {}
        for i in e.incidents:
            by_cls.setdefault(i.cls, []).append(i)
        for cls, items in by_cls.items():
            hours = round(sum(i.end - i.start for i in items) / 3600, 2)
            in_peak = sum(1 for i in items if busiest is not None and busiest <= i.start < busiest + 3600)
            worst = max(items, key=lambda i: i.end - i.start)
            text = (
                f"{e.target} ({e.model_name or 'no model'}) hit {NAMES[cls]} {len(items)} time(s) for "
                f"{hours:.2f} h ({in_peak} in the busiest hour); the longest: {worst.explanation}. {ADVICE[cls]}."
            )
            out.append(
                _rec(
                    f"limit_{cls}",
                    text,
                    {
                        "target": e.target,
                        "incidents": len(items),
                        "hours": hours,
                        "in_busiest_hour": in_peak,
                    },
                    f"incidents of {cls} from {worst.start_iso} to {worst.end_iso} (finding {worst.finding})",
                )
            )
    return out


def _economics(doc: Report, prices: Prices) -> Recommendation | None:
    c, generated = doc.fleet.costs, doc.fleet.summary.generation_tokens
    if c.cost_usd is None:
        return None
    numbers: dict[str, Number] = {
        "cost_usd": c.cost_usd,
        "cost_if_idle_unpaid_usd": c.cost_if_idle_unpaid_usd,
        "cost_per_1m_generation_tokens_usd": c.cost_per_1m_generation_tokens_usd,
        "cost_per_1m_generation_tokens_if_idle_unpaid_usd": c.cost_per_1m_generation_tokens_if_idle_unpaid_usd,
        "api_cost_usd": c.api_cost_usd,
        "break_even_traffic_multiple": c.break_even_traffic_multiple,
    }
    per_1m = c.cost_per_1m_generation_tokens_usd
    text = (
        f"Reserved, the fleet cost {_usd(c.cost_usd)} for {generated:,} generation tokens"
        + (f" ({_usd(per_1m)} per 1M)" if per_1m is not None else "")
        + f"; without the idle hours it would have cost {_usd(c.cost_if_idle_unpaid_usd or 0.0)}."
    )
    if c.api_cost_usd is not None and c.break_even_traffic_multiple is not None:
        multiple = c.break_even_traffic_multiple
        text += f" The API prices would have billed {_usd(c.api_cost_usd)} for the same tokens: "
        if multiple <= 1:
            text += "self-hosting is cheaper at this traffic."
        else:
            text += f"self-hosting pays only at {multiple:.1f}× today's traffic"
            cap = [m.generation_tokens_per_s_per_replica for m in doc.capacity.values()]
            if all(cap) and generated:
                total_h = doc.fleet.summary.hours["total"]
                room = sum(x or 0.0 for x in cap) / len(cap) * (1 - prices.headroom) * total_h * 3600
                room_multiple = round(room / generated, 1)
                numbers["capacity_traffic_multiple"] = room_multiple
                text += f", and the fleet's sustained capacity allows {room_multiple:.1f}×" + (
                    " — the API is cheaper for this traffic shape." if room_multiple < multiple else "."
                )
            else:
                text += "."
    return _rec(
        "economics",
        text,
        numbers,
        f"reservation-based: {c.gpu_hours:.1f} GPU-hours × {_usd(prices.gpu_hour_usd or 0)}/GPU-hour, "
        "idle hours included",
    )
