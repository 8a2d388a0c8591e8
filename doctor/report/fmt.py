"""Numbers as the report prints them: thousands separators, dollars, percentages, a dash for unknown."""

from __future__ import annotations


def num(v: float | int | None, digits: int = 1) -> str:
    """v with separators and `digits` decimals (none for whole numbers); a dash for None."""
    if v is None:
        return "–"
    if isinstance(v, int) or float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:,.{digits}f}"


def usd(v: float | None) -> str:
    """Dollars with cents."""
    return "–" if v is None else f"${v:,.2f}"


def pct(v: float | None) -> str:
    """A 0-1 share as a percentage (one decimal below 10 %)."""
    if v is None:
        return "–"
    return f"{v * 100:.1f} %" if 0 < v < 0.1 else f"{v * 100:.0f} %"
