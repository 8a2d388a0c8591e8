"""A row of the report as values: one (target, model)'s or the fleet's summary, sizing, costs and traffic."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Distribution:
    """Hours spent in each 5 %-wide bin of a 0-1 figure (the last holds everything from 95 %), and its quantiles."""

    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None  # None: no cap known (running over cap), not 0 % of one
    hours_by_bin: tuple[float, ...]


@dataclass(frozen=True)
class Closeness:
    """How near the busiest hour came to each limit (1.0 = at the pack's threshold)."""

    start: int
    start_iso: str
    generation_tokens_per_s: float
    kv_usage_max: float
    kv_cache_closeness: float
    running_max: float
    cap: float | None
    batch_cap_closeness: float | None
    itl_ratio_max: float | None
    compute_closeness: float | None
    waiting_max: float
    limit_minutes: dict[str, float]


@dataclass(frozen=True)
class Summary:
    """Hours per class, traffic and capacity-use figures over a set of hours (one key, or the fleet merged)."""

    hours: dict[str, float]  # per class, and "total"
    share: dict[str, float]
    idle_share: float
    requests: int
    prompt_tokens: int
    generation_tokens: int
    generation_tokens_per_s: float
    peak_hour_generation_tokens_per_s: float
    peak_to_mean: float | None
    hours_without_traffic_share: float
    kv_usage: Distribution
    running_over_cap: Distribution
    busiest_hour: Closeness | None
    sustained_generation_tokens_per_s: float | None
    max_generation_tokens_per_s: float


@dataclass(frozen=True)
class Sizing:
    """Replicas one (target, model) needed at its peak hour and in quiet hours, and following its traffic."""

    peak_replicas_needed: int | None
    peak_hour_start: int | None
    quiet_replicas_needed: int | None
    quiet_hour_generation_tokens_per_s: float
    replica_hours_following_traffic: float | None


@dataclass(frozen=True)
class FleetSizing:
    """The fleet's replicas: each model's sizing summed."""

    peak_replicas_needed: int | None
    quiet_replicas_needed: int | None
    replica_hours_following_traffic: float | None


@dataclass(frozen=True)
class Costs:
    """GPU-hours and, with a price, cost, cost per 1M tokens, and the idle-unpaid and traffic-following variants."""

    gpu_hours: float
    gpu_hours_if_idle_unpaid: float
    gpu_hours_following_traffic: float | None
    cost_usd: float | None
    cost_if_idle_unpaid_usd: float | None
    cost_following_traffic_usd: float | None
    cost_per_1m_generation_tokens_usd: float | None
    cost_per_1m_prompt_tokens_usd: float | None
    cost_per_1m_tokens_usd: float | None
    cost_per_1m_generation_tokens_if_idle_unpaid_usd: float | None
    cost_per_1m_prompt_tokens_if_idle_unpaid_usd: float | None
    api_cost_usd: float | None = None
    break_even_traffic_multiple: float | None = None  # traffic × this = the API bill equals the GPU bill


@dataclass(frozen=True)
class HeatCell:
    """Mean generation tokens/s of one (day of week, hour of day)."""

    day: str
    hour: int
    generation_tokens_per_s: float


@dataclass(frozen=True)
class Traffic:
    """Tokens/s by hour of day, by day of week, and the day × hour heat map (means over observed hours)."""

    hour_of_day: tuple[float | None, ...]
    day_of_week: dict[str, float | None]
    heatmap: tuple[HeatCell, ...]
    median_hour_generation_tokens_per_s: float | None
