"""Load-time checks: parse an expression and refuse constructs the evaluator does not implement, with positions."""

from __future__ import annotations

import re
from typing import Any

import promql_parser as pp

from kvdoctor.errors import InputError
from kvdoctor.promql import aggregate
from kvdoctor.promql.calls import is_supported

_PAIRS = {"(": ")", "{": "}", "[": "]"}
# Bounds checked before promql-parser sees an expression: the parser takes 1.1 GB at 4,000 levels and crashes at
# 100,000, and the evaluator recurses once per level (a 400-term sum is a RecursionError). A rule is a few lines.
MAX_BYTES = 64 * 1024
MAX_DEPTH = 100
_WORD_OPS = frozenset({"and", "or", "unless", "atan2"})
_COMPARE = "<>=!"


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


def _too_deep(text: str) -> int | None:
    """Where text goes past MAX_DEPTH levels of parentheses and binary operators (an upper bound of its tree's
    depth: each operator of a chain is a level, `a + b + c` is two), or None; one pass, no parse."""
    stack: list[int] = []  # depth outside each open parenthesis
    depth = 0
    quote = ""
    inside = 0  # within {} or []: label matchers and durations hold no operators
    i, n = 0, len(text)
    while i < n:
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
            i = n if nl == -1 else nl
        elif c in "{[":
            inside += 1
        elif c in "}]":
            inside = max(0, inside - 1)
        elif inside:
            pass
        elif c == "(":
            stack.append(depth)
            depth += 1
        elif c == ")":
            depth = stack.pop() if stack else depth
        elif c in "+-*/%^" or (c in _COMPARE and (i == 0 or text[i - 1] not in _COMPARE)):
            depth += 1
        elif c.isalpha() or c == "_":
            j = i
            while j < n and (text[j].isalnum() or text[j] in "_:"):
                j += 1
            depth += text[i:j] in _WORD_OPS
            i = j
            continue
        if depth > MAX_DEPTH:
            return i
        i += 1
    return None


def check_bounds(text: str) -> None:
    """Refuse an expression over MAX_BYTES or nested over MAX_DEPTH levels, before any parser sees it."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise ExprError(f"expression is {size:,} bytes, over the limit of {MAX_BYTES:,}", 1, 1)
    at = _too_deep(text)
    if at is not None:
        raise ExprError(
            f"expression nested deeper than {MAX_DEPTH} levels (parentheses and chained operators); "
            "split it into recording rules",
            *_linecol(text, at),
        )


def _incomplete(prefix: str) -> bool:
    """Whether a prefix parses, or fails only for what is still to come (so the error lies after it)."""
    try:
        pp.parse(prefix)
    except ValueError as exc:
        m = str(exc)
        return "end of input" in m or "unclosed" in m or "unterminated" in m
    return True


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
    # The longest prefix that ends at a token boundary and is still a possible start of a valid expression: past
    # the first bad token no prefix is. A binary search over the boundaries parses log2(n) prefixes, not n.
    cuts = [i for i in range(1, len(text)) if text[i].isspace() and not text[i - 1].isspace()]
    lo, hi = 0, len(cuts)  # cuts[:lo] hold, cuts[hi:] do not
    while lo < hi:
        mid = (lo + hi) // 2
        if _incomplete(text[: cuts[mid]]):
            lo = mid + 1
        else:
            hi = mid
    good = cuts[lo - 1] if lo else 0
    while good < len(text) and text[good].isspace():
        good += 1
    return good


def parse_expr(text: str) -> pp.Expr:
    """Parse with promql-parser; raise ExprError with the parser's message and where it went wrong."""
    check_bounds(text)
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
