"""Evaluate promql-parser ASTs over the store at one instant, with Prometheus 2.42 semantics."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import promql_parser as pp

from kvdoctor.promql import aggregate, binary, functions
from kvdoctor.promql.calls import Calls, as_vector
from kvdoctor.promql.nodes import names_read, quoted
from kvdoctor.promql.values import (
    NAME,
    Elem,
    EvalError,
    Matrix,
    Range,
    Scalar,
    String,
    Value,
    Vector,
    check_unique,
    drop_name,
    ms,
    new,
)
from kvdoctor.samples import Labels
from kvdoctor.store import Series, Store

_CARD = (
    (pp.VectorMatchCardinality.OneToOne, "one-to-one"),
    (pp.VectorMatchCardinality.ManyToOne, "many-to-one"),
    (pp.VectorMatchCardinality.OneToMany, "one-to-many"),
    (pp.VectorMatchCardinality.ManyToMany, "many-to-many"),
)


class Evaluator(Calls):
    """Evaluates expressions against a Store; one Evaluator can serve many evaluations."""

    def __init__(self, store: Store, subquery_step_ms: int = 60_000) -> None:
        self.store = store
        self.lookback_ms = store.lookback_ms
        self.subquery_step_ms = subquery_step_ms
        self._regex: dict[str, re.Pattern[str]] = {}
        # id(node) -> (node, its text, the metric names it reads); the node is kept so its id stays unique
        self._nodes: dict[int, tuple[Any, str, frozenset[str] | None]] = {}
        self._memo: dict[tuple[str, int], Value] | None = None
        self._readers: dict[
            str | None, list[tuple[str, int]]
        ] = {}  # name (None: any) -> memo keys reading it
        # selector text -> (the name's series list it was matched against, the matches)
        self._selected: dict[str, tuple[list[Series], list[Series]]] = {}
        self.computed = 0  # subexpressions evaluated (not served from the memo), for tests and benchmarks

    def instant(self, expr: pp.Expr, t_ms: int) -> Value:
        """The value of expr at t_ms."""
        return self._eval(expr, t_ms)

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Within the block, an expression met again at the same instant (in any rule) is not evaluated again."""
        self._memo, self._readers = {}, {}
        try:
            yield
        finally:
            self._memo, self._readers = None, {}

    def written(self, name: str) -> None:
        """Series named `name` just changed (a recording rule wrote them): forget shared results that read them."""
        memo = self._memo
        if memo:
            for key in (*self._readers.pop(name, ()), *self._readers.pop(None, ())):
                memo.pop(key, None)

    def _node(self, node: Any) -> tuple[Any, str, frozenset[str] | None]:
        known = self._nodes.get(id(node))
        if known is None:
            if len(self._nodes) > 100_000:  # ad-hoc queries each bring new nodes
                self._nodes.clear()
                self._selected.clear()
            text = str(node)
            if quoted(node):  # str() prints strings unescaped: two different expressions could print alike
                text = f"{text}\x00{id(node)}"
            known = self._nodes[id(node)] = (node, text, names_read(node))
        return known

    # -- dispatch ---------------------------------------------------------------------------------------
    def _eval(self, node: Any, t: int) -> Value:
        memo = self._memo
        if memo is None or isinstance(node, pp.NumberLiteral | pp.StringLiteral):
            return self._compute(node, t)
        _, text, names = self._node(node)
        key = (text, t)
        hit = memo.get(key)
        if hit is not None:
            return hit
        value = self._compute(node, t)
        memo[key] = value
        for name in names if names is not None else (None,):
            self._readers.setdefault(name, []).append(key)
        return value

    def _compute(self, node: Any, t: int) -> Value:
        self.computed += 1
        if isinstance(node, pp.NumberLiteral):
            return Scalar(float(node.val))
        if isinstance(node, pp.StringLiteral):
            return String(node.val)
        if isinstance(node, pp.ParenExpr):
            return self._eval(node.expr, t)
        if isinstance(node, pp.VectorSelector):
            return self._vector(node, t)
        if isinstance(node, pp.MatrixSelector):
            return self._matrix(node, t)
        if isinstance(node, pp.SubqueryExpr):
            return self._subquery(node, t)
        if isinstance(node, pp.UnaryExpr):
            return self._negate(self._eval(node.expr, t))
        if isinstance(node, pp.BinaryExpr):
            return self._binary(node, t)
        if isinstance(node, pp.AggregateExpr):
            return self._aggregate(node, t)
        if isinstance(node, pp.Call):
            return self._call(node, t)
        raise EvalError(f"unsupported expression {type(node).__name__}")

    # -- selectors --------------------------------------------------------------------------------------
    def _ref_time(self, node: Any, t: int) -> int:
        at = node.at
        if at is not None:
            t = round(at.at.timestamp() * 1000) if at.type == pp.AtModifierType.At else t
        return t - ms(node.offset)

    def _matching(self, node: pp.VectorSelector) -> list[Series]:
        """The selector's series in label order (Prometheus' order; topk ties depend on it), from the name index.

        The matches are kept until a series of that name comes or goes (the store then hands out a new list).
        """
        base = self.store.sorted_series(node.name)
        matchers = node.matchers.matchers
        if not matchers:
            return base
        text = self._node(node)[1]
        hit = self._selected.get(text)
        if hit is not None and hit[0] is base:
            return hit[1]
        out = [s for s in base if all(self._match(m, s.labels) for m in matchers)]
        self._selected[text] = (base, out)
        return out

    def _match(self, m: Any, labels: Labels) -> bool:
        value = ""
        for k, v in labels:
            if k == m.name:
                value = v
                break
        op = m.op
        if op == pp.MatchOp.Equal:
            return value == m.value
        if op == pp.MatchOp.NotEqual:
            return value != m.value
        rx = self._regex.get(m.value)
        if rx is None:
            rx = self._regex[m.value] = functions.go_regex(m.value)
        hit = rx.match(value) is not None
        return hit if op == pp.MatchOp.Re else not hit

    def _vector(self, node: pp.VectorSelector, t: int) -> Vector:
        ref = self._ref_time(node, t)
        lookback = self.lookback_ms
        out: Vector = []
        for s in self._matching(node):
            v = s.at(ref, lookback)
            if v is not None:
                out.append(new(Elem, (s.labels, v)))
        return out

    def _matrix(self, node: pp.MatrixSelector, t: int) -> Matrix:
        vs = node.vector_selector
        end = self._ref_time(vs, t)
        start = end - ms(node.range)
        out: Matrix = []
        for s in self._matching(vs):
            ts, values = s.window(start, end)
            if ts:
                out.append(Range(s.labels, ts, values))
        return out

    def _subquery(self, node: pp.SubqueryExpr, t: int) -> Matrix:
        step = ms(node.step) or self.subquery_step_ms
        end = self._ref_time(node, t)
        lo = end - ms(node.range)
        start = step * (lo // step)
        if start < lo:
            start += step
        series: dict[Labels, Range] = {}
        for st in range(start, end + 1, step):
            val = self._eval(node.expr, st)
            if isinstance(val, Scalar):
                val = [Elem((), val.v)]
            for e in as_vector(val):
                r = series.get(e.labels)
                if r is None:
                    r = series[e.labels] = Range(e.labels, [], [])
                r.ts.append(st)
                r.vs.append(e.v)
        return list(series.values())

    # -- operators --------------------------------------------------------------------------------------
    def _negate(self, val: Value) -> Value:
        if isinstance(val, Scalar):
            return Scalar(-val.v)
        if isinstance(val, list) and (not val or isinstance(val[0], Elem)):
            return check_unique([Elem(drop_name(e.labels), -e.v) for e in val])  # type: ignore[union-attr]
        raise EvalError("unary minus is only allowed on scalars and instant vectors")

    def _binary(self, node: pp.BinaryExpr, t: int) -> Value:
        op = str(node.op)
        mod = node.modifier
        return_bool = bool(mod and mod.return_bool)
        lhs, rhs = self._eval(node.lhs, t), self._eval(node.rhs, t)
        if isinstance(lhs, Scalar) and isinstance(rhs, Scalar):
            return binary.scalar_scalar(op, lhs.v, rhs.v, return_bool)
        if isinstance(lhs, Scalar):
            return binary.vector_scalar(op, as_vector(rhs), lhs.v, True, return_bool)
        if isinstance(rhs, Scalar):
            return binary.vector_scalar(op, as_vector(lhs), rhs.v, False, return_bool)
        matching = _matching_of(mod, op)
        if op in binary.SETOPS:
            return binary.set_op(op, as_vector(lhs), as_vector(rhs), matching)
        return binary.vector_vector(op, as_vector(lhs), as_vector(rhs), matching, return_bool)

    def _aggregate(self, node: pp.AggregateExpr, t: int) -> Vector:
        op = str(node.op)
        param = None
        if node.param is not None:
            p = self._eval(node.param, t)
            if not isinstance(p, Scalar):
                raise EvalError(f"expected scalar parameter for {op}")
            param = p.v
        mod = node.modifier
        by = mod is None or mod.type == pp.AggModifierType.By
        labels = list(mod.labels) if mod is not None else []
        rows = None
        if (
            op not in aggregate.SELECTING
            and not (by and NAME in labels)
            and not self._shared_at(node.expr, t)
        ):
            # `sum by (…) (rate(x[1m]))`: grouping the series' own labels gives the groups rate's output would
            # (by/without never keep the name here), so rate's elements are not built
            rows = self.range_rows(node.expr, t)
        vec = rows if rows is not None else as_vector(self._eval(node.expr, t))
        return aggregate.aggregate(op, vec, by, labels, param)

    def _shared_at(self, node: Any, t: int) -> bool:
        """True when node's value at t is in the cycle's memo already."""
        return self._memo is not None and (self._node(node)[1], t) in self._memo


def _matching_of(mod: Any, op: str) -> binary.Matching:
    if mod is None:
        card = "many-to-many" if op in binary.SETOPS else "one-to-one"
        return binary.Matching(card, False, [], [])
    m = mod.matching
    on = m is not None and m.type == pp.LabelModifierType.Include
    labels = list(m.labels) if m is not None else []
    card = next(name for c, name in _CARD if c == mod.card)
    return binary.Matching(card, on, labels, list(mod.group_labels or []))
