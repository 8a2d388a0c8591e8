"""The report document (what `--format json` prints and the Markdown and HTML renderings show)."""

from __future__ import annotations

import time
from dataclasses import replace

from kvdoctor.report.document import (
    FleetFigures,
    HourRow,
    ModelCapacity,
    PriceEcho,
    Report,
    TargetFigures,
    Timeline,
    TimeRange,
)
from kvdoctor.report.economics import Prices, capacity, costs, sizing
from kvdoctor.report.history import History, Key, KeyHistory, ReportError
from kvdoctor.report.recommend import recommendations
from kvdoctor.report.rows import FleetSizing
from kvdoctor.report.summary import (
    covered,
    hour_tps,
    incidents,
    merge_hours,
    summarize,
    traffic_shape,
    wall_clock,
)

VERSION = 1


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(t))


def select(history: History, targets: list[str] | None) -> dict[Key, KeyHistory]:
    """The keys of the named targets (all without names); an unknown name raises ReportError listing the known."""
    known = sorted({k[0] for k in history.keys})
    if not known:
        raise ReportError(f"no kvdoctor history in the range ({history.source or 'no source'})")
    unknown = [t for t in targets or [] if t not in known]
    if unknown:
        raise ReportError(f"unknown target {unknown[0]!r}: the range holds {', '.join(known)}")
    return {k: v for k, v in sorted(history.keys.items()) if not targets or k[0] in targets}


def build_report(
    history: History, prices: Prices, targets: list[str] | None = None, *, now: float | None = None
) -> Report:
    """Everything the report says; raises ReportError on an empty range or an unknown target."""
    keys = select(history, targets)
    summaries = [summarize(kh.hours) for kh in keys.values()]
    span = [
        min(h for kh in keys.values() for h in kh.hours),
        max(h for kh in keys.values() for h in kh.hours),
    ]
    segs = [s for kh in keys.values() for s in kh.segments]
    start, end = min(s.start for s in segs), max(s.end for s in segs)
    models = sorted({k[1] for k in keys})
    caps = {m: capacity([s for k, s in zip(keys, summaries, strict=True) if k[1] == m]) for m in models}
    entries = []
    for ((target, model), kh), summary in zip(keys.items(), summaries, strict=True):
        size, _ = sizing(kh.hours, wall_clock([kh]), caps[model][0], prices.headroom)
        entries.append(
            TargetFigures(
                target=target,
                model_name=model,
                summary=summary,
                sizing=size,
                costs=costs(summary, size, prices),
                incidents=incidents(kh.segments, target, model),
                traffic=traffic_shape(kh.hours),
            )
        )
    fleet_hours = merge_hours(kh.hours.values() for kh in keys.values())
    wall = wall_clock(keys.values())
    fleet_summary = summarize(fleet_hours, wall)
    peak = quiet = following = 0.0
    hourly_needed: dict[int, int] = {}
    for m in models:
        mkeys = [kh for k, kh in keys.items() if k[1] == m]
        hours_m = merge_hours(kh.hours.values() for kh in mkeys)
        size, per_hour = sizing(hours_m, wall_clock(mkeys), caps[m][0], prices.headroom)
        peak += size.peak_replicas_needed or 0
        quiet += size.quiet_replicas_needed or 0
        following += size.replica_hours_following_traffic or 0
        for start_h, n in zip(hours_m, per_hour, strict=True):
            hourly_needed[start_h] = hourly_needed.get(start_h, 0) + (n or 0)
    known_cap = all(caps[m][0] for m in models)
    fleet_size = FleetSizing(
        peak_replicas_needed=int(peak) if known_cap else None,
        quiet_replicas_needed=int(quiet) if known_cap else None,
        replica_hours_following_traffic=round(following, 4) if known_cap else None,
    )
    fleet = FleetFigures(
        targets=len({k[0] for k in keys}),
        replicas=len(keys),
        summary=fleet_summary,
        sizing=fleet_size,
        costs=costs(fleet_summary, fleet_size, prices),
        traffic=traffic_shape(fleet_hours, wall),
    )
    doc = Report(
        version=VERSION,
        source=history.source,
        generated=_iso(now if now is not None else time.time()),
        range=TimeRange(
            start=start,
            end=end,
            start_iso=_iso(start),
            end_iso=_iso(end),
            hours=round((end - start) / 3600, 4),
            first_hour=span[0],
            last_hour=span[1],
        ),
        prices=PriceEcho(prices.gpu_hour_usd, prices.gpus_per_target, prices.api_in_usd, prices.api_out_usd),
        headroom=prices.headroom,
        capacity={m: ModelCapacity(c, b) for m, (c, b) in caps.items()},
        targets=tuple(entries),
        fleet=fleet,
        hourly=tuple(
            HourRow(
                start=h.start,
                start_iso=_iso(h.start),
                requests=round(h.requests),
                prompt_tokens=round(h.prompt_tokens),
                generation_tokens=round(h.generation_tokens),
                generation_tokens_per_s=round(hour_tps(h, wall.get(h.start)), 3),
                replicas_needed=hourly_needed.get(h.start) if known_cap else None,
                hours={c: round(s / 3600, 4) for c, s in h.seconds.items()},
                covered_s=covered(h),
            )
            for h in fleet_hours.values()
        ),
        timeline=tuple(
            Timeline(k[0], k[1], tuple((s.start, s.end, s.cls) for s in kh.segments))
            for k, kh in keys.items()
        ),
        incidents=tuple(sorted((i for e in entries for i in e.incidents), key=lambda i: i.start)),
    )
    recs, notes = recommendations(doc, prices)
    return replace(doc, recommendations=tuple(recs), notes=tuple(notes))
