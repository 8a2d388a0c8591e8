"""Function calls: range functions over matrices and instant-vector functions (mixed into the Evaluator)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import promql_parser as pp

from kvdoctor.promql import functions
from kvdoctor.promql.rangefuncs import FUNCTIONS as RANGE_FUNCTIONS
from kvdoctor.promql.rangefuncs import KEEPS_NAME, SCALAR_AFTER, SCALAR_FIRST, RangeFn
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
from kvdoctor.store import Series
from kvdoctor.store.series import spans


class Calls:
    """Evaluation of pp.Call nodes; expects `_eval` and `_ref_time` from the Evaluator."""

    def _eval(self, node: Any, t: int) -> Value:  # provided by Evaluator
        raise NotImplementedError

    def _ref_time(self, node: Any, t: int) -> int:  # provided by Evaluator
        raise NotImplementedError

    def _matching(self, node: pp.VectorSelector) -> list[Series]:  # provided by Evaluator
        raise NotImplementedError

    def _call(self, node: pp.Call, t: int) -> Value:
        name, args = node.func.name, node.args
        if not is_supported(name):
            raise EvalError(f"unsupported function {name}()")
        if name in RANGE_FUNCTIONS:
            return self._range_call(name, args, t)
        if name in functions.MATH:
            return functions.apply_math(name, as_vector(self._eval(args[0], t)))
        return INSTANT_FUNCTIONS[name](self, name, args, t)

    def _fn_time(self, name: str, args: list[Any], t: int) -> Value:
        return Scalar(t / 1000)

    def _fn_vector(self, name: str, args: list[Any], t: int) -> Value:
        return [Elem((), self._scalar(args[0], t))]

    def _fn_scalar_of(self, name: str, args: list[Any], t: int) -> Value:
        v = as_vector(self._eval(args[0], t))
        return Scalar(v[0].v if len(v) == 1 else math.nan)

    def _fn_histogram_quantile(self, name: str, args: list[Any], t: int) -> Value:
        return functions.histogram_quantile(self._scalar(args[0], t), as_vector(self._eval(args[1], t)))

    def _fn_clamp(self, name: str, args: list[Any], t: int) -> Value:
        vec = as_vector(self._eval(args[0], t))
        lo = self._scalar(args[1], t) if name != "clamp_max" else -math.inf
        hi = self._scalar(args[-1], t) if name != "clamp_min" else math.inf
        return functions.clamp(vec, lo, hi)

    def _fn_round(self, name: str, args: list[Any], t: int) -> Value:
        to = self._scalar(args[1], t) if len(args) > 1 else 1.0
        return functions.round_vec(as_vector(self._eval(args[0], t)), to)

    def _fn_label_replace(self, name: str, args: list[Any], t: int) -> Value:
        s = [self._string(a, t) for a in args[1:]]
        return functions.label_replace(as_vector(self._eval(args[0], t)), *s)

    def _fn_label_join(self, name: str, args: list[Any], t: int) -> Value:
        s = [self._string(a, t) for a in args[1:]]
        return functions.label_join(as_vector(self._eval(args[0], t)), s[0], s[1], s[2:])

    def _fn_absent(self, name: str, args: list[Any], t: int) -> Value:
        return functions.absent(as_vector(self._eval(args[0], t)), _equal_matchers(args[0]))

    def _fn_absent_over_time(self, name: str, args: list[Any], t: int) -> Value:
        if as_matrix(self._eval(args[0], t)):
            return []
        return functions.absent([], _equal_matchers(args[0]))

    def _fn_sort(self, name: str, args: list[Any], t: int) -> Value:
        return functions.sort_vec(as_vector(self._eval(args[0], t)), name == "sort_desc")

    def _range_call(self, name: str, args: list[Any], t: int) -> Vector:
        fn = RANGE_FUNCTIONS[name]
        rng_node = args[1] if name in SCALAR_FIRST else args[0]
        extra = self._range_extra(name, args, t)
        if isinstance(rng_node, pp.MatrixSelector):
            keep = name in KEEPS_NAME
            out = [
                new(Elem, (labels if keep else drop_name(labels), v))
                for labels, v in self._rows(fn, rng_node, extra, t)
            ]
            # series of one name stay distinct without it; a selector by regex on the name may not
            return out if keep or rng_node.vector_selector.name else check_unique(out)
        if not isinstance(rng_node, pp.SubqueryExpr):
            raise EvalError(f"expected a range vector in call to function {name}()")
        end = self._ref_time(rng_node, t)
        range_ms = ms(rng_node.range)
        matrix = as_matrix(self._eval(rng_node, t))
        start = end - range_ms
        out = []
        for r in matrix:
            v = fn(r.ts, r.vs, start, end, range_ms / 1000, extra)
            if v is not None:
                out.append(Elem(r.labels if name in KEEPS_NAME else drop_name(r.labels), v))
        return check_unique(out)

    def _range_extra(self, name: str, args: list[Any], t: int) -> list[float]:
        if name in SCALAR_FIRST:
            return [self._scalar(args[0], t)]
        if name in SCALAR_AFTER:
            return [self._scalar(args[1], t)]
        return []

    def range_rows(self, node: Any, t: int) -> list[tuple[Labels, float]] | None:
        """A range function over a selector of one metric name as (each series' own labels, value), or None.

        What an aggregation over `rate(x[1m])` needs: it groups the values by labels it picks, so the function's
        own output (elements without the name, checked for duplicates) need not be built.
        """
        if not isinstance(node, pp.Call) or node.func.name not in RANGE_FUNCTIONS:
            return None
        name, args = node.func.name, node.args
        rng_node = args[1] if name in SCALAR_FIRST else args[0]
        if not isinstance(rng_node, pp.MatrixSelector) or not rng_node.vector_selector.name:
            return None
        return self._rows(RANGE_FUNCTIONS[name], rng_node, self._range_extra(name, args, t), t)

    def _rows(
        self, fn: RangeFn, node: pp.MatrixSelector, extra: list[float], t: int
    ) -> list[tuple[Labels, float]]:
        """fn over each of the selector's series, read straight from the store (no matrix built or kept)."""
        vs = node.vector_selector
        end = self._ref_time(vs, t)
        range_ms = ms(node.range)
        start, range_s = end - range_ms, range_ms / 1000
        out = []
        for s, ts, values in spans(self._matching(vs), start, end):
            if ts:
                v = fn(ts, values, start, end, range_s, extra)
                if v is not None:
                    out.append((s.labels, v))
        return out

    def _scalar(self, node: Any, t: int) -> float:
        v = self._eval(node, t)
        if not isinstance(v, Scalar):
            raise EvalError("expected a scalar argument")
        return v.v

    def _string(self, node: Any, t: int) -> str:
        v = self._eval(node, t)
        if not isinstance(v, String):
            raise EvalError("expected a string argument")
        return v.s


# The instant-vector functions besides MATH; with RANGE_FUNCTIONS and MATH the one table of what is supported,
# read by dispatch above and by the load-time check (check.py).
INSTANT_FUNCTIONS: dict[str, Callable[[Calls, str, list[Any], int], Value]] = {
    "time": Calls._fn_time,
    "vector": Calls._fn_vector,
    "scalar": Calls._fn_scalar_of,
    "histogram_quantile": Calls._fn_histogram_quantile,
    "clamp": Calls._fn_clamp,
    "clamp_min": Calls._fn_clamp,
    "clamp_max": Calls._fn_clamp,
    "round": Calls._fn_round,
    "label_replace": Calls._fn_label_replace,
    "label_join": Calls._fn_label_join,
    "absent": Calls._fn_absent,
    "absent_over_time": Calls._fn_absent_over_time,
    "sort": Calls._fn_sort,
    "sort_desc": Calls._fn_sort,
}


def is_supported(name: str) -> bool:
    """True when the evaluator implements the function `name` (the load-time check asks this too)."""
    return name in RANGE_FUNCTIONS or name in functions.MATH or name in INSTANT_FUNCTIONS


def as_vector(v: Value) -> Vector:
    """v as an instant vector, or EvalError."""
    if isinstance(v, list) and (not v or isinstance(v[0], Elem)):
        return v  # type: ignore[return-value]
    raise EvalError(f"expected an instant vector, got {type(v).__name__.lower()}")


def as_matrix(v: Value) -> Matrix:
    """v as a range vector, or EvalError."""
    if isinstance(v, list) and (not v or isinstance(v[0], Range)):
        return v  # type: ignore[return-value]
    raise EvalError(f"expected a range vector, got {type(v).__name__.lower()}")


def _equal_matchers(node: Any) -> list[tuple[str, str]]:
    if isinstance(node, pp.MatrixSelector):
        node = node.vector_selector
    if not isinstance(node, pp.VectorSelector):
        return []
    pairs = [(m.name, m.value) for m in node.matchers.matchers if m.op == pp.MatchOp.Equal]
    if node.name:
        pairs.append((NAME, node.name))
    return pairs
