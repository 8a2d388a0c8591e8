"""The Prometheus source inside `kvdoctor serve`: one cycle is a fixed set of queries, then the shared sinks."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from kvdoctor.config import Config
from kvdoctor.config.schema import PrometheusSource
from kvdoctor.diagnosis.target import TargetFacts
from kvdoctor.pipeline import Cycle, Pipeline
from kvdoctor.sources.client import PromClient, SourceError
from kvdoctor.sources.prometheus import PrometheusEvaluator
from kvdoctor.status.state import DaemonState
from kvdoctor.targets import target_facts

log = logging.getLogger("kvdoctor")


class SourceHost(Protocol):
    """What the Prometheus source needs of the daemon that runs it."""

    @property
    def cfg(self) -> Config:
        """The current config (a reload replaces it)."""
        ...

    @property
    def pipeline(self) -> Pipeline:
        """Alert and classification state across cycles."""
        ...

    @property
    def state(self) -> DaemonState:
        """Where the targets Prometheus reports are published."""
        ...

    @property
    def registry(self) -> CollectorRegistry:
        """kvdoctor's own /metrics, where the source adds its families."""
        ...


@dataclass(frozen=True)
class SourceStatus:
    """What the Prometheus source did last: its URL, whether the last cycle answered, its counts."""

    url: str
    ok: bool | None  # None before the first cycle
    failures_total: int
    last_error: str
    queries_total: int
    last_cycle_queries: int


class DaemonSource:
    """Owns the evaluator for a Daemon; reads the daemon's current config each cycle (so reloads apply)."""

    def __init__(self, daemon: SourceHost) -> None:
        self.daemon = daemon
        self._config: PrometheusSource | None = None
        self.evaluator: PrometheusEvaluator | None = None
        self.failures_total = 0
        self.ok: bool | None = None
        self.last_error = ""
        self._lock = threading.Lock()
        self._errors: dict[str, int] = {}
        self._client()
        daemon.registry.register(SourceCollector(self))

    def _client(self) -> PrometheusEvaluator:
        prom = self.daemon.cfg.prometheus
        if prom is None:
            raise SourceError("source `prometheus` needs prometheus.url (or --prometheus-url)")
        if self.evaluator is None or prom != self._config:
            self.evaluator = PrometheusEvaluator(PromClient(prom.url, prom.http), self.daemon.pipeline)
            self._config = prom
        self.evaluator.pipeline = self.daemon.pipeline
        return self.evaluator

    @property
    def queries_total(self) -> int:
        """Queries sent so far (by the current client)."""
        return self.evaluator.client.queries_total if self.evaluator else 0

    def cycle(self, t: float) -> Cycle | None:
        """One evaluation at t; None (logged, counted) when the source fails: the last diagnoses stay."""
        try:
            evaluator = self._client()
            cycle = evaluator.evaluate(t, self._facts)
        except SourceError as exc:
            with self._lock:
                self.failures_total += 1
                first = self.ok is not False or self.last_error != str(exc)
                self.ok, self.last_error = False, str(exc)
            log.log(logging.ERROR if first else logging.DEBUG, "prometheus source: cycle failed: %s", exc)
            return None
        if self.ok is False:
            log.info("prometheus source: answering again")
        with self._lock:
            self.ok, self.last_error = True, ""
        self._publish_targets()
        return cycle

    def _facts(self, name: str) -> TargetFacts:
        spec = next((s for s in self.daemon.cfg.targets if s.name == name), None)
        return target_facts(spec) if spec is not None else TargetFacts()

    def _publish_targets(self) -> None:
        state, targets = self.daemon.state, self.daemon.pipeline.targets
        for gone in set(state.snapshot().targets) - set(targets):
            state.drop_target(gone)
        for target in targets.values():
            state.set_target(target)

    def status(self) -> SourceStatus:
        """What the source did last, for /metrics."""
        with self._lock:
            return SourceStatus(
                url=self._config.url if self._config else "",
                ok=self.ok,
                failures_total=self.failures_total,
                last_error=self.last_error,
                queries_total=self.queries_total,
                last_cycle_queries=self.evaluator.last_cycle_queries if self.evaluator else 0,
            )


class SourceCollector:
    """kvdoctor_source_* families, and the config facts the rule pack reads back from Prometheus."""

    def __init__(self, source: DaemonSource) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        """Build the families from the source's current status and the daemon's config."""
        st = self.source.status()
        ev = self.source.evaluator
        url = ev.client.base if ev else ""
        info = GaugeMetricFamily(
            "kvdoctor_source_info", "Where kvdoctor reads vLLM series.", labels=["source", "url"]
        )
        info.add_metric(["prometheus", url], 1.0)
        up = GaugeMetricFamily("kvdoctor_source_up", "1 if every query of the last cycle succeeded.")
        if st.ok is not None:
            up.add_metric([], 1.0 if st.ok else 0.0)
        total = CounterMetricFamily("kvdoctor_source_queries", "Queries sent to the Prometheus source.")
        total.add_metric([], float(st.queries_total))
        last = GaugeMetricFamily(
            "kvdoctor_source_cycle_queries",
            "Queries in the last cycle (depends on the rules, not the fleet size).",
        )
        last.add_metric([], float(st.last_cycle_queries))
        fails = CounterMetricFamily("kvdoctor_source_cycle_failures", "Cycles that failed on a source error.")
        fails.add_metric([], float(st.failures_total))
        yield from (info, up, total, last, fails)
        yield from _facts(self.source.daemon.cfg.targets, self.source.daemon.cfg.idle_after_s)


def _facts(specs: list[Any], idle_after_s: float) -> Iterator[Metric]:
    # Prometheus scraping kvdoctor gets these back for kvdoctor:batch_cap:configured, the SLO rules and idle.
    mns = GaugeMetricFamily(
        "kvdoctor_target_max_num_seqs", "--max-num-seqs told to kvdoctor for the target.", labels=["target"]
    )
    slo = GaugeMetricFamily(
        "kvdoctor_target_slo_seconds",
        "Latency SLOs told to kvdoctor for the target.",
        labels=["target", "slo"],
    )
    idle = GaugeMetricFamily(
        "kvdoctor_target_idle_after_seconds",
        "How long a target must go without a request or a token to be called idle.",
        labels=["target"],
    )
    for s in specs:
        idle.add_metric([s.name], idle_after_s)
        if s.max_num_seqs:
            mns.add_metric([s.name], float(s.max_num_seqs))
        for name, v in (("itl_p95", s.slo_itl_p95_s), ("ttft_p95", s.slo_ttft_p95_s)):
            if v:
                slo.add_metric([s.name, name], float(v))
    yield from (mns, slo, idle)
