"""Per (target, model) and fleet figures from hourly summaries: time per class, traffic, capacity use, incidents."""

from __future__ import annotations

import time
from collections.abc import Iterable

from kvdoctor.promql.quantile import quantile
from kvdoctor.report.document import IncidentSpan
from kvdoctor.report.figures import percent as pct
from kvdoctor.report.history import BINS, CLASSES, Hour, KeyHistory, Segment
from kvdoctor.report.rows import Closeness, Distribution, HeatCell, Summary, Traffic
from kvdoctor.verdicts import LIMITS

KV_LIMIT = 0.85  # the pack's kv_cache threshold on peak KV usage
ITL_LIMIT = 2.5  # the floor of the compute threshold (ITL p50 over light load; higher at a larger batch)
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def merge_hours(groups: Iterable[Iterable[Hour]]) -> dict[int, Hour]:
    """Hours of several keys summed per hour start (maxima of the peaks; fleet view)."""
    out: dict[int, Hour] = {}
    for hours in groups:
        for h in hours:
            m = out.setdefault(h.start, Hour(h.start))
            for cls, s in h.seconds.items():
                m.seconds[cls] = m.seconds.get(cls, 0.0) + s
            m.requests += h.requests
            m.prompt_tokens += h.prompt_tokens
            m.generation_tokens += h.generation_tokens
            for f in (
                "kv_max",
                "running_max",
                "waiting_max",
                "cap",
                "util_max",
                "itl_ratio_max",
                "gen_tps_max",
            ):
                setattr(m, f, max(getattr(m, f), getattr(h, f)))
            m.saturated_s += h.saturated_s
            m.saturated_tokens += h.saturated_tokens
            m.kv_bins = [a + b for a, b in zip(m.kv_bins, h.kv_bins, strict=True)]
            m.util_bins = [a + b for a, b in zip(m.util_bins, h.util_bins, strict=True)]
    return dict(sorted(out.items()))


def covered(h: Hour) -> float:
    """Seconds of the hour with a verdict (any class)."""
    return sum(h.seconds.values())


def hour_tps(h: Hour, wall_s: float | None = None) -> float:
    """Generation tokens per wall-clock second of the hour (wall_s: seconds any of h's keys was observed)."""
    s = covered(h) if wall_s is None else wall_s
    return h.generation_tokens / s if s else 0.0


def wall_clock(keys: Iterable[KeyHistory]) -> dict[int, float]:
    """Seconds of each hour during which at least one of the keys was observed (union of their segments)."""
    khs = list(keys)
    merged: list[list[float]] = []
    for a, b in sorted((s.start, s.end) for kh in khs for s in kh.segments):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out: dict[int, float] = {}
    for a, b in merged:
        t = a
        while t < b - 1e-9:
            hour = int(t // 3600) * 3600
            part = min(b, hour + 3600) - t
            out[hour] = out.get(hour, 0.0) + part
            t += part
    for kh in khs:  # hours whose segments were trimmed from a long daemon history: the best-covered key
        for start, h in kh.hours.items():
            if start not in out or not out[start]:
                out[start] = max(out.get(start, 0.0), covered(h))
    return out


def _distribution(bins: list[float], top: float, shown_max: float | None) -> Distribution:
    total = sum(bins)
    qs: list[float | None] = []
    for q in (0.5, 0.9, 0.99):
        acc, at = 0.0, None
        for i, s in enumerate(bins):
            acc += s
            if total and acc >= q * total - 1e-9:
                at = round(min(top, (i + 1) / BINS), 4)  # the bin's upper edge, at most the maximum
                break
        qs.append(at)
    return Distribution(qs[0], qs[1], qs[2], shown_max, tuple(round(x / 3600, 4) for x in bins))


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(t))


def incidents(segments: list[Segment], target: str, model: str) -> tuple[IncidentSpan, ...]:
    """Runs of a limit class or of a down target, with the finding that explained them and the peaks within."""
    return tuple(
        IncidentSpan(
            target=target,
            model_name=model,
            cls=s.cls,
            start=s.start,
            end=s.end,
            start_iso=_iso(s.start),
            end_iso=_iso(s.end),
            minutes=round((s.end - s.start) / 60, 1),
            finding=s.finding or s.cls,
            explanation=explain(s),
        )
        for s in segments
        if s.cls in (*LIMITS, "down")
    )


def explain(s: Segment) -> str:
    """One line naming the numbers behind a segment's finding."""
    p = s.peak
    if s.cls == "kv_cache":
        return (
            f"KV cache full: usage peaked at {pct(p.get('kv', 0))} with {p.get('waiting', 0):.0f} "
            f"waiting and {p.get('preemptions_per_s', 0):.2f} preemptions/s"
        )
    if s.cls == "batch_cap":
        return (
            f"batch cap: {p.get('running', 0):.0f} running (cap {p.get('cap', 0):.0f}) with "
            f"{p.get('waiting', 0):.0f} waiting while KV peaked at {pct(p.get('kv', 0))}"
        )
    if s.cls == "compute":
        return f"compute: inter-token latency well above its light-load baseline with {p.get('running', 0):.0f} running"
    return "target down: scrapes failed"


