"""Feed alert vectors computed elsewhere (by a Prometheus) into the embedded rule engine's alert state."""

from __future__ import annotations

from kvdoctor.promql.values import Elem
from kvdoctor.rules.evaluate import Evaluation, RuleEngine
from kvdoctor.rules.loader import Rule
from kvdoctor.sources.client import InstantVector

RuleKey = tuple[int, int]  # (group index, rule index) in engine.groups: alert names may repeat across groups


def alerting_rules(engine: RuleEngine) -> dict[RuleKey, Rule]:
    """Every alerting rule of the engine's groups, by position."""
    return {
        (gi, ri): rule
        for gi, group in enumerate(engine.groups)
        for ri, rule in enumerate(group.rules)
        if rule.kind == "alert"
    }


def to_vector(series: InstantVector) -> list[Elem]:
    """Query result pairs as evaluator elements (labels sorted, as the engine keeps them)."""
    return [Elem(tuple(sorted(labels.items())), v) for labels, v in series]


def apply_alerts(engine: RuleEngine, vectors: dict[RuleKey, InstantVector], t: float) -> Evaluation:
    """Advance pending → firing → resolved exactly as RuleEngine.evaluate does, from precomputed vectors."""
    rules = alerting_rules(engine)
    return engine.apply_alert_vectors([(rules[k], to_vector(v)) for k, v in vectors.items() if k in rules], t)
