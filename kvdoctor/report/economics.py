"""Reservation-based cost (idle hours are paid), API break-even, and the replicas the traffic needed hour by hour."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kvdoctor.report.history import Hour
from kvdoctor.report.rows import Costs, FleetSizing, Sizing, Summary
from kvdoctor.report.summary import covered, hour_tps

QUIET_QUANTILE = 0.25  # "quiet hours": the fleet's traffic at its 25th-percentile hour
_USD = re.compile(r"^\$?\s*(\d+(?:\.\d+)?|\.\d+)\s*(?:usd)?$", re.IGNORECASE)


@dataclass(frozen=True)
class Prices:
    """What the operator pays: per GPU-hour, GPUs per target, API prices per 1M tokens; headroom for sizing."""

    gpu_hour_usd: float | None = None
    gpus_per_target: int = 1
    api_in_usd: float | None = None  # per 1M prompt tokens
    api_out_usd: float | None = None  # per 1M generation tokens
    headroom: float = 0.2


def parse_usd(flag: str, text: str) -> float:
    """A price in US dollars ('2.5', '$2.5', '2.5USD'); anything else (2/h, 2EUR, -1) raises ValueError naming flag."""
    m = _USD.match(text.strip())
    if not m:
        raise ValueError(
            f"{flag} {text!r}: expected a price in US dollars as a plain number, e.g. {flag} 2.50 "
            "(per GPU-hour for --gpu-hour-cost, per 1M tokens for --api-price-*); no other currency or unit"
        )
    return float(m.group(1))


def replicas_for(tps: float, capacity: float | None, headroom: float) -> int | None:
    """Replicas serving tps with each loaded to (1 - headroom) of its sustained capacity; 0 with no traffic."""
    if tps <= 0:
        return 0
    if not capacity:
        return None
    return max(1, math.ceil(tps / (capacity * (1 - headroom)) - 1e-9))


def capacity(summaries: list[Summary]) -> tuple[float | None, str]:
    """Generation tokens/s one replica sustains: measured at saturation, else the highest rate seen (a floor)."""
    sat = [s.sustained_generation_tokens_per_s for s in summaries if s.sustained_generation_tokens_per_s]
    if sat:
        return round(max(sat), 3), "measured while a limit held (saturated)"
    seen = max((s.max_generation_tokens_per_s for s in summaries), default=0.0)
    if seen:
        return seen, "never saturated: the highest rate seen, so replica counts are upper bounds"
    return None, "no traffic"


def sizing(
    hours: dict[int, Hour], wall_s: dict[int, float], cap: float | None, headroom: float
) -> tuple[Sizing, list[int | None]]:
    """Replicas needed at the peak hour and in quiet hours, and per hour, for merged hours observed wall_s per hour."""
    per_hour = []
    for h in hours.values():
        tps = hour_tps(h, wall_s.get(h.start, covered(h)))
        wall = wall_s.get(h.start, covered(h)) / 3600
        per_hour.append((h.start, tps, replicas_for(tps, cap, headroom), wall))
    tps_values = [x[1] for x in per_hour]
    # an hour that happened (nearest rank), not a blend with its busier neighbour
    quiet_tps = sorted(tps_values)[int(QUIET_QUANTILE * (len(tps_values) - 1))] if tps_values else 0.0
    peak = max(per_hour, key=lambda x: x[1], default=None)
    size = Sizing(
        peak_replicas_needed=peak[2] if peak else None,
        peak_hour_start=peak[0] if peak else None,
        quiet_replicas_needed=replicas_for(quiet_tps, cap, headroom),
        quiet_hour_generation_tokens_per_s=round(quiet_tps, 3),
        replica_hours_following_traffic=(
            round(sum(n * w for _, _, n, w in per_hour if n is not None), 4) if cap else None
        ),
    )
    return size, [n for _, _, n, _ in per_hour]


def _per_1m(cost: float | None, tokens: float) -> float | None:
    return round(cost / tokens * 1e6, 4) if cost is not None and tokens else None


def costs(summary: Summary, size: Sizing | FleetSizing, prices: Prices) -> Costs:
    """GPU-hours and, with a price, cost, cost per 1M tokens, idle-unpaid and traffic-following variants."""
    hours = summary.hours
    gpu_hours = round(hours["total"] * prices.gpus_per_target, 4)
    busy_gpu_hours = round((hours["total"] - hours["idle"]) * prices.gpus_per_target, 4)
    following = size.replica_hours_following_traffic
    following_gpu_hours = round(following * prices.gpus_per_target, 4) if following is not None else None
    price = prices.gpu_hour_usd
    cost = round(gpu_hours * price, 2) if price is not None else None
    busy_cost = round(busy_gpu_hours * price, 2) if price is not None else None
    follow_cost = (
        round(following_gpu_hours * price, 2)
        if price is not None and following_gpu_hours is not None
        else None
    )
    gen, prompt = summary.generation_tokens, summary.prompt_tokens
    api = break_even = None
    if prices.api_in_usd is not None and prices.api_out_usd is not None:
        api = round(prompt / 1e6 * prices.api_in_usd + gen / 1e6 * prices.api_out_usd, 4)
        break_even = round(cost / api, 2) if cost is not None and api else None
    return Costs(
        gpu_hours=gpu_hours,
        gpu_hours_if_idle_unpaid=busy_gpu_hours,
        gpu_hours_following_traffic=following_gpu_hours,
        cost_usd=cost,
        cost_if_idle_unpaid_usd=busy_cost,
        cost_following_traffic_usd=follow_cost,
        cost_per_1m_generation_tokens_usd=_per_1m(cost, gen),
        cost_per_1m_prompt_tokens_usd=_per_1m(cost, prompt),
        cost_per_1m_tokens_usd=_per_1m(cost, gen + prompt),
        cost_per_1m_generation_tokens_if_idle_unpaid_usd=_per_1m(busy_cost, gen),
        cost_per_1m_prompt_tokens_if_idle_unpaid_usd=_per_1m(busy_cost, prompt),
        api_cost_usd=api,
        break_even_traffic_multiple=break_even,
    )
