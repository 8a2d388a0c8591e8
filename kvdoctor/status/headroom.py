"""The SLO headroom families of kvdoctor's /metrics: per target, per model's fleet, and the worker's counters.

The fleet's replicas are a separate family (`kvdoctor_fleet_replicas_needed{model_name}`), not a `target=""`
series of `kvdoctor_replicas_needed`: an autoscaler query `sum by (model_name) (kvdoctor_replicas_needed)` would
count such a series twice. A fleet series is exported only when every target of the model with SLOs has a fresh
result, since a sum missing a target would tell an autoscaler to scale down.
"""

from __future__ import annotations

from collections import defaultdict

from prometheus_client.core import GaugeMetricFamily, Metric

from kvdoctor.status.state import Snapshot
from kvdoctor.status.whatif import worker_families
from kvdoctor.whatif.headroom import EVIDENCE

LABELS = ["target", "model_name"]


def families(snap: Snapshot) -> list[Metric]:
    """Headroom, replicas needed and their timestamps from the diagnoses' evidence; the fleet's; the counters."""
    ratio = GaugeMetricFamily(
        "kvdoctor_slo_headroom_ratio",
        "The load multiple of today's traffic at which the "
        "SLO breaks (what-if simulation of today's configuration).",
        labels=[*LABELS, "slo"],
    )
    needed = GaugeMetricFamily(
        "kvdoctor_replicas_needed",
        "Replicas of today's configuration that hold every configured SLO at today's traffic.",
        labels=LABELS,
    )
    when = GaugeMetricFamily(
        "kvdoctor_slo_headroom_timestamp_seconds",
        "When the headroom and replicas needed were computed; absent series mean no trusted result.",
        labels=LABELS,
    )
    fleet_ratio = GaugeMetricFamily(
        "kvdoctor_fleet_slo_headroom_ratio",
        "The smallest SLO headroom among the model's targets.",
        labels=["model_name", "slo"],
    )
    fleet_needed = GaugeMetricFamily(
        "kvdoctor_fleet_replicas_needed",
        "Replicas needed summed over the model's targets (only when every one with SLOs has a result).",
        labels=["model_name"],
    )
    per_model: dict[str, list[dict[str, float]]] = defaultdict(list)
    complete: dict[str, bool] = defaultdict(lambda: True)
    for d in snap.diagnoses:
        t = snap.targets.get(d.target)
        has_slo = t is not None and bool(t.facts.slo_itl_p95_s or t.facts.slo_ttft_p95_s)
        ev = {k: float(v) for k, v in d.evidence.items() if isinstance(v, int | float)}
        if "slo_headroom_timestamp" not in ev:
            complete[d.model_name] &= not has_slo
            continue
        per_model[d.model_name].append(ev)
        when.add_metric([d.target, d.model_name], ev["slo_headroom_timestamp"])
        for k, v in ev.items():
            if k.startswith(EVIDENCE) and k != "slo_headroom_timestamp":
                ratio.add_metric([d.target, d.model_name, k[len(EVIDENCE) :]], v)
        if "replicas_needed" in ev:
            needed.add_metric([d.target, d.model_name], ev["replicas_needed"])
        else:
            complete[d.model_name] = False  # more than the search's bound: no sum to give
    for model, evs in per_model.items():
        if not complete[model]:
            continue
        fleet_needed.add_metric([model], sum(e["replicas_needed"] for e in evs))
        slos = {k for e in evs for k in e if k.startswith(EVIDENCE) and k != "slo_headroom_timestamp"}
        for k in sorted(slos):
            fleet_ratio.add_metric([model, k[len(EVIDENCE) :]], min(e[k] for e in evs if k in e))
    worker = worker_families(
        snap.headroom_stats,
        "headroom",
        "computations",
        "Headroom requests dropped, oldest first, because the worker's queue was full.",
        "Headroom results: simulated, or shared with a target of the same model, configuration, traffic and SLOs.",
        "Headroom requests waiting for the worker.",
    )
    return [ratio, needed, when, fleet_ratio, fleet_needed, *worker]
