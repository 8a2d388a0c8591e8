"""What the plan's configuration would have cost over the same traffic: the replica-hours that hold the SLOs.

Per target, `kvdoctor plan`'s search on the recording's last steady stretch picks the cheapest flags; then, hour by
hour of what the target served, the fewest replicas of those flags that hold every SLO at that hour's request rate
(as a multiple of the stretch's), for the hours the target was watched. An hour without traffic keeps one replica:
something has to be there when the next request comes.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from kvdoctor.report.document import Planned, PlannedHour, PlannedTarget, Report, TargetFigures
from kvdoctor.report.economics import Prices
from kvdoctor.whatif.plan import Planner
from kvdoctor.whatif.predict import learn
from kvdoctor.whatif.sources import default_window, history_before, recording_snaps
from kvdoctor.whatif.window import Snap, delta
from kvdoctor.whatif.workload import WindowError


def _hours(snaps: list[Snap]) -> dict[int, tuple[float, float]]:
    """UTC hour → (seconds watched in it, requests finished per second in it)."""
    by: dict[int, list[Snap]] = defaultdict(list)
    for s in snaps:
        by[int(s.t // 3600) * 3600].append(s)
    out = {}
    for h, ss in sorted(by.items()):
        span = ss[-1].t - ss[0].t
        done = sum(delta(a, b, "vllm:request_success_total") for a, b in itertools.pairwise(ss))
        out[h] = (span, done / span if span > 0 else 0.0)
    return out


def planned_target(
    target: TargetFigures, paths: list[Path], slos: dict[str, float], prices: Prices
) -> PlannedTarget:
    """One target's plan and the replica-hours it needs hour by hour; raises WindowError when it cannot learn."""
    snaps = sorted((s for p in paths for s in recording_snaps(p)), key=lambda s: s.t)
    lo, hi = default_window(snaps, busy_period=True)
    history, window = history_before(snaps, lo, hi)
    planner = Planner(
        learn(history, window),
        slos,
        gpu_hour_usd=prices.gpu_hour_usd,
        gpus_per_replica=prices.gpus_per_target,
    )
    best, _ = planner.search(1.0)
    feasible = best is not None
    changes = best.changes if best is not None else {}
    rate = planner.basis.measured.requests_per_s
    hourly, replica_s = [], 0.0
    for start, (watched_s, hour_rate) in _hours(snaps).items():
        load = hour_rate / rate if rate > 0 else 0.0
        need = 1
        if load > 0:
            found = planner.fewest_replicas(changes, float(f"{load:.2g}"))
            need = found.replicas if found is not None else 0
            feasible = feasible and found is not None
        hourly.append(PlannedHour(start, round(load, 3), need or None, round(watched_s / 3600, 4)))
        replica_s += (need or math.nan) * watched_s
    replica_h = round(replica_s / 3600, 4) if math.isfinite(replica_s) else None
    gpu_h = round(replica_h * prices.gpus_per_target, 4) if replica_h is not None else None
    cost = round(gpu_h * prices.gpu_hour_usd, 2) if gpu_h is not None and prices.gpu_hour_usd else None
    return PlannedTarget(
        target.target,
        target.model_name,
        target.costs.gpu_hours,
        target.costs.cost_usd,
        changes=dict(changes),
        feasible=feasible,
        replica_hours=replica_h,
        gpu_hours=gpu_h,
        cost_usd=cost,
        hourly=tuple(hourly),
        simulations=planner.simulations,
    )


def planned(doc: Report, recordings: dict[str, list[Path]], slos: dict[str, float], prices: Prices) -> Report:
    """The report with `planned`: per target and for the fleet, next to what was paid."""
    rows = []
    for e in doc.targets:
        paths = recordings.get(e.target)
        if not paths:
            continue
        try:
            rows.append(planned_target(e, paths, slos, prices))
        except WindowError as exc:
            why = f"no plan: {exc}"
            rows.append(PlannedTarget(e.target, e.model_name, e.costs.gpu_hours, e.costs.cost_usd, why=why))

    def total(values: list[float | None]) -> float | None:
        return round(sum(v for v in values if v is not None), 4) if values and None not in values else None

    return replace(
        doc,
        planned=Planned(
            slos=dict(slos),
            targets=tuple(rows),
            gpu_hours=total([r.gpu_hours for r in rows]),
            cost_usd=total([r.cost_usd for r in rows]),
            paid_gpu_hours=total([r.paid_gpu_hours for r in rows]),
            paid_cost_usd=total([r.paid_cost_usd for r in rows]),
        ),
    )
