"""kvdoctor's own /metrics: a Collector that builds fresh families from the daemon state on every scrape."""

from __future__ import annotations

import platform
from collections.abc import Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from kvdoctor import __version__
from kvdoctor.signals import SIGNALS
from kvdoctor.status.headroom import families as headroom_families
from kvdoctor.status.health import FileHealth
from kvdoctor.status.state import DaemonState, Snapshot
from kvdoctor.status.whatif import families as whatif_families
from kvdoctor.verdicts import VERDICTS


def gauges() -> dict[str, tuple[str, str]]:
    """Evidence key -> (kvdoctor_* gauge name, help), for the signals kvdoctor.signals exposes."""
    return {s.key: (s.metric, s.help) for s in SIGNALS.values() if s.metric}


CODE_HELP = "Current bottleneck as a number for state timelines: " + ", ".join(
    f"{i} {b}" for i, b in enumerate(VERDICTS)
)


PREDICTION_ERROR = "prediction_error_"  # evidence keys of the what-if follow-up finding


class DiagnosisCollector:
    """Yields kvdoctor_* families from a DaemonState snapshot (fresh each collect, no lingering series)."""

    def __init__(self, state: DaemonState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        """Build every family from the current snapshot."""
        snap = self.state.snapshot()
        one_hot = GaugeMetricFamily(
            "kvdoctor_bottleneck",
            "Current bottleneck per target and model (one-hot).",
            labels=["target", "model_name", "bottleneck"],
        )
        code = GaugeMetricFamily("kvdoctor_bottleneck_code", CODE_HELP, labels=["target", "model_name"])
        since = GaugeMetricFamily(
            "kvdoctor_bottleneck_since_timestamp_seconds",
            "When the current bottleneck started.",
            labels=["target", "model_name"],
        )
        finding = GaugeMetricFamily(
            "kvdoctor_finding",
            "Findings that hold now (1).",
            labels=["target", "model_name", "finding", "severity"],
        )
        fams = {k: GaugeMetricFamily(n, h, labels=["target", "model_name"]) for k, (n, h) in gauges().items()}
        error = GaugeMetricFamily(
            "kvdoctor_prediction_error_ratio",
            "After a restart with a new configuration: "
            "|predicted - measured| / measured, per quantity, of the what-if prediction for "
            "that change.",
            labels=["target", "model_name", "quantity"],
        )
        for d in snap.diagnoses:
            for f in d.findings:
                for k, v in f.evidence.items():
                    if k.startswith(PREDICTION_ERROR) and isinstance(v, int | float):
                        error.add_metric([d.target, d.model_name, k[len(PREDICTION_ERROR) :]], float(v))
            for b in VERDICTS:
                one_hot.add_metric([d.target, d.model_name, b], 1.0 if d.verdict == b else 0.0)
            code.add_metric([d.target, d.model_name], float(VERDICTS.index(d.verdict)))
            since.add_metric([d.target, d.model_name], d.since)
            for f in d.findings:
                finding.add_metric([d.target, d.model_name, f.name, f.severity], 1.0)
            evidence = dict(d.evidence)
            for f in d.findings:
                evidence.update({k: v for k, v in f.evidence.items() if k not in evidence})
            for key, fam in fams.items():
                value = evidence.get(key)
                if isinstance(value, int | float):
                    fam.add_metric([d.target, d.model_name], float(value))
        yield from (one_hot, code, since, finding, error, *fams.values())
        yield from self._targets(snap)
        yield from self._self(snap)
        yield from storage_families(snap.storage)
        yield from headroom_families(snap)
        yield from whatif_families(snap)

    def _targets(self, snap: Snapshot) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "kvdoctor_target_up", "1 if the last scrape of the vLLM target succeeded.", labels=["target"]
        )
        dur = GaugeMetricFamily(
            "kvdoctor_target_scrape_duration_seconds", "Duration of the last scrape.", labels=["target"]
        )
        last = GaugeMetricFamily(
            "kvdoctor_target_last_success_timestamp_seconds",
            "Unix time of the last successful scrape.",
            labels=["target"],
        )
        errs = CounterMetricFamily(
            "kvdoctor_target_scrape_errors", "Failed scrapes of the target.", labels=["target"]
        )
        info = GaugeMetricFamily(
            "kvdoctor_target_info",
            "Target facts: its URL (no credentials) and configured labels.",
            labels=["target", "url"],
        )
        samples = GaugeMetricFamily(
            "kvdoctor_target_scrape_samples",
            "Samples in the last scrape (0 when it failed or was refused).",
            labels=["target"],
        )
        refused = CounterMetricFamily(
            "kvdoctor_target_scrape_limit_exceeded",
            "Scrapes refused whole for going over a limit (sample_limit, label_limit, "
            "label_value_length_limit).",
            labels=["target", "limit"],
        )
        invalid = CounterMetricFamily(
            "kvdoctor_target_invalid_values",
            "Values of the target left out of every computation but PromQL (NaN, ±Inf, "
            "negative, absurd), per metric.",
            labels=["target", "metric"],
        )
        steps = CounterMetricFamily(
            "kvdoctor_target_step_failures",
            "Per-target steps of a cycle that failed alone (classify, advise, history, whatif).",
            labels=["target", "step"],
        )
        for name, t in sorted(snap.targets.items()):
            for metric, n in sorted(t.invalid_values_total.items()):
                invalid.add_metric([name, metric], float(n))
            for step, n in sorted(t.step_failures_total.items()):
                steps.add_metric([name, step], float(n))
            if t.samples is not None:
                samples.add_metric([name], float(t.samples))
            for limit, n in sorted(t.limit_exceeded_total.items()):
                refused.add_metric([name, limit], float(n))
            up.add_metric([name], 1.0 if t.up else 0.0)
            if t.last_scrape_duration_s is not None:
                dur.add_metric([name], t.last_scrape_duration_s)
            if t.last_success_ts is not None:
                last.add_metric([name], t.last_success_ts)
            errs.add_metric([name], float(t.errors_total))
            info.add_metric([name, t.url], 1.0)
        yield from (up, dur, last, errs, info, samples, refused, invalid, steps)

    def _self(self, snap: Snapshot) -> Iterator[Metric]:
        ev = GaugeMetricFamily(
            "kvdoctor_evaluation_timestamp_seconds", "Unix time of the last rule evaluation."
        )
        if snap.evaluation_ts is not None:
            ev.add_metric([], snap.evaluation_ts)
        evd = GaugeMetricFamily(
            "kvdoctor_evaluation_duration_seconds", "Duration of the last evaluation cycle."
        )
        if snap.evaluation_duration_s is not None:
            evd.add_metric([], snap.evaluation_duration_s)
        cycle = GaugeMetricFamily(
            "kvdoctor_cycle_duration_seconds",
            "Duration of the last cycle (ingest, rules, classification, sinks); it must stay under the interval.",
        )
        if snap.cycle_duration_s is not None:
            cycle.add_metric([], snap.cycle_duration_s)
        interval = GaugeMetricFamily("kvdoctor_cycle_interval_seconds", "The interval cycles run at.")
        if snap.interval_s is not None:
            interval.add_metric([], snap.interval_s)
        fails = CounterMetricFamily(
            "kvdoctor_rule_evaluation_failures", "Rule evaluations that failed, per rule.", labels=["rule"]
        )
        for rule, n in sorted(snap.rule_failures.items()):
            fails.add_metric([rule], float(n))
        reload_ok = GaugeMetricFamily(
            "kvdoctor_config_last_reload_successful", "1 if the last config/rules reload worked."
        )
        reload_ok.add_metric([], 1.0 if snap.reload_ok else 0.0)
        reload_ts = GaugeMetricFamily(
            "kvdoctor_config_last_reload_success_timestamp_seconds", "Last successful reload."
        )
        if snap.reload_success_ts is not None:
            reload_ts.add_metric([], snap.reload_success_ts)
        reloads = CounterMetricFamily(
            "kvdoctor_config_reloads", "Reload attempts (SIGHUP, /-/reload) by outcome.", labels=["outcome"]
        )
        for outcome in ("success", "failure"):
            reloads.add_metric([outcome], float(snap.reloads_total.get(outcome, 0)))
        build = GaugeMetricFamily(
            "kvdoctor_build_info", "kvdoctor build information.", labels=["version", "python_version"]
        )
        build.add_metric([__version__, platform.python_version()], 1.0)
        sched = CounterMetricFamily(
            "kvdoctor_scheduler_events",
            "Cycle events: missed (interval slots an overlong cycle ate), error (a cycle that failed).",
            labels=["event"],
        )
        for event in ("error", "missed"):
            sched.add_metric([event], float(snap.scheduler_events.get(event, 0)))
        yield from (ev, evd, cycle, interval, fails, reload_ok, reload_ts, reloads, build, sched)


def storage_families(storage: Mapping[str, FileHealth]) -> Iterator[Metric]:
    """Failed writes per file kvdoctor keeps (state, outbox), and outbox items put aside as unreadable."""
    fails = CounterMetricFamily(
        "kvdoctor_state_write_failures",
        "Writes of kvdoctor's own files that the disk refused (retried with backoff; the daemon goes on).",
        labels=["file"],
    )
    quarantined = CounterMetricFamily(
        "kvdoctor_outbox_quarantined", "Outbox items put aside because no sink can read or render them."
    )
    for name, health in sorted(storage.items()):
        fails.add_metric([name], float(health.write_failures_total))
    outbox = storage.get("outbox")
    quarantined.add_metric([], float(outbox.quarantined_total or 0) if outbox else 0.0)
    yield from (fails, quarantined)


def make_registry(state: DaemonState) -> CollectorRegistry:
    """A private registry: kvdoctor's collector plus the process_* metrics every exporter has."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(DiagnosisCollector(state))
    # resident memory, CPU seconds, open fds…: what watching the watcher needs (read from /proc on Linux)
    ProcessCollector(registry=reg)
    return reg
