"""The shipped Grafana dashboards as the tests read them: their files, their panels' queries, the metrics they name."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser as pp

ROOT = Path(__file__).resolve().parents[2]  # the repository
DASHBOARD_DIR = ROOT / "dashboards"
RULES = ROOT / "rules" / "kvdoctor.yml"
VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)[^}]*\}|([A-Za-z_][A-Za-z0-9_]*))")


def dashboard_files() -> list[Path]:
    """The committed dashboard JSON files."""
    return sorted(DASHBOARD_DIR.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    """One dashboard as a dict."""
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows' collapsed children included."""
    for p in dash.get("panels", []):
        yield p
        yield from p.get("panels", [])


def queries(dash: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(panel, target) for every PromQL target of every panel."""
    for p in panels(dash):
        for t in p.get("targets", []):
            if t.get("expr"):
                yield p, t


def substitute(expr: str, values: dict[str, str], rate_interval: str = "5m") -> str:
    """Replace Grafana's built-in intervals and the dashboard variables as Grafana would for single values."""
    out = (
        expr.replace("$__rate_interval", rate_interval).replace("$__interval", "1m").replace("$__range", "1h")
    )
    return VARIABLE.sub(lambda m: values.get(m.group(1) or m.group(2), "x"), out)


def metric_names(expr: str) -> set[str]:
    """Metric names selected by an expression (variables substituted first)."""
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, pp.VectorSelector):
            if node.name:
                names.add(node.name)
        elif isinstance(node, pp.MatrixSelector):
            walk(node.vector_selector)
        elif isinstance(node, pp.Call):
            for a in node.args:
                walk(a)
        elif isinstance(node, pp.AggregateExpr):
            walk(node.expr)
            if node.param is not None:
                walk(node.param)
        elif isinstance(node, pp.BinaryExpr):
            walk(node.lhs)
            walk(node.rhs)
        elif isinstance(node, pp.ParenExpr | pp.UnaryExpr | pp.SubqueryExpr):
            walk(node.expr)

    walk(pp.parse(substitute(expr, {})))
    return names