def summarize(hours: dict[int, Hour], wall: dict[int, float] | None = None) -> Summary:
    """Hours per class, traffic, and capacity-use figures over a set of hours (one key, or a fleet merged)."""
    seconds = {c: sum(h.seconds.get(c, 0.0) for h in hours.values()) for c in CLASSES}
    total = sum(seconds.values())
    gen = sum(h.generation_tokens for h in hours.values())
    tps = [hour_tps(h, wall.get(h.start) if wall else None) for h in hours.values()]
    wall_total = sum(wall.get(h.start, 0.0) for h in hours.values()) if wall else total
    mean_tps = gen / wall_total if wall_total else 0.0
    busiest = max(hours.values(), key=lambda h: h.generation_tokens, default=None)
    kv_bins = [sum(h.kv_bins[i] for h in hours.values()) for i in range(BINS)]
    util_bins = [sum(h.util_bins[i] for h in hours.values()) for i in range(BINS)]
    saturated_s = sum(h.saturated_s for h in hours.values())
    kv_max = max((h.kv_max for h in hours.values()), default=0.0)
    util_max = max((h.util_max for h in hours.values()), default=0.0)
    empty = sum(1 for h in hours.values() if not h.requests and not h.generation_tokens)
    return Summary(
        hours={**{c: round(s / 3600, 4) for c, s in seconds.items()}, "total": round(total / 3600, 4)},
        share={c: round(s / total, 4) if total else 0.0 for c, s in seconds.items()},
        idle_share=round(seconds["idle"] / total, 4) if total else 0.0,
        requests=round(sum(h.requests for h in hours.values())),
        prompt_tokens=round(sum(h.prompt_tokens for h in hours.values())),
        generation_tokens=round(gen),
        generation_tokens_per_s=round(mean_tps, 3),
        peak_hour_generation_tokens_per_s=round(max(tps, default=0.0), 3),
        peak_to_mean=round(max(tps) / mean_tps, 2) if tps and mean_tps else None,
        hours_without_traffic_share=round(empty / len(hours), 4) if hours else 0.0,
        kv_usage=_distribution(kv_bins, kv_max, round(kv_max, 4)),
        # no known cap (no cache_config_info, no plateau) is "unknown", not 0 % of one
        running_over_cap=_distribution(
            util_bins, util_max, round(util_max, 4) if any(h.cap for h in hours.values()) else None
        ),
        busiest_hour=_closeness(busiest, wall) if busiest and busiest.generation_tokens else None,
        sustained_generation_tokens_per_s=(
            round(sum(h.saturated_tokens for h in hours.values()) / saturated_s, 3) if saturated_s else None
        ),
        max_generation_tokens_per_s=round(max((h.gen_tps_max for h in hours.values()), default=0.0), 3),
    )


def _closeness(h: Hour, wall: dict[int, float] | None) -> Closeness:
    """How near the busiest hour came to each limit (1.0 = at the pack's threshold)."""
    return Closeness(
        start=h.start,
        start_iso=_iso(h.start),
        generation_tokens_per_s=round(hour_tps(h, wall.get(h.start) if wall else None), 3),
        kv_usage_max=round(h.kv_max, 4),
        kv_cache_closeness=round(h.kv_max / KV_LIMIT, 3),
        running_max=h.running_max,
        cap=h.cap or None,
        batch_cap_closeness=round(h.util_max, 3) if h.cap else None,
        itl_ratio_max=round(h.itl_ratio_max, 3) or None,
        compute_closeness=round(h.itl_ratio_max / ITL_LIMIT, 3) if h.itl_ratio_max else None,
        waiting_max=h.waiting_max,
        limit_minutes={c: round(h.seconds.get(c, 0.0) / 60, 1) for c in LIMITS},
    )


def traffic_shape(hours: dict[int, Hour], wall: dict[int, float] | None = None) -> Traffic:
    """Fleet tokens/s by hour of day, by day of week, and the day × hour heat map (means over observed hours)."""
    by_hod: dict[int, list[float]] = {}
    by_dow: dict[int, list[float]] = {}
    cells: dict[tuple[int, int], list[float]] = {}
    for h in hours.values():
        tm = time.gmtime(h.start)
        if not covered(h):
            continue
        v = hour_tps(h, wall.get(h.start) if wall else None)  # tokens per wall-clock second
        by_hod.setdefault(tm.tm_hour, []).append(v)
        by_dow.setdefault(tm.tm_wday, []).append(v)
        cells.setdefault((tm.tm_wday, tm.tm_hour), []).append(v)

    def mean(vs: list[float]) -> float:
        return round(sum(vs) / len(vs), 3)

    return Traffic(
        hour_of_day=tuple(mean(by_hod[i]) if i in by_hod else None for i in range(24)),
        day_of_week={DAYS[i]: mean(by_dow[i]) if i in by_dow else None for i in range(7)},
        heatmap=tuple(HeatCell(DAYS[d], hr, mean(v)) for (d, hr), v in sorted(cells.items())),
        median_hour_generation_tokens_per_s=(
            round(quantile(0.5, [v for vs in by_hod.values() for v in vs]), 3) if by_hod else None
        ),
    )
