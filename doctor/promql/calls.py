"""Function calls: range functions over matrices and instant-vector functions (mixed into the Engine)."""

from __future__ import annotations

import math
from typing import Any

import promql_parser as pp

from doctor.promql import functions
from doctor.promql.rangefuncs import FUNCTIONS as RANGE_FUNCTIONS
from doctor.promql.rangefuncs import KEEPS_NAME
from doctor.promql.values import (
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
)


class Calls:
    """Evaluation of pp.Call nodes; expects `_eval` and `_ref_time` from the Engine."""

    def _eval(self, node: Any, t: int) -> Value:  # provided by Engine
        raise NotImplementedError

    def _ref_time(self, node: Any, t: int) -> int:  # provided by Engine
        raise NotImplementedError

    def _call(self, node: pp.Call, t: int) -> Value:
        name = node.func.name
        args = node.args
        if name in RANGE_FUNCTIONS:
            return self._range_call(name, args, t)
        if name == "time":
            return Scalar(t / 1000)
        if name == "vector":
            return [Elem((), self._scalar(args[0], t))]
        if name == "scalar":
            v = as_vector(self._eval(args[0], t))
            return Scalar(v[0].v if len(v) == 1 else math.nan)
        if name in functions.MATH:
            return functions.apply_math(name, as_vector(self._eval(args[0], t)))
        if name == "histogram_quantile":
            return functions.histogram_quantile(self._scalar(args[0], t), as_vector(self._eval(args[1], t)))
        if name in ("clamp", "clamp_min", "clamp_max"):
            vec = as_vector(self._eval(args[0], t))
            lo = self._scalar(args[1], t) if name != "clamp_max" else -math.inf
            hi = self._scalar(args[-1], t) if name != "clamp_min" else math.inf
            return functions.clamp(vec, lo, hi)
        if name == "round":
            to = self._scalar(args[1], t) if len(args) > 1 else 1.0
            return functions.round_vec(as_vector(self._eval(args[0], t)), to)
        if name == "label_replace":
            s = [self._string(a, t) for a in args[1:]]
            return functions.label_replace(as_vector(self._eval(args[0], t)), *s)
        if name == "label_join":
            s = [self._string(a, t) for a in args[1:]]
            return functions.label_join(as_vector(self._eval(args[0], t)), s[0], s[1], s[2:])
        if name == "absent":
            return functions.absent(as_vector(self._eval(args[0], t)), _equal_matchers(args[0]))
        if name == "absent_over_time":
            if as_matrix(self._eval(args[0], t)):
                return []
            return functions.absent([], _equal_matchers(args[0]))
        if name in ("sort", "sort_desc"):
            return functions.sort_vec(as_vector(self._eval(args[0], t)), name == "sort_desc")
        raise EvalError(f"unsupported function {name}()")

    def _range_call(self, name: str, args: list[Any], t: int) -> Vector:
        fn = RANGE_FUNCTIONS[name]
        extra: list[float] = []
        if name == "quantile_over_time":
            extra, rng_node = [self._scalar(args[0], t)], args[1]
        else:
            rng_node = args[0]
            if name == "predict_linear":
                extra = [self._scalar(args[1], t)]
        if isinstance(rng_node, pp.MatrixSelector):
            end = self._ref_time(rng_node.vector_selector, t)
            range_ms = ms(rng_node.range)
        elif isinstance(rng_node, pp.SubqueryExpr):
            end = self._ref_time(rng_node, t)
            range_ms = ms(rng_node.range)
        else:
            raise EvalError(f"expected a range vector in call to function {name}()")
        matrix = as_matrix(self._eval(rng_node, t))
        start = end - range_ms
        out: Vector = []
        for r in matrix:
            v = fn(r.ts, r.vs, start, end, range_ms / 1000, extra)
            if v is not None:
                out.append(Elem(r.labels if name in KEEPS_NAME else drop_name(r.labels), v))
        return check_unique(out)

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
