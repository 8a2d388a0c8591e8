"""Compare two `/api/v1/query` `data` objects the way a user would: result type, label sets, values."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REL_TOL = 1e-9
ABS_TOL = 1e-12
TS_TOL = 0.001  # seconds: evaluation timestamps are milliseconds

Query = Callable[[str, float], dict[str, Any]]


def load_exprs(path: str | Path) -> list[str]:
    """Expressions from a file, one a line; blank lines and `#` comments are skipped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def values_equal(a: str | float, b: str | float) -> bool:
    """Equal within 1e-9 relative (1e-12 absolute near zero); NaN equals NaN, infinities by sign."""
    x, y = float(a), float(b)
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if math.isinf(x) or math.isinf(y):
        return x == y
    return math.isclose(x, y, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def _label_key(metric: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items())) + "}"


def _index(result: list[dict[str, Any]], field: str, side: str, out: list[str]) -> dict[str, Any]:
    index: dict[str, Any] = {}
    for item in result:
        key = _label_key(item.get("metric", {}))
        if key in index:
            out.append(f"{side} has duplicate label set {key}")
        index[key] = item.get(field)
    return index


def _point_diff(what: str, exp: list[Any], got: list[Any]) -> str | None:
    if not isinstance(got, list | tuple) or len(got) != 2:
        return f"{what}: expected {exp}, got malformed {got!r}"
    if abs(float(exp[0]) - float(got[0])) > TS_TOL:
        return f"{what}: timestamp expected {exp[0]}, got {got[0]}"
    if isinstance(exp[1], str) and not isinstance(got[1], str):
        return f"{what}: value must be a string, got {got[1]!r}"
    if not values_equal(exp[1], got[1]):
        return f"{what}: expected {exp[1]}, got {got[1]}"
    return None


def compare(expected: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """Differences between Prometheus' answer and ours, as readable lines (empty when they agree)."""
    etype, gtype = expected.get("resultType"), got.get("resultType")
    if etype != gtype:
        return [f"resultType: expected {etype}, got {gtype}"]
    if etype in ("scalar", "string"):
        if etype == "string":
            same = expected["result"][1] == got["result"][1]
            return [] if same else [f"string: expected {expected['result']}, got {got['result']}"]
        diff = _point_diff("scalar", expected["result"], got["result"])
        return [diff] if diff else []
    out: list[str] = []
    field = "value" if etype == "vector" else "values"
    exp_ix = _index(expected["result"], field, "Prometheus", out)
    got_ix = _index(got.get("result") or [], field, "embedded", out)
    out += [f"missing {k} = {_show(exp_ix[k])}" for k in exp_ix if k not in got_ix]
    out += [f"extra   {k} = {_show(got_ix[k])}" for k in got_ix if k not in exp_ix]
    for key in exp_ix.keys() & got_ix.keys():
        e, g = exp_ix[key], got_ix[key]
        if etype == "vector":
            diff = _point_diff(key, e, g)
            out += [diff] if diff else []
        elif len(e) != len(g):
            out.append(f"{key}: expected {len(e)} points {_show(e)}, got {len(g)} {_show(g)}")
        else:
            out += [d for p, q in zip(e, g, strict=True) if (d := _point_diff(key, p, q))]
    return sorted(out)


def _show(v: Any) -> str:
    text = json.dumps(v)
    return text if len(text) <= 200 else text[:200] + "…"


@dataclass
class Mismatch:
    """One expression at one instant where the two sides disagree."""

    expr: str
    t: float
    lines: list[str]

    def __str__(self) -> str:
        body = "\n".join(f"    {ln}" for ln in self.lines[:12])
        more = f"\n    … {len(self.lines) - 12} more" if len(self.lines) > 12 else ""
        return f"{self.expr}  @ {self.t:.3f}\n{body}{more}"


def differential(expr: str, instants: Iterable[float], expected: Query, got: Query) -> list[Mismatch]:
    """Evaluate expr on both sides at every instant; an exception on our side is a mismatch too."""
    found = []
    for t in instants:
        exp = expected(expr, t)
        try:
            ours = got(expr, t)
        except Exception as exc:
            found.append(Mismatch(expr, t, [f"embedded raised {type(exc).__name__}: {exc}"]))
            continue
        lines = compare(exp, ours)
        if lines:
            found.append(Mismatch(expr, t, lines))
    return found
