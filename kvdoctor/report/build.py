"""The report document (what `--format json` prints and the Markdown and HTML renderings show)."""

from __future__ import annotations

import time
from typing import Any

from kvdoctor.report.economics import Prices, capacity, costs, sizing
from kvdoctor.report.history import History, Key, ReportError
from kvdoctor.report.recommend import recommendations
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


def select(history: History, targets: list[str] | None) -> dict[Key, Any]:
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
) -> dict[str, Any]:
    """Everything the report says, as JSON-ready data; raises ReportError on an empty range or no traffic."""
    keys = select(history, targets)
    entries = []
    for (target, model), kh in keys.items():
        entries.append({"target": target, "model_name": model, **summarize(kh.hours)})
    span = [
        min(h for kh in keys.values() for h in kh.hours),
        max(h for kh in keys.values() for h in kh.hours),
    ]
    segs = [s for kh in keys.values() for s in kh.segments]
    start, end = min(s.start for s in segs), max(s.end for s in segs)
    if not any(e["requests"] or e["generation_tokens"] for e in entries):
        raise ReportError(
            f"no traffic between {_iso(start)} and {_iso(end)} on {', '.join(sorted({k[0] for k in keys}))}: "
            "no request finished and no token was generated, so there is nothing to put per token "
            "(widen the range, or check that these are the serving targets)"
        )
    models = sorted({k[1] for k in keys})
    caps = {m: capacity([e for e in entries if e["model_name"] == m]) for m in models}
    for e, kh in zip(entries, keys.values(), strict=True):
        cap = caps[e["model_name"]][0]
        size = sizing(kh.hours, wall_clock([kh]), cap, prices.headroom)
        e.update({k: v for k, v in size.items() if k != "hourly_replicas_needed"})
        e.update(costs(e, size, prices))
        e["incidents"] = incidents(kh.segments, e["target"], e["model_name"])
        e["traffic"] = traffic_shape(kh.hours)
    fleet_hours = merge_hours(kh.hours.values() for kh in keys.values())
    wall = wall_clock(keys.values())
    fleet = {"targets": len({k[0] for k in keys}), "replicas": len(keys), **summarize(fleet_hours, wall)}
    peak = quiet = following = 0.0
    hourly_needed: dict[int, int] = {}
    for m in models:
        mkeys = [kh for k, kh in keys.items() if k[1] == m]
        size = sizing(
            merge_hours(kh.hours.values() for kh in mkeys), wall_clock(mkeys), caps[m][0], prices.headroom
        )
        peak += size["peak_replicas_needed"] or 0
        quiet += size["quiet_replicas_needed"] or 0
        following += size["replica_hours_following_traffic"] or 0
        hours_m = merge_hours(kh.hours.values() for kh in mkeys)
        for start_h, n in zip(hours_m, size["hourly_replicas_needed"], strict=True):
            hourly_needed[start_h] = hourly_needed.get(start_h, 0) + (n or 0)
    known_cap = all(caps[m][0] for m in models)
    fleet_size = {
        "peak_replicas_needed": int(peak) if known_cap else None,
        "quiet_replicas_needed": int(quiet) if known_cap else None,
        "replica_hours_following_traffic": round(following, 4) if known_cap else None,
    }
    fleet.update(fleet_size)
    fleet.update(costs(fleet, fleet_size, prices))
    fleet["traffic"] = traffic_shape(fleet_hours, wall)
    all_incidents = sorted((i for e in entries for i in e["incidents"]), key=lambda i: i["start"])
    doc: dict[str, Any] = {
        "kvdoctor_report": VERSION,
        "source": history.source,
        "generated": _iso(now if now is not None else time.time()),
        "range": {
            "start": start,
            "end": end,
            "start_iso": _iso(start),
            "end_iso": _iso(end),
            "hours": round((end - start) / 3600, 4),
            "first_hour": span[0],
            "last_hour": span[1],
        },
        "prices": {
            "gpu_hour_usd": prices.gpu_hour_usd,
            "gpus_per_target": prices.gpus_per_target,
            "api_price_in_usd_per_1m": prices.api_in_usd,
            "api_price_out_usd_per_1m": prices.api_out_usd,
        },
        "headroom": prices.headroom,
        "capacity": {m: {"generation_tokens_per_s_per_replica": c, "basis": b} for m, (c, b) in caps.items()},
        "targets": entries,
        "fleet": fleet,
        "hourly": [
            {
                "start": h.start,
                "start_iso": _iso(h.start),
                "requests": round(h.requests),
                "prompt_tokens": round(h.prompt_tokens),
                "generation_tokens": round(h.generation_tokens),
                "generation_tokens_per_s": round(hour_tps(h, wall.get(h.start)), 3),
                "replicas_needed": hourly_needed.get(h.start) if known_cap else None,
                "hours": {c: round(s / 3600, 4) for c, s in h.seconds.items()},
                "covered_s": covered(h),
            }
            for h in fleet_hours.values()
        ],
        "timeline": [
            {"target": k[0], "model_name": k[1], "segments": [[s.start, s.end, s.cls] for s in kh.segments]}
            for k, kh in keys.items()
        ],
        "incidents": all_incidents,
    }
    doc["recommendations"], doc["notes"] = recommendations(doc, prices)
    return doc
