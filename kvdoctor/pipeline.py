"""The pipeline every entry point shares: scrapes in, store, rule pack, classification, diagnoses out."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kvdoctor import vllm_metrics
from kvdoctor.acyclic import acyclic
from kvdoctor.capacity.live import B125, CACHE_INFO, LORA_INFO, LiveCapacity, live_capacity
from kvdoctor.diagnosis.classify import Classifier
from kvdoctor.diagnosis.evidence import Key, collect
from kvdoctor.diagnosis.target import Target, TargetFacts
from kvdoctor.diagnosis.validity import drop_invalid_evidence, split_samples
from kvdoctor.ingest.parse import Keep, ParseError, Parser
from kvdoctor.promql.values import forget_groupings
from kvdoctor.rules.evaluate import Evaluation, RuleEngine
from kvdoctor.rules.loader import RuleGroup
from kvdoctor.samples import Sample, Scrape
from kvdoctor.signals import recorded
from kvdoctor.store import Store
from kvdoctor.verdicts import DEFAULT_RUNBOOK_PAGE, Diagnosis, runbook_link
from kvdoctor.whatif.advisor import Advisor
from kvdoctor.whatif.headroom import HeadroomWorker

# Families a diagnosis needs (label → the names it has carried across vLLM versions), from kvdoctor.vllm_metrics
EXPECTED = vllm_metrics.EXPECTED
IDLE_AFTER_S = 30.0  # the pack's default too: idle is this long without a request or a token
_CAPACITY_NAMES = {CACHE_INFO, LORA_INFO, *B125}  # the samples live_capacity reads
# What a scrape is parsed for besides the store: the inventory, live capacity, the what-if's snapshots (every vLLM
# family, and the process start time) and the invalid values noted per vLLM family.
_READ_BESIDES = frozenset(
    {"process_start_time_seconds", *_CAPACITY_NAMES, *(a for alts in EXPECTED.values() for a in alts)}
)
# per-target steps of an evaluation that fail alone (the report history's is the daemon's)
STEPS = ("classify", "advise", "whatif")
log = logging.getLogger("kvdoctor")


@dataclass
class Cycle:
    """One evaluation: its diagnoses and the rule engine's outcome."""

    t: float
    diagnoses: list[Diagnosis]
    evaluation: Evaluation


