"""Impossible values taken out of a scrape and of the evidence before the classifier, capacity or what-if read them."""

from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter

from kvdoctor.diagnosis.evidence import ENGINE, Key
from kvdoctor.samples import Sample
from kvdoctor.sanity import COUNT_MAX, RATIO_MAX, RATIOS, RAW_MAX, evidence_problem, raw_problem
from kvdoctor.signals import SIGNALS

INF = float("inf")
_NAME, _VALUE = itemgetter(0), itemgetter(2)  # of a Sample


def split_samples(samples: Iterable[Sample]) -> tuple[list[Sample], dict[str, str]]:
    """The samples kvdoctor can compute with, and metric -> problem for the vLLM ones it cannot (first per metric)."""
    samples = list(samples)
    values = list(map(_VALUE, samples))
    # the common case, a page with nothing wrong, judged by C loops (min, max, sum; NaN and ±Inf make the sum no
    # number below Inf, wherever min and max met them) and one scan of the names for the ratios; only a page that
    # fails it is looked at sample by sample
    if not values or (
        min(values) >= 0.0
        and max(values) <= RAW_MAX
        and sum(values) < INF
        and all(v <= RATIO_MAX for n, v in zip(map(_NAME, samples), values, strict=True) if n in RATIOS)
    ):
        return samples, {}
    kept: list[Sample] = []
    bad: dict[str, str] = {}
    for s in samples:
        problem = raw_problem(s.name, s.value)
        if problem is None:
            kept.append(s)
        else:
            bad.setdefault(s.name, problem)
    return kept, bad


def _signal_of(key: str) -> tuple[str, str]:
    """(unit, recorded series name) of an evidence key, engine keys ("engine/0/running_max_1m") included."""
    if key.startswith(ENGINE):
        key = "engine_" + key[len(ENGINE) :].partition("/")[2]
    s = SIGNALS.get(key)
    return (s.unit, s.rule or key) if s is not None else ("plain", key)


def drop_invalid_evidence(signals: dict[Key, dict[str, float]]) -> dict[str, dict[str, str]]:
    """Remove ±Inf, negative and absurd values from the evidence in place; target -> {series: problem}.

    NaN is left to the classifier, which reads it as "no value" (0/0 in a ratio over an idle window is normal).
    """
    found: dict[str, dict[str, str]] = {}
    for (target, _), ev in signals.items():
        bad = []
        for k, v in ev.items():
            # within every unit's bounds (the common case, one comparison chain), or NaN: nothing to judge
            if 0.0 <= v <= COUNT_MAX or v != v:
                continue
            unit, series = _signal_of(k)
            problem = evidence_problem(unit, v)
            if problem is not None:
                bad.append(k)
                found.setdefault(target, {}).setdefault(series, problem)
        for k in bad:
            del ev[k]
    return found
