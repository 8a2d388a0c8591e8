"""Instant-vector functions: math, clamping, labels, histogram_quantile, absent, scalar/vector, sort."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from kvdoctor.promql.quantile import bucket_quantile
from kvdoctor.promql.values import (
    NAME,
    Elem,
    EvalError,
    Labels,
    Vector,
    check_unique,
    drop_name,
    get_label,
    new,
    remembered,
    set_label,
)

_LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


def _round(v: float, to_nearest: float) -> float:
    inv = 1.0 / to_nearest
    return math.floor(v * inv + 0.5) / inv


def _safe(fn: Callable[[float], float]) -> Callable[[float], float]:
    def wrapped(v: float) -> float:
        try:
            return fn(v)
        except (ValueError, OverflowError):
            if v == 0 and fn in (math.log, math.log2, math.log10):
                return -math.inf
            return math.nan

    return wrapped


def _sgn(v: float) -> float:
    if math.isnan(v):
        return v
    return 1.0 if v > 0 else -1.0 if v < 0 else 0.0


MATH: dict[str, Callable[[float], float]] = {
    "abs": abs,
    "ceil": lambda v: v if not math.isfinite(v) else float(math.ceil(v)),
    "floor": lambda v: v if not math.isfinite(v) else float(math.floor(v)),
    "exp": _safe(math.exp),
    "ln": _safe(math.log),
    "log2": _safe(math.log2),
    "log10": _safe(math.log10),
    "sqrt": _safe(math.sqrt),
    "sgn": _sgn,
}


def apply_math(name: str, vec: Vector) -> Vector:
    """A one-argument math function; drops the metric name."""
    fn = MATH[name]
    return check_unique([Elem(drop_name(e.labels), fn(e.v)) for e in vec])


def clamp(vec: Vector, lo: float, hi: float) -> Vector:
    """clamp(v, min, max): empty when max < min."""
    if hi < lo:
        return []
    return check_unique([Elem(drop_name(e.labels), max(lo, min(hi, e.v))) for e in vec])


def round_vec(vec: Vector, to_nearest: float) -> Vector:
    """round(v, to_nearest=1)."""
    return check_unique([Elem(drop_name(e.labels), _round(e.v, to_nearest)) for e in vec])


def _go_expand(template: str, m: re.Match[str]) -> str:
    """Expand $1, ${1}, $name, ${name} as Go's regexp.Expand does (unknown groups expand to "")."""
    out: list[str] = []
    i = 0
    while i < len(template):
        c = template[i]
        if c != "$" or i + 1 >= len(template):
            out.append(c)
            i += 1
            continue
        nxt = template[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
            continue
        if nxt == "{":
            end = template.find("}", i + 2)
            name = template[i + 2 : end] if end != -1 else ""
            if end == -1 or not re.fullmatch(r"[A-Za-z0-9_]+", name):
                out.append(c)
                i += 1
                continue
            i = end + 1
        else:
            mm = re.match(r"[A-Za-z0-9_]+", template[i + 1 :])
            if not mm:
                out.append(c)
                i += 1
                continue
            name = mm.group(0)
            i += 1 + len(name)
        out.append(_group(m, name))
    return "".join(out)


def _group(m: re.Match[str], name: str) -> str:
    try:
        g = m.group(int(name)) if name.isdigit() else m.group(name)
    except IndexError:
        return ""
    return g or ""


def go_regex(pattern: str) -> re.Pattern[str]:
    """Compile an RE2 pattern anchored as Prometheus anchors label regexes."""
    try:
        return re.compile(f"(?:{pattern})\\Z", re.S)
    except re.error as exc:
        raise EvalError(f"invalid regular expression {pattern!r}: {exc}") from None


def label_replace(vec: Vector, dst: str, repl: str, src: str, regex: str) -> Vector:
    """label_replace(v, dst, replacement, src, regex)."""
    rx = go_regex(regex)
    if not _LABEL_NAME_RE.match(dst):
        raise EvalError(f"invalid destination label name in label_replace(): {dst}")
    out: Vector = []
    for e in vec:
        m = rx.match(get_label(e.labels, src))
        if m is None:
            out.append(e)
            continue
        out.append(Elem(set_label(e.labels, dst, _go_expand(repl, m)), e.v))
    return check_unique(out)


def label_join(vec: Vector, dst: str, sep: str, srcs: list[str]) -> Vector:
    """label_join(v, dst, separator, src...)."""
    if not _LABEL_NAME_RE.match(dst):
        raise EvalError(f"invalid destination label name in label_join(): {dst}")
    out = [Elem(set_label(e.labels, dst, sep.join(get_label(e.labels, s) for s in srcs)), e.v) for e in vec]
    return check_unique(out)


class _Buckets(dict[Labels, tuple[Labels, float | None]]):
    """A bucket's label set -> (its histogram's label set, its upper bound or None), memoized as Grouping is.

    The pack's quantiles read every bucket of every target each cycle, with the same label tuples: one lookup each
    instead of finding `le`, parsing it and projecting the rest. Forgotten with the groupings (forget_groupings).
    """

    def __init__(self) -> None:
        super().__init__()
        self._keys: dict[Labels, Labels] = {}  # one histogram label set, shared by its buckets
        self._bounds: dict[str, float | None] = {}

    def __missing__(self, labels: Labels) -> tuple[Labels, float | None]:
        le = get_label(labels, "le")
        upper = self._bounds.get(le)
        if upper is None and le not in self._bounds:
            try:
                upper = float(le)
            except ValueError:
                upper = None
            if len(self._bounds) < 100_000:
                self._bounds[le] = upper
        key = tuple(p for p in labels if p[0] != "le" and p[0] != NAME)
        if len(self) >= 1 << 22:
            self.clear()
        split = self[labels] = (self._keys.setdefault(key, key), upper)
        return split

    def clear(self) -> None:
        """Forget every label set."""
        super().clear()
        self._keys.clear()


_BUCKETS = remembered(_Buckets())


def histogram_quantile(q: float, vec: Vector) -> Vector:
    """histogram_quantile(φ, buckets): one value per label set without `le`."""
    groups: dict[Labels, list[tuple[float, float]]] = {}
    split = _BUCKETS
    for labels, v in vec:
        key, upper = split[labels]
        if upper is None:
            continue  # a bucket without a parsable `le` is ignored, as in Prometheus
        b = groups.get(key)
        if b is None:
            groups[key] = [(upper, v)]
        else:
            b.append((upper, v))
    return [new(Elem, (k, bucket_quantile(q, b))) for k, b in groups.items()]


def absent(vec: Vector, equal_matchers: list[tuple[str, str]]) -> Vector:
    """absent(v): 1 with the selector's equality labels when v is empty."""
    if vec:
        return []
    labels: dict[str, str] = {}
    seen: set[str] = set()
    for name, value in equal_matchers:
        if name == NAME:
            continue
        if name in seen:  # conflicting equality matchers on one label leave it out
            labels.pop(name, None)
            continue
        seen.add(name)
        labels[name] = value
    return [Elem(tuple(sorted(labels.items())), 1.0)]


def sort_vec(vec: Vector, desc: bool) -> Vector:
    """sort / sort_desc (NaN last)."""
    return sorted(vec, key=lambda e: (math.isnan(e.v), -e.v if desc else e.v))
