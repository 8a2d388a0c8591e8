"""The advisor's simulation worker on kvdoctor's /metrics: what it dropped, computed and shared, and its queue."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kvdoctor.status.state import Snapshot


def families(snap: Snapshot) -> list[Metric]:
    """Counters of the predicted effects' worker (absent values are 0: the worker has not run yet)."""
    stats = snap.whatif_stats
    dropped = CounterMetricFamily(
        "kvdoctor_whatif_requests_dropped",
        "Predicted-effect requests dropped, oldest first, because the what-if worker's queue was full.",
    )
    dropped.add_metric([], float(stats.get("dropped", 0)))
    runs = CounterMetricFamily(
        "kvdoctor_whatif_simulations",
        "Predicted effects: simulated, or shared with a target of the same configuration, traffic and step times.",
        labels=["outcome"],
    )
    for outcome in ("computed", "shared"):
        runs.add_metric([outcome], float(stats.get(outcome, 0)))
    queued = GaugeMetricFamily(
        "kvdoctor_whatif_queue_length", "Predicted-effect requests waiting for the worker."
    )
    queued.add_metric([], float(stats.get("queued", 0)))
    return [dropped, runs, queued]
