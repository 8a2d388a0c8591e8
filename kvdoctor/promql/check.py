"""Load-time checks: parse an expression and refuse constructs the evaluator does not implement, with positions."""

from __future__ import annotations

import re
from typing import Any

import promql_parser as pp

from kvdoctor.errors import InputError
from kvdoctor.promql import aggregate
from kvdoctor.promql.calls import is_supported

_PAIRS = {"(": ")", "{": "}", "[": "]"}


class ExprError(InputError):
    """A bad or unsupported expression; carries the 1-based line and column."""

    def __init__(self, message: str, line: int, col: int) -> None:
        super().__init__(f"{message} (at line {line}, column {col})")
        self.reason, self.line, self.col = message, line, col


def _linecol(text: str, offset: int) -> tuple[int, int]:
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


def _unbalanced(text: str) -> int | None:
    stack: list[tuple[str, int]] = []
    quote = ""
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'`":
            quote = c
        elif c == "#":
            nl = text.find("\n", i)
            i = len(text) if nl == -1 else nl
        elif c in _PAIRS:
            stack.append((c, i))
        elif c in ")}]":
            if not stack or _PAIRS[stack[-1][0]] != c:
                return i
            stack.pop()
        i += 1
    return stack[-1][1] if stack else None


def _error_offset(text: str, message: str) -> int:
    m = re.search(r"unknown function with name '([^']+)'", message)
    if m:
        hit = re.search(rf"\b{re.escape(m.group(1))}\s*\(", text)
        if hit:
            return hit.start()
    if "unclosed" in message or "unexpected right" in message:
        pos = _unbalanced(text)
        if pos is not None:
            return pos
    if "unexpected end" in message:
        return len(text.rstrip())
    good = 0
    for i in range(1, len(text) + 1):
        if i < len(text) and not text[i].isspace():
            continue
        try:
            pp.parse(text[:i])
            good = i
        except ValueError:
            pass
    while good < len(text) and text[good].isspace():
        good += 1
    return good


def parse_expr(text: str) -> pp.Expr:
    """Parse with promql-parser; raise ExprError with the parser's message and where it went wrong."""
    try:
        return pp.parse(text)
    except ValueError as exc:
        message = str(exc)
        line, col = _linecol(text, _error_offset(text, message))
        raise ExprError(f"parse error: {message}", line, col) from None


def _walk(node: Any, text: str) -> None:
    def where(pattern: str) -> tuple[int, int]:
        hit = re.search(pattern, text)
        return _linecol(text, hit.start()) if hit else (1, 1)

    if isinstance(node, pp.Call):
        name = node.func.name
        if not is_supported(name):
            raise ExprError(
                f"function {name}() is not supported by kvdoctor's evaluator", *where(rf"\b{name}\s*\(")
            )
        for a in node.args:
            _walk(a, text)
    elif isinstance(node, pp.AggregateExpr):
        op = str(node.op)
        if op not in aggregate.SUPPORTED:
            raise ExprError(
                f"aggregation {op}() is not supported by kvdoctor's evaluator", *where(rf"\b{op}\b")
            )
        _walk(node.expr, text)
        if node.param is not None:
            _walk(node.param, text)
    elif isinstance(node, pp.BinaryExpr):
        if str(node.op) == "atan2":
            raise ExprError("operator atan2 is not supported by kvdoctor's evaluator", *where(r"\batan2\b"))
        if node.modifier is not None and _fill(node.modifier):
            raise ExprError("fill() modifiers are not supported", *where(r"\bfill"))
        _walk(node.lhs, text)
        _walk(node.rhs, text)
    elif isinstance(node, pp.ParenExpr | pp.UnaryExpr | pp.SubqueryExpr):
        _walk(node.expr, text)
    elif isinstance(node, pp.MatrixSelector):
        _walk(node.vector_selector, text)


def _fill(mod: Any) -> bool:
    fv = getattr(mod, "fill_values", None)
    return bool(
        fv is not None and (getattr(fv, "lhs", None) is not None or getattr(fv, "rhs", None) is not None)
    )


def check_expr(text: str) -> pp.Expr:
    """Parse and check an expression; returns the AST or raises ExprError."""
    node = parse_expr(text)
    _walk(node, text)
    return node
