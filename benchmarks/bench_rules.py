"""How fast hostile rule expressions are refused: the bounds check, and the error-offset search on a long bad one.

usage: python benchmarks/bench_rules.py
Prints the CPU milliseconds `check_expr` takes per case (median of 5). Before the bounds and the binary search, the
3,000-term sum with a typo took over 8 minutes and 1,200 nested parentheses were a RecursionError; each case here
should take milliseconds (the 40 KB one, parsed about log2(3,000) times, tens of them).
"""

from __future__ import annotations

import statistics
import time

from kvdoctor.promql.check import ExprError, check_expr

CASES = {
    "400-term sum": " + ".join(f"m{i}" for i in range(400)),
    "3,000-term sum, typo at the end": "sum(" + " + ".join(f"m{i}" for i in range(3000)) + " x)",
    "1,200 nested parentheses": "(" * 1200 + "up" + ")" * 1200,
    "3,000 matchers (40 KB), typo at the end": "x{"
    + ", ".join(f'a{i}="v{i}"' for i in range(3000))
    + "} typo",
    "70 KB selector": "x{" + "a" * 70_000 + "}",
}


def refuse_ms(expr: str, rounds: int = 5) -> tuple[float, str]:
    """Median CPU milliseconds to refuse expr, and the error."""
    per, error = [], ""
    for _ in range(rounds):
        start = time.process_time()
        try:
            check_expr(expr)
        except ExprError as exc:
            error = str(exc)
        per.append((time.process_time() - start) * 1000)
    return statistics.median(per), error


def main() -> None:
    """Print one line per case."""
    for name, expr in CASES.items():
        ms, error = refuse_ms(expr)
        print(f"{name:42s} {ms:8.2f} ms  {error[:90]}")


if __name__ == "__main__":
    main()
