"""Binary operators: arithmetic, comparison and set operations with vector matching (Prometheus 2.42)."""

from __future__ import annotations

import math
from collections.abc import Callable

from kvdoctor.promql.values import (
    NAME,
    Elem,
    EvalError,
    Labels,
    Scalar,
    Vector,
    drop_name,
    get_label,
    grouping,
    new,
    set_label,
)

ARITH = {"+", "-", "*", "/", "%", "^"}
COMPARE = {"==", "!=", ">", "<", ">=", "<="}
SETOPS = {"and", "or", "unless"}


def _div(a: float, b: float) -> float:
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _mod(a: float, b: float) -> float:
    if b == 0 or math.isinf(a) or math.isnan(a) or math.isnan(b):
        return math.nan
    return math.fmod(a, b)


def _pow(a: float, b: float) -> float:
    try:
        r = math.pow(a, b)
    except OverflowError:
        return math.inf
    except ValueError:
        if a == 0 and b < 0:
            return math.inf
        return math.nan
    return r


OPS: dict[str, Callable[[float, float], float]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": _div,
    "%": _mod,
    "^": _pow,
}
CMPS: dict[str, Callable[[float, float], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
}


def elem_op(op: str, lhs: float, rhs: float) -> tuple[float, bool]:
    """Apply op; returns (value, keep) where keep is the comparison outcome."""
    if op in OPS:
        return OPS[op](lhs, rhs), True
    return lhs, CMPS[op](lhs, rhs)


def scalar_scalar(op: str, lhs: float, rhs: float, return_bool: bool) -> Scalar:
    """scalar op scalar."""
    v, keep = elem_op(op, lhs, rhs)
    if op in COMPARE:
        v = 1.0 if keep else 0.0
    return Scalar(v)


def vector_scalar(op: str, vec: Vector, s: float, scalar_left: bool, return_bool: bool) -> Vector:
    """vector op scalar (or scalar op vector when scalar_left)."""
    fn = OPS.get(op)
    if fn is not None:  # arithmetic: every element, without its name
        if scalar_left:
            return [new(Elem, (drop_name(e.labels), fn(s, e.v))) for e in vec]
        return [new(Elem, (drop_name(e.labels), fn(e.v, s))) for e in vec]
    cmp = CMPS[op]
    if return_bool:  # 1 or 0 for every element, without its name
        return [
            new(Elem, (drop_name(e.labels), 1.0 if (cmp(s, e.v) if scalar_left else cmp(e.v, s)) else 0.0))
            for e in vec
        ]
    # a filter keeps the element as it is (its value, whichever side the scalar is on, and its name)
    if scalar_left:
        return [e for e in vec if cmp(s, e.v)]
    return [e for e in vec if cmp(e.v, s)]


class Matching:
    """Vector matching of a binary expression: on/ignoring labels, cardinality, group_x include labels."""

    def __init__(self, card: str, on: bool, labels: list[str], include: list[str]) -> None:
        self.card, self.on, self.labels, self.include = card, on, set(labels), include
        self.signature = grouping(on, self.labels)  # the labels two elements must share to match


def set_op(op: str, lhs: Vector, rhs: Vector, m: Matching) -> Vector:
    """and / or / unless."""
    if op == "and":
        sigs = {m.signature(e.labels) for e in rhs}
        return [e for e in lhs if m.signature(e.labels) in sigs]
    if op == "unless":
        sigs = {m.signature(e.labels) for e in rhs}
        return [e for e in lhs if m.signature(e.labels) not in sigs]
    left = {m.signature(e.labels) for e in lhs}
    return lhs + [e for e in rhs if m.signature(e.labels) not in left]


def _result_labels(ls: Labels, rs: Labels, op: str, m: Matching) -> Labels:
    labels = drop_name(ls) if op in ARITH else ls
    if m.card == "one-to-one":
        if m.on:
            labels = tuple(p for p in labels if p[0] in m.labels)
        else:
            labels = tuple(p for p in labels if p[0] not in m.labels)
    for name in m.include:
        labels = set_label(labels, name, get_label(rs, name))
    return labels


def vector_vector(op: str, lhs: Vector, rhs: Vector, m: Matching, return_bool: bool) -> Vector:
    """Arithmetic or comparison between two vectors with one-to-one or many-to-one matching."""
    if m.card == "one-to-many":
        lhs, rhs = rhs, lhs
    right: dict[Labels, Elem] = {}
    for e in rhs:
        sig = m.signature(e.labels)
        if sig in right:
            side = "left" if m.card == "one-to-many" else "right"
            raise EvalError(
                f"found duplicate series for the match group {dict(sig)} on the {side} hand-side of the "
                "operation;many-to-many matching not allowed: matching labels must be unique on one side"
            )
        right[sig] = e
    matched: dict[Labels, set[Labels]] = {}
    out: Vector = []
    # one-to-one on labels other than the name, or ignoring labels in arithmetic (the name goes): the result's
    # labels are the match signature itself, already computed
    plain = m.card == "one-to-one" and not m.include and (NAME not in m.labels if m.on else op in ARITH)
    for e in lhs:
        sig = m.signature(e.labels)
        r = right.get(sig)
        if r is None:
            continue
        a, b = (r.v, e.v) if m.card == "one-to-many" else (e.v, r.v)
        v, keep = elem_op(op, a, b)
        if return_bool:
            v, keep = (1.0 if keep else 0.0), True
        if not keep:
            continue
        labels = sig if plain else _result_labels(e.labels, r.labels, op, m)
        if return_bool:
            labels = drop_name(labels)
        seen = matched.get(sig)
        if m.card == "one-to-one":
            if seen is not None:
                raise EvalError(
                    "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)"
                )
            matched[sig] = set()
        else:
            if seen is None:
                seen = matched[sig] = set()
            elif labels in seen:
                raise EvalError("multiple matches for labels: grouping labels must ensure unique matches")
            seen.add(labels)
        out.append(new(Elem, (labels, v)))
    return out
