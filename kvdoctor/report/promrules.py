"""Classes from the pack's recording rules and ALERTS, for a Prometheus that runs the pack but never scraped kvdoctor.

At each step the `kvdoctor:*` signals and the firing `ALERTS` of the pack's alerting rules go through the same
Classifier the daemon uses, so the classes, findings and gauges are those kvdoctor would have exported.
"""

from __future__ import annotations

import math
from collections import defaultdict

from kvdoctor.diagnosis.classify import Classifier
from kvdoctor.diagnosis.evidence import collect
from kvdoctor.diagnosis.target import Target
from kvdoctor.report.history import Key, RangeClient
from kvdoctor.report.steps import Step, step_from_diagnosis
from kvdoctor.rules.evaluate import Alert
from kvdoctor.signals import recorded

ALERTS = 'ALERTS{alertstate="firing"}'
# a vLLM target Prometheus failed to scrape (as the pack's VLLMTargetDown reads it)
DOWN = (
    "up == 0 and on (job, instance) group by (job, instance) (last_over_time(vllm:num_requests_running[1h]))"
)
Series = tuple[tuple[str, str], ...]


class RuleClasses:
    """Collects signals and alerts per step over the chunks, then classifies the steps in time order."""

    def __init__(self, client: RangeClient, start: float, step: float) -> None:
        self.client, self.start, self.step = client, start, step
        self.signals: dict[int, list[tuple[Series, float]]] = defaultdict(list)
        self.alerts: dict[int, list[Alert]] = defaultdict(list)
        self.down: dict[int, set[str]] = defaultdict(set)

    def _index(self, t: float) -> int:
        return round((t - self.start) / self.step)

    def read(self, a: float, b: float, fresh: str) -> None:
        """Query one chunk; `fresh` is a format string that keeps only samples newer than one step."""
        for name in sorted(set(recorded().values())):
            for labels, points in self.client.query_range(fresh.format(name), a, b, self.step):
                series = tuple(sorted(labels.items()))
                for t, v in points:
                    if not math.isnan(v):  # as the pipeline drops them
                        self.signals[self._index(t)].append((series, v))
        for labels, points in self.client.query_range(fresh.format(ALERTS), a, b, self.step):
            rest = {k: v for k, v in labels.items() if k not in ("__name__", "alertname", "alertstate")}
            for t, _ in points:
                self.alerts[self._index(t)].append(
                    Alert(labels.get("alertname", ""), rest, {}, 1.0, t, "firing")
                )
        for labels, points in self.client.query_range(DOWN, a, b, self.step):
            for t, _ in points:
                self.down[self._index(t)].add(labels.get("instance", ""))

    def steps(self) -> dict[int, dict[Key, Step]]:
        """The classified steps by grid index."""
        classifier = Classifier()
        targets: dict[str, Target] = {}
        out: dict[int, dict[Key, Step]] = {}
        for i in sorted(set(self.signals) | set(self.alerts) | set(self.down)):
            t = self.start + i * self.step
            signals = collect(self.signals.get(i, []))
            for name in {k[0] for k in signals} | self.down.get(i, set()):
                st = targets.setdefault(name, Target(name))
                st.up = name not in self.down.get(i, set())
                st.last_error = "" if st.up else "Prometheus reports up == 0"
            diagnoses = classifier.classify(t, signals, self.alerts.get(i, []), targets)
            out[i] = {(d.target, d.model_name): step_from_diagnosis(d, t, self.step) for d in diagnoses}
        return out
