"""The advisor on kvdoctor's /metrics: what its worker dropped, computed and shared, its queue, its step ledger."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kvdoctor.status.state import Snapshot


def worker_families(
    stats: Mapping[str, int], name: str, runs: str, dropped_help: str, runs_help: str, queue_help: str
) -> list[Metric]:
    """A bounded simulation worker's families: requests dropped, runs by outcome (computed, shared), queue length."""
    dropped = CounterMetricFamily(f"kvdoctor_{name}_requests_dropped", dropped_help)
    dropped.add_metric([], float(stats.get("dropped", 0)))
    done = CounterMetricFamily(f"kvdoctor_{name}_{runs}", runs_help, labels=["outcome"])
    for outcome in ("computed", "shared", "kept"):
        if outcome in stats or outcome != "kept":  # kept: the advisor's own window looked at again, not moved
            done.add_metric([outcome], float(stats.get(outcome, 0)))
    queued = GaugeMetricFamily(f"kvdoctor_{name}_queue_length", queue_help)
    queued.add_metric([], float(stats.get("queued", 0)))
    return [dropped, done, queued]


def ledger_families(snap: Snapshot) -> list[Metric]:
    """What the advisor's step ledger holds per watched target: its bins and when the oldest was last seen."""
    bins = GaugeMetricFamily(
        "kvdoctor_step_ledger_bins",
        "Bins of the target's step ledger (a day of its step-fit rows, binned by batch, context and prefill).",
        labels=["target"],
    )
    oldest = GaugeMetricFamily(
        "kvdoctor_step_ledger_oldest_timestamp_seconds",
        "When the least recently seen bin of the target's step ledger was last seen: how far back it remembers.",
        labels=["target"],
    )
    for target, held in sorted(snap.step_ledger.items()):
        if target in snap.targets:  # a ledger restored for a target no longer watched is not the operator's
            bins.add_metric([target], float(held.bins))
            oldest.add_metric([target], held.oldest_seen)
    return [bins, oldest]


def families(snap: Snapshot) -> list[Metric]:
    """Counters of the predicted effects' worker (absent values are 0: the worker has not run yet), the ledger's."""
    return ledger_families(snap) + worker_families(
        snap.whatif_stats,
        "whatif",
        "simulations",
        "Predicted-effect requests dropped, oldest first, because the what-if worker's queue was full.",
        "Predicted effects: simulated, shared with a target of the same configuration and near traffic and step "
        "times, or kept (the target's window looked at again had not moved).",
        "Predicted-effect requests waiting for the worker.",
    )
