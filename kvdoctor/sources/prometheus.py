"""Evaluate the rule pack on a Prometheus: a fixed set of instant queries per cycle, whatever the fleet size.

The user's Prometheus runs the pack's recording rules (`kvdoctor rules export`); each cycle kvdoctor reads every
`kvdoctor:*` signal in one query, evaluates each alerting rule's expression as one query and feeds the vectors
into the embedded alert state machine, discovers targets from `up`, and reads live capacity from
`vllm:cache_config_info` and the token histograms. Then the same Classifier as the scrape source runs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from kvdoctor.capacity.live import CACHE_INFO, GENERATION, LORA_INFO, PROMPT, live_capacity
from kvdoctor.diagnosis.evidence import collect
from kvdoctor.diagnosis.target import TargetFacts
from kvdoctor.pipeline import EXPECTED, Cycle, Pipeline
from kvdoctor.samples import Sample
from kvdoctor.signals import recorded
from kvdoctor.sources.alerts import alerting_rules, apply_alerts
from kvdoctor.sources.client import InstantVector, PromClient, SourceError, finite

MARKER = "vllm:num_requests_running"  # every vLLM version exports it: a job/instance with it is a vLLM target
# Histograms are checked through their `_count` series: present together with `_bucket`, a fraction of the series.
_PRESENCE = {
    alt: (alt[: -len("_bucket")] + "_count" if alt.endswith("_bucket") else alt)
    for alts in EXPECTED.values()
    for alt in alts
}


def signals_query() -> str:
    """Every recorded signal the classifier reads (kvdoctor.signals), so both sources give the same evidence."""
    return '{__name__=~"' + "|".join(sorted(recorded().values())) + '"}'


QUERIES: dict[str, str] = {
    "signals": signals_query(),
    # up == 0 for a vLLM target that answered within the hour (as VLLMTargetDown reads it), up == 1 otherwise
    "targets": '{__name__=~"up|scrape_duration_seconds"} and on (job, instance) '
    f"group by (job, instance) (last_over_time({MARKER}[1h]))",
    "capacity": f'{CACHE_INFO} or sum by (__name__, instance, le) ({{__name__=~"{PROMPT}|{GENERATION}"}})'
    f' or max by (__name__, instance, max_lora) ({{__name__="{LORA_INFO}"}})',
    "present": 'group by (instance, __name__) ({__name__=~"'
    + "|".join(sorted(set(_PRESENCE.values())))
    + '"})',
}


@dataclass
class Discovered:
    """A target as Prometheus sees it: instance, job, and its last scrape."""

    name: str
    job: str
    up: bool
    scrape_duration_s: float | None = None


class PrometheusEvaluator:
    """Runs one cycle against a Prometheus, keeping alert and classification state in a Pipeline."""

    def __init__(self, client: PromClient, pipeline: Pipeline, workers: int = 8) -> None:
        self.client = client
        self.pipeline = pipeline
        self.workers = workers
        self.discovered: dict[str, Discovered] = {}
        self.last_cycle_queries = 0

    def queries(self) -> dict[str, str]:
        """The queries of one cycle: four fixed ones plus one per alerting rule."""
        out = {**QUERIES, "signals": signals_query()}
        for (gi, ri), rule in alerting_rules(self.pipeline.rules).items():
            out[f"alert:{gi}:{ri}"] = rule.expr
        return out

    def evaluate(self, t: float, facts: Callable[[str], TargetFacts] | None = None) -> Cycle:
        """Query the fleet's state at t and classify every (target, model); raises SourceError."""
        results = self._run_all(self.queries(), t)
        self.discovered = _discover(results["targets"])
        self._sync_targets(t, facts or (lambda _: TargetFacts()))
        self._update_targets(results["present"], results["capacity"])
        known = set(self.discovered)
        signals = collect(
            (tuple(sorted(labels.items())), v)
            for labels, v in finite(results["signals"])
            if labels.get("instance") in known
        )
        vectors = {
            (int(k.split(":")[1]), int(k.split(":")[2])): v
            for k, v in results.items()
            if k.startswith("alert:")
        }
        evaluation = apply_alerts(self.pipeline.rules, vectors, t)
        diagnoses = self.pipeline.classify(t, signals, evaluation)
        return Cycle(t, diagnoses, evaluation)

    def _run_all(self, queries: dict[str, str], t: float) -> dict[str, InstantVector]:
        self.last_cycle_queries = len(queries)
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(queries)))) as pool:
            futures = {name: pool.submit(self.client.query, expr, t) for name, expr in queries.items()}
            results, errors = {}, []
            for name, fut in futures.items():
                try:
                    results[name] = fut.result()
                except SourceError as exc:
                    errors.append(str(exc))
        if errors:
            more = f" (and {len(errors) - 1} more failed queries)" if len(errors) > 1 else ""
            raise SourceError(errors[0] + more)
        return results

    def _sync_targets(self, t: float, facts: Callable[[str], TargetFacts]) -> None:
        for gone in set(self.pipeline.targets) - set(self.discovered):
            self.pipeline.remove_target(gone)
        for name, d in self.discovered.items():
            known = self.pipeline.targets.get(name)
            told = known.facts if known is not None else facts(name)
            if known is None or "job" not in told.labels:  # the job Prometheus scrapes it in, unless told
                self.pipeline.add_target(name, replace(told, labels={"job": d.job, **told.labels}))
            error = f"Prometheus reports up == 0 for {name} (job {d.job!r})"
            self.pipeline.set_health(name, t, d.up, error, d.scrape_duration_s)

    def _update_targets(self, present: InstantVector, capacity: InstantVector) -> None:
        names: dict[str, set[str]] = defaultdict(set)
        for labels, _ in present:
            names[labels.get("instance", "")].add(labels.get("__name__", ""))
        samples: dict[str, list[Sample]] = defaultdict(list)
        for labels, v in capacity:
            rest = tuple(sorted((k, x) for k, x in labels.items() if k != "__name__"))
            samples[labels.get("instance", "")].append(Sample(labels.get("__name__", ""), rest, v))
        for name, st in list(self.pipeline.targets.items()):
            if not st.up:
                continue  # as with scrapes: keep what the last good look showed
            have = names.get(name, set())
            missing = [what for what, alts in EXPECTED.items() if not any(_PRESENCE[a] in have for a in alts)]
            self.pipeline.set_inventory(name, missing, live_capacity(samples.get(name, [])))


def _discover(series: InstantVector) -> dict[str, Discovered]:
    out: dict[str, Discovered] = {}
    durations: dict[str, float] = {}
    for labels, v in series:
        instance = labels.get("instance", "")
        if not instance:
            continue
        if labels.get("__name__") == "scrape_duration_seconds":
            durations[instance] = v
            continue
        prev = out.get(instance)
        # one instance scraped by several jobs: down if any job says so
        if prev is None or (prev.up and v != 1):
            out[instance] = Discovered(instance, labels.get("job", ""), v == 1)
    for instance, d in out.items():
        d.scrape_duration_s = durations.get(instance)
    return dict(sorted(out.items()))
