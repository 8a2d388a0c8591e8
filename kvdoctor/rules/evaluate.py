"""Evaluate rule groups over the store as Prometheus does: recording rules write series, alerts go pending → firing."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from kvdoctor.promql.engine import Engine
from kvdoctor.promql.values import Elem, EvalError, Scalar, drop_name
from kvdoctor.rules.loader import Rule, RuleGroup
from kvdoctor.rules.templates import expand
from kvdoctor.samples import Labels, Sample
from kvdoctor.store import Store

log = logging.getLogger(__name__)


@dataclass
class Alert:
    """An active (pending or firing) alert instance."""

    rule: str
    labels: dict[str, str]
    annotations: dict[str, str]
    value: float
    active_at: float
    state: str = "pending"
    fired_at: float | None = None
    last_seen: float = 0.0
    keep_since: float | None = None  # first evaluation it stopped holding while keep_firing_for runs

    def key(self) -> tuple[str, Labels]:
        """Identity of the alert: rule name and its label set."""
        return self.rule, tuple(sorted(self.labels.items()))


@dataclass
class Evaluation:
    """The outcome of one evaluation of every group at time t."""

    t: float
    alerts: list[Alert]
    errors: list[str] = field(default_factory=list)


class RuleEngine:
    """Runs the loaded groups; keeps alert state between evaluations."""

    def __init__(
        self, groups: list[RuleGroup], store: Store, external_labels: dict[str, str] | None = None
    ) -> None:
        self.groups = groups
        self.store = store
        self.engine = Engine(store)
        self.external = external_labels or {}
        self.active: dict[tuple[str, Labels], Alert] = {}
        self._keep_firing_for = {
            r.name: r.keep_firing_for_s for g in groups for r in g.rules if r.kind == "alert"
        }

    def evaluate(self, t: float) -> Evaluation:
        """Evaluate every group in order at t (unix seconds)."""
        t_ms = round(t * 1000)
        errors: list[str] = []
        seen: set[tuple[str, Labels]] = set()
        with self.engine.shared():  # one cycle over the whole fleet: shared subexpressions computed once
            for group in self.groups:
                for i, rule in enumerate(group.rules):
                    try:
                        value = self.engine.instant(rule.ast, t_ms)
                    except EvalError as exc:
                        errors.append(f"{rule.file}:{rule.line}: rule {rule.name!r}: {exc}")
                        continue
                    vec = [Elem((), value.v)] if isinstance(value, Scalar) else value
                    if rule.kind == "record":
                        err = self._record(group, i, rule, vec, t_ms)  # type: ignore[arg-type]
                        self.engine.written(rule.name)
                        if err:
                            errors.append(f"{rule.file}:{rule.line}: rule {rule.name!r}: {err}")
                    else:
                        seen |= self._alert(rule, vec, t)  # type: ignore[arg-type]
        self._resolve(seen, t)
        for e in errors:
            log.warning("rule evaluation failed: %s", e)
        return Evaluation(t, sorted(self.active.values(), key=lambda a: a.key()), errors)

    def apply_alert_vectors(self, vectors: list[tuple[Rule, list[Elem]]], t: float) -> Evaluation:
        """Advance alert state from alert vectors computed elsewhere (by a Prometheus), as evaluate() would."""
        seen: set[tuple[str, Labels]] = set()
        for rule, vec in vectors:
            seen |= self._alert(rule, vec, t)
        self._resolve(seen, t)
        return Evaluation(t, sorted(self.active.values(), key=lambda a: a.key()), [])

    def _record(self, group: RuleGroup, i: int, rule: Rule, vec: list[Elem], t_ms: int) -> str | None:
        samples = []
        seen: set[Labels] = set()
        for e in vec:
            key = drop_name(e.labels)  # already in canonical order
            if rule.labels:
                labels = dict(key)
                labels.update(rule.labels)
                key = tuple(sorted(labels.items()))
            if key in seen:
                return "vector contains metrics with the same labelset after applying rule labels"
            seen.add(key)
            samples.append(Sample(rule.name, key, e.v))
        self.store.ingest(f"rule:{group.file}:{group.name}:{i}", t_ms, samples)
        return None

    def _alert(self, rule: Rule, vec: list[Elem], t: float) -> set[tuple[str, Labels]]:
        seen = set()
        for e in vec:
            base = dict(drop_name(e.labels))
            labels = dict(base)
            for k, v in rule.labels.items():
                labels[k] = expand(v, base, e.v, self.external)
            labels["alertname"] = rule.name
            annotations = {k: expand(v, base, e.v, self.external) for k, v in rule.annotations.items()}
            alert = Alert(rule.name, labels, annotations, e.v, t, last_seen=t)
            key = alert.key()
            seen.add(key)
            current = self.active.get(key)
            if current is None:
                self.active[key] = current = alert
            else:
                current.value, current.annotations, current.last_seen = e.v, annotations, t
                current.keep_since = None
            if current.state == "pending" and t - current.active_at >= rule.for_s:
                current.state, current.fired_at = "firing", t
        return seen

    def _resolve(self, seen: set[tuple[str, Labels]], t: float) -> None:
        for key, alert in list(self.active.items()):
            if key in seen:
                continue
            keep = self._keep_firing_for.get(alert.rule, 0.0)
            if alert.state == "firing" and keep > 0:
                # Prometheus counts keep_firing_for from the first evaluation where the expression stopped holding
                alert.keep_since = t if alert.keep_since is None else alert.keep_since
                if t - alert.keep_since < keep:
                    continue
            del self.active[key]

    def to_state(self) -> list[dict[str, Any]]:
        """Active alerts as JSON-ready dicts (to survive a restart)."""
        return [a.__dict__.copy() for a in self.active.values()]

    def restore(self, state: list[dict[str, Any]]) -> None:
        """Reload active alerts saved by to_state(); unknown rules are ignored."""
        names = {r.name for g in self.groups for r in g.rules}
        for item in state:
            try:
                alert = Alert(**item)
            except TypeError:
                continue
            if alert.rule in names:
                self.active[alert.key()] = alert
