"""Aggregation operators: sum, avg, min, max, count, group, stddev, stdvar, topk, bottomk, quantile (Prometheus 2.42)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from kvdoctor.promql.quantile import quantile
from kvdoctor.promql.values import Elem, EvalError, Labels, Vector, grouping, new

SUPPORTED = {"sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile"}
SELECTING = {"topk", "bottomk"}  # they return input elements, not a value per group


def aggregate(
    op: str, vec: Sequence[tuple[Labels, float]], by: bool, names: list[str], param: float | None
) -> Vector:
    """Aggregate vec (elements, or (labels, value) pairs but for topk/bottomk) grouped by (or without) names."""
    group_of = grouping(by, names)
    if op in SELECTING:
        chosen: dict[Labels, list[Elem]] = {}
        for e in vec:
            chosen.setdefault(group_of(e[0]), []).append(e)  # type: ignore[arg-type]
        return _topk(op, chosen, param)
    groups: dict[Labels, list[float]] = {}
    for labels, v in vec:
        key = group_of(labels)
        values = groups.get(key)
        if values is None:
            groups[key] = [v]
        else:
            values.append(v)
    if op == "sum":  # the pack's common case, without a call per group
        return [new(Elem, (key, sum(vs))) for key, vs in groups.items()]
    return [new(Elem, (key, _reduce(op, vs, param))) for key, vs in groups.items()]


def _reduce(op: str, vs: list[float], param: float | None) -> float:
    if op == "sum":
        return sum(vs)  # plain left-to-right addition, as Prometheus does
    if op == "avg":
        return _mean(vs)
    if op == "count":
        return float(len(vs))
    if op == "group":
        return 1.0
    if op == "min":
        return _pick(vs, lambda a, b: a < b)
    if op == "max":
        return _pick(vs, lambda a, b: a > b)
    if op in ("stddev", "stdvar"):
        count, mean, m2 = 1.0, vs[0], 0.0  # seeded with the first value, as Prometheus does
        for v in vs[1:]:
            count += 1
            delta = v - mean
            mean += delta / count
            m2 += delta * (v - mean)
        var = m2 / count
        return math.sqrt(var) if op == "stddev" else var
    if op == "quantile":
        return quantile(param if param is not None else math.nan, vs)
    raise EvalError(f"unsupported aggregation {op!r}")


def _mean(vs: list[float]) -> float:
    mean = 0.0
    for count, v in enumerate(vs, 1):
        if math.isinf(mean):
            if math.isinf(v) and (mean > 0) == (v > 0):
                continue
            if not math.isinf(v) and not math.isnan(v):
                continue
        mean += v / count - mean / count
    return mean


def _pick(vs: list[float], better) -> float:  # type: ignore[no-untyped-def]
    best = vs[0]
    for v in vs[1:]:
        if better(v, best) or math.isnan(best):
            best = v
    return best


def _topk(op: str, groups: dict[Labels, list[Elem]], param: float | None) -> Vector:
    if param is None or math.isnan(param):
        raise EvalError(f"Parameter value is NaN for {op}")
    k = int(param)
    if k < 1:
        return []
    out: Vector = []
    for elems in groups.values():
        out.extend(_go_heap_select(elems, k, op == "topk"))
    return out


def _go_heap_select(elems: list[Elem], k: int, top: bool) -> list[Elem]:
    """Prometheus 2.42's topk/bottomk: a Go container/heap of size k, root replaced only by a strictly better value."""

    def less(a: Elem, b: Elem) -> bool:
        if math.isnan(a.v):
            return True
        return a.v < b.v if top else a.v > b.v

    def better(s: Elem, root: Elem) -> bool:
        if top:
            return root.v < s.v or (math.isnan(root.v) and not math.isnan(s.v))
        return root.v > s.v or (math.isnan(root.v) and not math.isnan(s.v))

    h: list[Elem] = []
    for e in elems:
        if len(h) < k:
            h.append(e)
            _up(h, len(h) - 1, less)
        elif better(e, h[0]):
            h[0] = e
            _down(h, 0, len(h), less)
    return h


def _up(h: list[Elem], j: int, less) -> None:  # type: ignore[no-untyped-def]
    while j > 0:
        i = (j - 1) // 2
        if i == j or not less(h[j], h[i]):
            break
        h[i], h[j] = h[j], h[i]
        j = i


def _down(h: list[Elem], i0: int, n: int, less) -> None:  # type: ignore[no-untyped-def]
    i = i0
    while True:
        j1 = 2 * i + 1
        if j1 >= n or j1 < 0:
            break
        j = j1
        j2 = j1 + 1
        if j2 < n and less(h[j2], h[j1]):
            j = j2
        if not less(h[j], h[i]):
            break
        h[i], h[j] = h[j], h[i]
        i = j