class Pipeline:
    """Holds the store, the rule engine and the classifier for a set of targets."""

    def __init__(
        self,
        groups: list[RuleGroup],
        *,
        retention_s: float = 1800.0,
        job: str = "vllm",
        advisor: Advisor | None = None,
        headroom: HeadroomWorker | None = None,
    ) -> None:
        self.store = Store(retention_s=retention_s)
        self.advisor = advisor  # predicted effects of the advice, when set
        self.headroom = headroom  # SLO headroom and replicas needed, for targets with SLOs, when set
        self.rules = RuleEngine(groups, self.store)
        self.classifier = Classifier()
        self.job = job
        self.idle_after_s = IDLE_AFTER_S  # told to the pack (kvdoctor:idle_after_seconds) for every target
        self._targets: dict[str, Target] = {}
        self.runbook_url = (
            DEFAULT_RUNBOOK_PAGE  # where findings' runbook links point (the daemon sets its own)
        )
        self._parsers: dict[str, Parser] = {}
        self._also: set[str] = set()  # scraped names kept whether a rule reads them or not
        self._names_read()

    def set_rules(self, groups: list[RuleGroup]) -> None:
        """Swap in a new rule pack, keeping the alert state of rules that still exist."""
        state = self.rules.to_state()
        self.rules = RuleEngine(groups, self.store)
        self.rules.restore(state)
        self._names_read()

    def also_store(self, names: set[str]) -> None:
        """Keep these scraped families in the store too (something reads them besides the rules)."""
        self._also |= names
        self._names_read()

    def _names_read(self) -> None:
        self._stored = stored = self._stored_names()
        # The families a scrape is parsed for (None: all); the others (HTTP, Python, process) are only counted.
        self.keep = None if stored is None else Keep(stored | _READ_BESIDES, ("vllm:",))

    def _stored_names(self) -> frozenset[str] | None:
        # Only the families a rule reads are stored (None: a rule may read any, so all are), as a Prometheus
        # `metric_relabel_configs` drop would: the pack reads 110 of a vLLM 0.32 page's 381 series, and the others
        # (HTTP, process, request-parameter histograms) would cost memory and ingest time on every target.
        reads = self.rules.reads
        return None if reads is None else reads | self._also

    @property
    def targets(self) -> Mapping[str, Target]:
        """The declared and observed targets by name (read-only: change them through the methods)."""
        return MappingProxyType(self._targets)

    def add_target(self, name: str, facts: TargetFacts | None = None) -> Target:
        """Declare a target, or give a known one new facts (what it last showed is kept)."""
        target = self._targets.get(name)
        if target is None:
            target = self._targets[name] = Target(name)
        if facts is not None:
            target.facts = facts
        return target

    def remove_target(self, name: str) -> None:
        """Forget a target: its series go stale and age out."""
        self.store.mark_down(name, round(self.store.newest_ms))
        self.store.forget_source(name)
        self._forget(name)

    def remove_targets(self, names: set[str]) -> None:
        """Forget targets removed from the config: their series, and the rules' results about them, go now.

        A reload from 2,000 targets to 10 must free the memory of 1,990; aging out would keep it a retention long.
        """
        if not names:
            return
        self.store.drop_sources(names)
        forget_groupings()  # the evaluator's memo of their label sets would keep them alive
        for name in names:
            self._forget(name)

    def close(self) -> None:
        """Stop the what-if workers' threads (the daemon's shutdown; a pipeline is not used after it)."""
        for worker in (self.advisor, self.headroom):
            if worker is not None:
                worker.close()

    def _forget(self, name: str) -> None:
        if self.advisor is not None:
            self.advisor.forget(name)
        if self.headroom is not None:
            self.headroom.forget(name)
        self.classifier.forget(name)
        for d in (self._targets, self._parsers):
            d.pop(name, None)  # type: ignore[attr-defined]

    def set_health(
        self, name: str, t: float, up: bool, error: str = "", duration_s: float | None = None
    ) -> None:
        """Record whether a target answered at t, when something other than observe() looked (Prometheus)."""
        self.add_target(name).record(t, up, error, duration_s)

    def set_inventory(self, name: str, missing: list[str], live: LiveCapacity | None) -> None:
        """Record which expected families a target lacks and its live capacity, as seen by its last look."""
        target = self.add_target(name)
        target.missing, target.live = list(missing), live

    def observe(
        self,
        target: str,
        t: float,
        text: str | Scrape | None,
        error: str | None = None,
        duration_s: float | None = None,
        limit: str | None = None,
    ) -> str | None:
        """Feed one scrape (text, or samples parsed already) or failure (error; limit: the limit a refused
        scrape went over) of a target at t; returns the error, if any."""
        state = self.add_target(target)
        t_ms = round(t * 1000)
        extra = (("instance", target), ("job", self.job))
        scrape = text if isinstance(text, Scrape) else None
        if isinstance(text, str):
            try:
                scrape = self._parsers.setdefault(target, Parser()).parse(text, keep=self.keep)
            except ParseError as exc:
                error = f"{target}: bad exposition: {exc}"
        if scrape is None:
            state.record(t, False, error or "scrape failed", duration_s, samples=0, limit=limit)
            self.store.mark_down(target, t_ms)
            self.store.ingest(f"up:{target}", t_ms, [Sample("up", (), 0.0)], extra)
            return state.last_error
        # a vLLM value that cannot be (NaN, +Inf, a negative count) is no evidence of anything: the rule pack, the
        # capacity and the what-if never see it, and the target says which it dropped
        samples, invalid = split_samples(scrape.samples)
        state.note_invalid("scrape", invalid)
        stored = self._stored
        self.store.ingest(
            target, t_ms, samples if stored is None else [s for s in samples if s.name in stored], extra
        )
        self.store.ingest(f"up:{target}", t_ms, [Sample("up", (), 1.0)], extra)
        state.record(t, True, duration_s=duration_s, samples=len(scrape.samples) + scrape.dropped)
        # read what the diagnosis needs from the scrape now, so its samples do not outlive the ingest
        names = {s.name for s in samples}
        missing = [what for what, alts in EXPECTED.items() if not any(a in names for a in alts)]
        self.set_inventory(
            name=target,
            missing=missing,
            live=live_capacity([s for s in samples if s.name in _CAPACITY_NAMES]),
        )
        if self.advisor is not None:
            self.advisor.observe(target, t, samples)
        return None

    def evaluate(self, t: float) -> Cycle:
        """Run the rule pack at t and classify every (target, model)."""
        # A cycle's temporaries are acyclic (reference counting frees them); without this, the allocation count
        # sets off cyclic collections that walk a heap which grows with the fleet, the only cost per target
        # that did (1.36 -> 2.47 ms from 10 to 5,000 targets; flat with the collector paused).
        with acyclic():
            return self._evaluate(t)

    def _evaluate(self, t: float) -> Cycle:
        self._inject_config(t)
        evaluation = self.rules.evaluate(t)
        t_ms = round(t * 1000)
        series = []
        for name in recorded().values():
            for s in self.store.select(name):
                v = s.at(t_ms, self.store.lookback_ms)
                if v is not None and not math.isnan(v):
                    series.append((s.labels, v))
        signals = collect(series)
        invalid = drop_invalid_evidence(signals)
        for name, target in self._targets.items():
            target.note_invalid("evidence", invalid.get(name, {}))
        diagnoses = self.classify(t, signals, evaluation)
        return Cycle(t, diagnoses, evaluation)

    def classify(
        self, t: float, signals: dict[Key, dict[str, float]], evaluation: Evaluation
    ) -> list[Diagnosis]:
        """The diagnoses at t from signals and the rules' outcome, for every target; runbook links made absolute."""
        diagnoses = self.classifier.classify(t, signals, evaluation.alerts, self.targets)
        failures = {k: dict(v) for k, v in self.classifier.failures.items()}
        for d in diagnoses:
            if self.advisor is not None:  # predicted effects on the advice, follow-ups as findings
                try:
                    self.advisor.annotate([d], t)
                except Exception as exc:  # the diagnosis stands without its predictions
                    failures.setdefault(d.target, {}).setdefault("whatif", f"{type(exc).__name__}: {exc}")
            for f in d.findings:
                f.runbook = runbook_link(self.runbook_url, f.runbook, f.name)
        if self.headroom is not None:  # SLO headroom for autoscalers, from the advisor's history
            try:
                self.headroom.annotate(diagnoses, t, self._slos())
            except Exception as exc:  # the diagnoses stand without their headroom
                for d in diagnoses:
                    failures.setdefault(d.target, {}).setdefault("whatif", f"{type(exc).__name__}: {exc}")
        # the simulation threads' own failures, per target
        for worker in (w for w in (self.advisor, self.headroom) if w is not None):
            for name, error in worker.failures().items():
                failures.setdefault(name, {}).setdefault("whatif", error)
        for step in STEPS:
            self.note_steps(step, {name: f[step] for name, f in failures.items() if step in f})
        return diagnoses

    def note_steps(self, step: str, failed: Mapping[str, str]) -> None:
        """Record on every target whether a per-target step failed for it this cycle (failed: target -> why)."""
        for name, target in self._targets.items():
            note_step(target, step, failed.get(name))

    def _slos(self) -> dict[str, tuple[dict[str, float], int | None]]:
        wants = {}
        for name, target in self._targets.items():
            cfg = target.facts
            slos = {
                k: float(v)
                for k, v in (("itl_p95", cfg.slo_itl_p95_s), ("ttft_p95", cfg.slo_ttft_p95_s))
                if v
            }
            if slos:
                wants[name] = (slos, cfg.max_num_seqs)
        return wants

    def _inject_config(self, t: float) -> None:
        samples = []
        for name, target in self._targets.items():
            cfg = target.facts
            tl = (("target", name),)
            samples.append(Sample("kvdoctor_target_idle_after_seconds", tl, float(self.idle_after_s)))
            if cfg.max_num_seqs:
                samples.append(Sample("kvdoctor_target_max_num_seqs", tl, float(cfg.max_num_seqs)))
            for slo, v in (("itl_p95", cfg.slo_itl_p95_s), ("ttft_p95", cfg.slo_ttft_p95_s)):
                if v:
                    samples.append(Sample("kvdoctor_target_slo_seconds", (*tl, ("slo", slo)), float(v)))
        self.store.ingest("config", round(t * 1000), samples)


def note_step(target: Target, step: str, error: str | None) -> None:
    """Record whether a per-target step failed this cycle; log it when that changes, not every cycle."""
    if target.step_errors.get(step) != error:
        if error is None:
            log.info("target %s: %s works again", target.name, step, extra={"target": target.name})
        else:
            log.warning("target %s: %s failed: %s", target.name, step, error, extra={"target": target.name})
    target.note_step(step, error)
