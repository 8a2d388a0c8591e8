"""Evaluation value types and label helpers."""

from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal
from typing import Any, NamedTuple, TypeVar

from kvdoctor.errors import InputError
from kvdoctor.samples import Labels

NAME = "__name__"
_MS = timedelta(milliseconds=1)
# A NamedTuple built without the Python frame of its generated __new__: `new(Elem, (labels, v))`. The pack builds
# a few hundred elements per target per cycle, and that frame was a tenth of the evaluation.
new = tuple.__new__


class EvalError(InputError):
    """An expression that cannot be evaluated (e.g. many-to-many matching); the message is Prometheus'."""


class Scalar(NamedTuple):
    """A scalar value."""

    v: float


class String(NamedTuple):
    """A string value."""

    s: str


class Elem(NamedTuple):
    """One instant-vector element."""

    labels: Labels
    v: float


class Range(NamedTuple):
    """One range-vector series: timestamps in ms and float values."""

    labels: Labels
    ts: list[int]
    vs: list[float]


Vector = list[Elem]
Matrix = list[Range]
Value = Scalar | String | Vector | Matrix


def drop_name(labels: Labels) -> Labels:
    """The label set without __name__ (the same tuple when it has none)."""
    if not labels:
        return labels
    first = labels[0][0]
    if first == NAME:
        return labels[1:]
    if first > NAME:  # canonical order: a name would have come first
        return labels
    return tuple(p for p in labels if p[0] != NAME)


def set_label(labels: Labels, name: str, value: str) -> Labels:
    """The label set with name=value (deleted when value is empty)."""
    rest = [p for p in labels if p[0] != name]
    if value:
        rest.append((name, value))
        rest.sort()
    return tuple(rest)


def get_label(labels: Labels, name: str) -> str:
    """A label's value, or "" when absent."""
    for k, v in labels:
        if k == name:
            return v
    return ""


class Grouping(dict[Labels, Labels]):
    """The labels `by (...)`/`on (...)` keep, or `without (...)`/`ignoring (...)` leave, memoized per label set.

    Series keep their label tuples from one evaluation to the next, so each is projected once, not per rule per cycle.
    The memo is the object itself: calling it is a dict lookup in C, and only a label set not seen before runs
    Python (`__missing__`); aggregations and vector matching call it for every element of every rule.
    """

    __slots__ = ("keep", "names")

    def __init__(self, keep: bool, names: frozenset[str]) -> None:
        super().__init__()
        self.keep, self.names = keep, names

    def __missing__(self, labels: Labels) -> Labels:
        if self.keep:  # `by (__name__)` keeps the name, as in Prometheus
            key = tuple(p for p in labels if p[0] in self.names)
        else:
            key = tuple(p for p in labels if p[0] not in self.names and p[0] != NAME)
        if len(self) >= _GROUPING_LIMIT:
            self.clear()
        self[labels] = key
        return key

    # the projected label set of a label set
    __call__ = dict.__getitem__


_GROUPING_LIMIT = 1 << 22
_GROUPINGS: dict[tuple[bool, frozenset[str]], Grouping] = {}
_MEMOS: list[
    dict[Any, Any]
] = []  # other memos keyed by label sets (remembered), forgotten with the groupings
M = TypeVar("M", bound=dict[Any, Any])


def remembered(memo: M) -> M:
    """memo, to be emptied by forget_groupings with the groupings' own (it keeps label sets of series)."""
    _MEMOS.append(memo)
    return memo


def forget_groupings() -> None:
    """Empty every grouping's memo (kept across evaluations and rule reloads) once many series are gone.

    The memo holds the label sets of every series it projected: after a reload from 2,000 targets to 10 it would keep
    the removed targets' label tuples alive, and their memory, until it reached its limit.
    """
    for g in (*_GROUPINGS.values(), *_MEMOS):
        g.clear()  # CPython frees the table too


def grouping(keep: bool, names: frozenset[str] | set[str] | list[str]) -> Grouping:
    """The shared Grouping for keep/names (one per distinct clause across all rules)."""
    k = (keep, frozenset(names))
    g = _GROUPINGS.get(k)
    if g is None:
        g = _GROUPINGS[k] = Grouping(keep, k[1])
    return g


def check_unique(vec: Vector) -> Vector:
    """Raise as Prometheus does when dropping names left two elements with one label set."""
    if len({e.labels for e in vec}) != len(vec):
        raise EvalError("vector cannot contain metrics with the same labelset")
    return vec


def format_value(v: float) -> str:
    """A float as Prometheus' API prints it (strconv.FormatFloat(v, 'f', -1, 64))."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return format(Decimal(repr(v)), "f")


def ms(td: timedelta | None) -> int:
    """A duration in whole milliseconds (0 for None)."""
    return 0 if td is None else td // _MS
