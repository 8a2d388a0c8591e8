"""Evaluate rule groups over the store as Prometheus does: recording rules write series, alerts go pending → firing."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kvdoctor.jsondoc import JsonObject
from kvdoctor.promql.engine import Evaluator
from kvdoctor.promql.nodes import names_read
from kvdoctor.promql.values import Elem, EvalError, Scalar, drop_name, new
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
    # names of the rules whose evaluation failed, one per failure
    failed: list[str] = field(default_factory=list)

    def failed_rules(self) -> list[str]:
        """The rules that failed in this evaluation (a name twice if it failed twice)."""
        return list(self.failed)


class RuleEngine:
    """Runs the loaded groups; keeps alert state between evaluations."""

    def __init__(
        self, groups: list[RuleGroup], store: Store, external_labels: dict[str, str] | None = None
    ) -> None:
        self.groups = groups
        self.store = store
        self.engine = Evaluator(store)
        self.external = external_labels or {}
        self.active: dict[tuple[str, Labels], Alert] = {}
        self._keep_firing_for = {
            r.name: r.keep_firing_for_s for g in groups for r in g.rules if r.kind == "alert"
        }
        self._failing: dict[tuple[str, int], str] = {}  # (file, line) of a rule -> its error last evaluation
        self.reads = _reads(groups)

    def evaluate(self, t: float) -> Evaluation:
        """Evaluate every group in order at t (unix seconds)."""
        failing: dict[tuple[str, int], str] = {}
        failed: list[str] = []
        seen: set[tuple[str, Labels]] = set()
        with self.engine.shared():  # one cycle over the whole fleet: shared subexpressions computed once
            for group in self.groups:
                for i, rule in enumerate(group.rules):
                    try:
                        err = self._one(group, i, rule, t, seen)
                    except Exception as exc:  # one rule's failure (RecursionError, …) must not cost the group
                        err = _reason(exc)
                    if err:
                        failing[(rule.file, rule.line)] = (
                            f"{rule.file}:{rule.line}: rule {rule.name!r}: {err}"
                        )
                        failed.append(rule.name)
                        # as Prometheus: an alerting rule that could not be evaluated keeps its alerts as they were
                        seen |= {k for k, a in self.active.items() if a.rule == rule.name}
        self._resolve(seen, t)
        # said when a rule starts failing or fails differently, not every cycle
        for key, e in failing.items():
            level = logging.WARNING if self._failing.get(key) != e else logging.DEBUG
            log.log(level, "rule evaluation failed: %s", e)
        for key in set(self._failing) - set(failing):
            log.info("rule at %s:%d evaluates again", *key)
        self._failing = failing
        errors = list(failing.values())
        return Evaluation(t, sorted(self.active.values(), key=lambda a: a.key()), errors, failed)

    def _one(
        self, group: RuleGroup, i: int, rule: Rule, t: float, seen: set[tuple[str, Labels]]
    ) -> str | None:
        """Evaluate one rule at t: write its series or advance its alerts; the error, if it failed."""
        t_ms = round(t * 1000)
        try:
            value = self.engine.instant(rule.ast, t_ms)
        except EvalError as exc:
            return str(exc)
        vec = [Elem((), value.v)] if isinstance(value, Scalar) else value
        if rule.kind == "record":
            err = self._record(group, i, rule, vec, t_ms)  # type: ignore[arg-type]
            self.engine.written(rule.name)
            return err
        seen |= self._alert(rule, vec, t)  # type: ignore[arg-type]
        return None

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
            samples.append(new(Sample, (rule.name, key, e.v, None)))
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

    def to_state(self) -> list[JsonObject]:
        """Active alerts as JSON-ready dicts (to survive a restart)."""
        return [a.__dict__.copy() for a in self.active.values()]

    def restore(self, state: list[JsonObject]) -> None:
        """Reload active alerts saved by to_state(); unknown rules are ignored."""
        names = {r.name for g in self.groups for r in g.rules}
        for item in state:
            try:
                alert = Alert(**item)
                # a value the state file could not hold (Infinity is saved as null) reads as NaN
                alert.value = float(alert.value) if alert.value is not None else float("nan")
            except (TypeError, ValueError):
                continue
            if alert.rule in names:
                self.active[alert.key()] = alert


def _reads(groups: list[RuleGroup]) -> frozenset[str] | None:
    """The metric names the rules select (None when one may select any name)."""
    names: set[str] = set()
    for g in groups:
        for r in g.rules:
            read = names_read(r.ast)
            if read is None:
                return None
            names |= read
    return frozenset(names)


def _reason(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "expression too deeply nested to evaluate (RecursionError)"
    return f"{type(exc).__name__}: {exc}"
