"""The pipeline every entry point shares: scrapes in, store, rule pack, classification, diagnoses out."""

from __future__ import annotations

import gc
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kvdoctor import vllm_metrics
from kvdoctor.capacity.live import B125, CACHE_INFO, LORA_INFO, LiveCapacity, live_capacity
from kvdoctor.diagnosis.classify import Classifier
from kvdoctor.diagnosis.evidence import Key, collect
from kvdoctor.diagnosis.target import Target, TargetFacts
from kvdoctor.ingest.parse import ParseError, Parser
from kvdoctor.rules.evaluate import Evaluation, RuleEngine
from kvdoctor.rules.loader import RuleGroup
from kvdoctor.samples import Sample, Scrape
from kvdoctor.signals import recorded
from kvdoctor.store import Store
from kvdoctor.verdicts import DEFAULT_RUNBOOK_PAGE, Diagnosis, runbook_link
from kvdoctor.whatif.advisor import Advisor

# Families a diagnosis needs (label → the names it has carried across vLLM versions), from kvdoctor.vllm_metrics
EXPECTED = vllm_metrics.EXPECTED
_CAPACITY_NAMES = {CACHE_INFO, LORA_INFO, *B125}  # the samples live_capacity reads


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
    ) -> None:
        self.store = Store(retention_s=retention_s)
        self.advisor = advisor  # predicted effects of the advice, when set
        self.rules = RuleEngine(groups, self.store)
        self.classifier = Classifier()
        self.job = job
        self._targets: dict[str, Target] = {}
        self.runbook_url = (
            DEFAULT_RUNBOOK_PAGE  # where findings' runbook links point (the daemon sets its own)
        )
        self._parsers: dict[str, Parser] = {}

    def set_rules(self, groups: list[RuleGroup]) -> None:
        """Swap in a new rule pack, keeping the alert state of rules that still exist."""
        state = self.rules.to_state()
        self.rules = RuleEngine(groups, self.store)
        self.rules.restore(state)

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
        if self.advisor is not None:
            self.advisor.forget(name)
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
                scrape = self._parsers.setdefault(target, Parser()).parse(text)
            except ParseError as exc:
                error = f"{target}: bad exposition: {exc}"
        if scrape is None:
            state.record(t, False, error or "scrape failed", duration_s, samples=0, limit=limit)
            self.store.mark_down(target, t_ms)
            self.store.ingest(f"up:{target}", t_ms, [Sample("up", (), 0.0)], extra)
            return state.last_error
        self.store.ingest(target, t_ms, scrape.samples, extra)
        self.store.ingest(f"up:{target}", t_ms, [Sample("up", (), 1.0)], extra)
        state.record(t, True, duration_s=duration_s, samples=len(scrape.samples))
        # read what the diagnosis needs from the scrape now, so its samples do not outlive the ingest
        names = {s.name for s in scrape.samples}
        missing = [what for what, alts in EXPECTED.items() if not any(a in names for a in alts)]
        self.set_inventory(
            name=target,
            missing=missing,
            live=live_capacity([s for s in scrape.samples if s.name in _CAPACITY_NAMES]),
        )
        if self.advisor is not None:
            self.advisor.observe(target, t, scrape.samples)
        return None

    def evaluate(self, t: float) -> Cycle:
        """Run the rule pack at t and classify every (target, model)."""
        # A cycle's temporaries are acyclic (reference counting frees them); without this, the allocation count
        # sets off cyclic collections that walk a heap which grows with the fleet, the only cost per target
        # that did (1.36 -> 2.47 ms from 10 to 5,000 targets; flat with the collector paused).
        paused = gc.isenabled()
        gc.disable()
        try:
            return self._evaluate(t)
        finally:
            if paused:
                gc.enable()

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
        diagnoses = self.classify(t, collect(series), evaluation)
        return Cycle(t, diagnoses, evaluation)

    def classify(
        self, t: float, signals: dict[Key, dict[str, float]], evaluation: Evaluation
    ) -> list[Diagnosis]:
        """The diagnoses at t from signals and the rules' outcome, for every target; runbook links made absolute."""
        diagnoses = self.classifier.classify(t, signals, evaluation.alerts, self.targets)
        if self.advisor is not None:  # predicted effects on the advice, follow-ups as findings
            diagnoses = self.advisor.annotate(diagnoses, t)
        for d in diagnoses:
            for f in d.findings:
                f.runbook = runbook_link(self.runbook_url, f.runbook, f.name)
        return diagnoses

    def _inject_config(self, t: float) -> None:
        samples = []
        for name, target in self._targets.items():
            cfg = target.facts
            tl = (("target", name),)
            if cfg.max_num_seqs:
                samples.append(Sample("kvdoctor_target_max_num_seqs", tl, float(cfg.max_num_seqs)))
            for slo, v in (("itl_p95", cfg.slo_itl_p95_s), ("ttft_p95", cfg.slo_ttft_p95_s)):
                if v:
                    samples.append(Sample("kvdoctor_target_slo_seconds", (*tl, ("slo", slo)), float(v)))
        self.store.ingest("config", round(t * 1000), samples)
