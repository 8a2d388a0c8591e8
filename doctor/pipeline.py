"""The pipeline every entry point shares: scrapes in, store, rule pack, classification, diagnoses out."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from doctor.capacity.live import B125, CACHE_INFO, live_capacity
from doctor.diagnosis.classify import Classifier, TargetState
from doctor.diagnosis.model import Diagnosis
from doctor.diagnosis.signals import INSTANCE_SIGNALS, SIGNALS, collect
from doctor.ingest.parse import ParseError, Parser
from doctor.rules.evaluate import Evaluation, RuleEngine
from doctor.rules.loader import Group
from doctor.samples import Sample
from doctor.store import Store

# Families a diagnosis needs, each with the names it may carry across vLLM versions.
EXPECTED = {
    "KV usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "running requests": ("vllm:num_requests_running",),
    "waiting requests": ("vllm:num_requests_waiting",),
    "preemptions": ("vllm:num_preemptions_total",),
    "TTFT histogram": ("vllm:time_to_first_token_seconds_bucket",),
    "inter-token latency histogram": (
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:time_per_output_token_seconds_bucket",
    ),
}
# Every recorded series the classifier reads, for either source.
SIGNAL_NAMES = set(SIGNALS.values()) | set(INSTANCE_SIGNALS.values())
_CAPACITY_NAMES = {CACHE_INFO, *B125}  # the samples live_capacity reads


@dataclass
class TargetConfig:
    """Per-target facts the operator told kvdoctor."""

    max_num_seqs: int | None = None
    slo_itl_p95_s: float | None = None
    slo_ttft_p95_s: float | None = None
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Cycle:
    """One evaluation: its diagnoses and the rule engine's outcome."""

    t: float
    diagnoses: list[Diagnosis]
    evaluation: Evaluation


class Pipeline:
    """Holds the store, the rule engine and the classifier for a set of targets."""

    def __init__(self, groups: list[Group], *, retention_s: float = 1800.0, job: str = "vllm") -> None:
        self.store = Store(retention_s=retention_s)
        self.rules = RuleEngine(groups, self.store)
        self.classifier = Classifier()
        self.job = job
        self.targets: dict[str, TargetState] = {}
        self.config: dict[str, TargetConfig] = {}
        self._parsers: dict[str, Parser] = {}

    def set_rules(self, groups: list[Group]) -> None:
        """Swap in a new rule pack, keeping the alert state of rules that still exist."""
        state = self.rules.to_state()
        self.rules = RuleEngine(groups, self.store)
        self.rules.restore(state)

    def add_target(self, name: str, config: TargetConfig | None = None) -> None:
        """Declare a target (before its first scrape)."""
        self.targets.setdefault(name, TargetState(name))
        self.config[name] = config or TargetConfig()

    def remove_target(self, name: str) -> None:
        """Forget a target: its series go stale and age out."""
        self.store.mark_down(name, round(self.store.newest_ms))
        self.store.forget_source(name)
        for d in (self.targets, self.config, self._parsers):
            d.pop(name, None)  # type: ignore[attr-defined]

    def observe(self, target: str, t: float, text: str | None, error: str | None = None) -> str | None:
        """Feed one scrape (text) or failure (error) of a target at t; returns the error, if any."""
        state = self.targets.setdefault(target, TargetState(target))
        self.config.setdefault(target, TargetConfig())
        t_ms = round(t * 1000)
        extra = (("instance", target), ("job", self.job))
        scrape = None
        if text is not None:
            try:
                scrape = self._parsers.setdefault(target, Parser()).parse(text)
            except ParseError as exc:
                error = f"{target}: bad exposition: {exc}"
        if scrape is None:
            state.up, state.error = False, error or "scrape failed"
            self.store.mark_down(target, t_ms)
            self.store.ingest(f"up:{target}", t_ms, [Sample("up", (), 0.0)], extra)
            return state.error
        self.store.ingest(target, t_ms, scrape.samples, extra)
        self.store.ingest(f"up:{target}", t_ms, [Sample("up", (), 1.0)], extra)
        state.up, state.error = True, ""
        # read what the diagnosis needs from the scrape now, so its samples do not outlive the ingest
        names = {s.name for s in scrape.samples}
        state.missing = [what for what, alts in EXPECTED.items() if not any(a in names for a in alts)]
        state.live = live_capacity([s for s in scrape.samples if s.name in _CAPACITY_NAMES])
        return None

    def evaluate(self, t: float) -> Cycle:
        """Run the rule pack at t and classify every (target, model)."""
        self._inject_config(t)
        evaluation = self.rules.evaluate(t)
        t_ms = round(t * 1000)
        series = []
        for name in SIGNAL_NAMES:
            for s in self.store.select(name):
                v = s.at(t_ms, self.store.lookback_ms)
                if v is not None and not math.isnan(v):
                    series.append((s.labels, v))
        diagnoses = self.classifier.classify(t, collect(series), evaluation.alerts, self.targets)
        return Cycle(t, diagnoses, evaluation)

    def _inject_config(self, t: float) -> None:
        samples = []
        for name, cfg in self.config.items():
            tl = (("target", name),)
            if cfg.max_num_seqs:
                samples.append(Sample("kvdoctor_target_max_num_seqs", tl, float(cfg.max_num_seqs)))
            for slo, v in (("itl_p95", cfg.slo_itl_p95_s), ("ttft_p95", cfg.slo_ttft_p95_s)):
                if v:
                    samples.append(Sample("kvdoctor_target_slo_seconds", (*tl, ("slo", slo)), float(v)))
        self.store.ingest("config", round(t * 1000), samples)
