"""Functions over range vectors (`rate`, `*_over_time`, …), ported from Prometheus 2.42 `promql/functions.go`."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from functools import partial
from itertools import islice
from operator import le

from kvdoctor.promql.quantile import quantile

# (ts_ms, values, range_start_ms, range_end_ms, range_s, args) -> value or None (no output); ts and values are
# lists or slices of the store's typed arrays
RangeFn = Callable[[Sequence[int], Sequence[float], int, int, float, list[float]], float | None]


def _extrapolated(
    ts: Sequence[int],
    vs: Sequence[float],
    start: int,
    end: int,
    rng: float,
    _args: list[float],
    *,
    counter: bool,
    rate: bool,
) -> float | None:
    n = len(vs)
    if n < 2:
        return None
    first = vs[0]
    result = vs[-1] - first
    if counter and not (first >= 0 and all(map(le, vs, islice(vs, 1, None)))):  # a reset (or NaN) to correct
        last = 0.0
        for v in vs:
            if v < last:
                result += last
            last = v
    t0, t1 = ts[0], ts[-1]
    to_start = (t0 - start) / 1000
    to_end = (end - t1) / 1000
    sampled = (t1 - t0) / 1000
    avg = sampled / (n - 1)
    if counter and result > 0 and first >= 0:
        to_zero = sampled * (first / result)
        if to_zero < to_start:
            to_start = to_zero
    threshold = avg * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else avg / 2
    interval += to_end if to_end < threshold else avg / 2
    result = result * (interval / sampled)
    if rate:
        result /= rng
    return result


# partials, not wrappers: the pack calls rate once per bucket series per cycle, and a frame less is a tenth of it
_rate = partial(_extrapolated, counter=True, rate=True)
_increase = partial(_extrapolated, counter=True, rate=False)
_delta = partial(_extrapolated, counter=False, rate=False)


def _instant(ts: Sequence[int], vs: Sequence[float], is_rate: bool) -> float | None:
    if len(vs) < 2:
        return None
    last, prev = vs[-1], vs[-2]
    result = last if is_rate and last < prev else last - prev
    interval = ts[-1] - ts[-2]
    if interval == 0:
        return None
    if is_rate:
        result /= interval / 1000
    return result


def _irate(ts, vs, s, e, r, a):
    return _instant(ts, vs, True)


def _idelta(ts, vs, s, e, r, a):
    return _instant(ts, vs, False)


def _kahan_inc(inc: float, total: float, c: float) -> tuple[float, float]:
    t = total + inc
    if abs(total) >= abs(inc):
        c += (total - t) + inc
    elif not math.isinf(t):
        c += (inc - t) + total
    return t, c


def linear_regression(ts: Sequence[int], vs: Sequence[float], intercept_ms: int) -> tuple[float, float]:
    """Least-squares slope (per second) and intercept at intercept_ms, as Prometheus computes them."""
    n = sx = cx = sy = cy = sxy = cxy = sx2 = cx2 = 0.0
    const_y = True
    init_y = vs[0]
    for i, (t, v) in enumerate(zip(ts, vs, strict=True)):
        if const_y and i > 0 and v != init_y:
            const_y = False
        n += 1.0
        x = (t - intercept_ms) / 1e3
        sx, cx = _kahan_inc(x, sx, cx)
        sy, cy = _kahan_inc(v, sy, cy)
        sxy, cxy = _kahan_inc(x * v, sxy, cxy)
        sx2, cx2 = _kahan_inc(x * x, sx2, cx2)
    if const_y:
        if math.isinf(init_y):
            return math.nan, math.nan
        return 0.0, init_y
    sx, sy, sxy, sx2 = sx + cx, sy + cy, sxy + cxy, sx2 + cx2
    cov = sxy - sx * sy / n
    var = sx2 - sx * sx / n
    slope = cov / var if var != 0 else math.copysign(math.inf, cov) if cov else math.nan
    return slope, sy / n - slope * sx / n


def _deriv(ts, vs, s, e, r, a):
    if len(vs) < 2:
        return None
    return linear_regression(ts, vs, ts[0])[0]


def _predict_linear(ts, vs, s, e, r, a):
    if len(vs) < 2:
        return None
    slope, intercept = linear_regression(ts, vs, e)
    return slope * a[0] + intercept


def _changes(ts, vs, s, e, r, a):
    if not vs:
        return None
    prev, n = vs[0], 0
    for v in vs[1:]:
        if v != prev and not (math.isnan(v) and math.isnan(prev)):
            n += 1
        prev = v
    return float(n)


def _resets(ts, vs, s, e, r, a):
    if not vs:
        return None
    return float(sum(1 for p, v in itertools.pairwise(vs) if v < p))


def _avg(ts, vs, s, e, r, a):
    if not vs:
        return None
    mean = c = 0.0
    for count, v in enumerate(vs, 1):
        if math.isinf(mean):
            if math.isinf(v) and (mean > 0) == (v > 0):
                continue
            if not math.isinf(v) and not math.isnan(v):
                continue
        mean, c = _kahan_inc(v / count - mean / count, mean, c)
    return mean if math.isinf(mean) else mean + c


def _sum(ts, vs, s, e, r, a):
    if not vs:
        return None
    total = c = 0.0
    for v in vs:
        total, c = _kahan_inc(v, total, c)
    return total if math.isinf(total + c) else total + c


def _extreme(
    vs: Sequence[float], better: Callable[[float, float], bool], plain: Callable[..., float]
) -> float | None:
    if not vs:
        return None
    total = sum(vs)
    if total == total:  # no NaN: the builtin keeps the first extreme as the loop does
        return plain(vs)
    best = vs[0]
    for v in vs:
        if better(v, best) or math.isnan(best):
            best = v
    return best


def _stdvar(vs: Sequence[float]) -> float:
    count = mean = cmean = aux = caux = 0.0
    for v in vs:
        count += 1
        delta = v - (mean + cmean)
        mean, cmean = _kahan_inc(delta / count, mean, cmean)
        aux, caux = _kahan_inc(delta * (v - (mean + cmean)), aux, caux)
    return (aux + caux) / count


FUNCTIONS: dict[str, RangeFn] = {
    "rate": _rate,
    "increase": _increase,
    "delta": _delta,
    "irate": _irate,
    "idelta": _idelta,
    "deriv": _deriv,
    "predict_linear": _predict_linear,
    "changes": _changes,
    "resets": _resets,
    "avg_over_time": _avg,
    "sum_over_time": _sum,
    "count_over_time": lambda ts, vs, s, e, r, a: float(len(vs)) if vs else None,
    "min_over_time": lambda ts, vs, s, e, r, a: _extreme(vs, lambda x, y: x < y, min),
    "max_over_time": lambda ts, vs, s, e, r, a: _extreme(vs, lambda x, y: x > y, max),
    "last_over_time": lambda ts, vs, s, e, r, a: vs[-1] if vs else None,
    "present_over_time": lambda ts, vs, s, e, r, a: 1.0 if vs else None,
    "quantile_over_time": lambda ts, vs, s, e, r, a: quantile(a[0], vs) if vs else None,
    "stddev_over_time": lambda ts, vs, s, e, r, a: math.sqrt(_stdvar(vs)) if vs else None,
    "stdvar_over_time": lambda ts, vs, s, e, r, a: _stdvar(vs) if vs else None,
}
# Functions whose result keeps the metric name (all others drop it).
KEEPS_NAME = {"last_over_time"}
# The scalar argument position (before the range) of functions taking one.
SCALAR_FIRST = {"quantile_over_time"}
SCALAR_AFTER = {"predict_linear"}
