"""What an expression's tree reads and how it prints: the evaluator's memo keys and what invalidates them."""

from __future__ import annotations

from typing import Any

import promql_parser as pp


def children(node: Any) -> list[Any]:
    """The subexpressions of node."""
    if isinstance(node, pp.MatrixSelector):
        return [node.vector_selector]
    if isinstance(node, pp.ParenExpr | pp.UnaryExpr | pp.SubqueryExpr):
        return [node.expr]
    if isinstance(node, pp.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, pp.AggregateExpr):
        return [node.expr] + ([node.param] if node.param is not None else [])
    if isinstance(node, pp.Call):
        return list(node.args)
    return []


def names_read(node: Any) -> frozenset[str] | None:
    """The metric names an expression selects (None: it may read any series)."""
    if isinstance(node, pp.VectorSelector):
        return frozenset([node.name]) if node.name else None
    names: set[str] = set()
    for child in children(node):
        sub = names_read(child)
        if sub is None:
            return None
        names |= sub
    return frozenset(names)


def quoted(node: Any) -> bool:
    """True when a string in the expression holds a quote or a backslash."""
    if isinstance(node, pp.VectorSelector):
        return any('"' in m.value or "\\" in m.value for m in node.matchers.matchers)
    if isinstance(node, pp.StringLiteral):
        return '"' in node.val or "\\" in node.val
    return any(quoted(c) for c in children(node))
