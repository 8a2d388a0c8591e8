"""Figures as report tables print them: exact, with separators (kvdoctor.fmt.num is the compact form), $, %."""

from __future__ import annotations

from typing import NamedTuple

from kvdoctor.report.rows import Costs, FleetSizing, Sizing, Summary


def exact(v: float | int | None, digits: int = 1) -> str:
    """v with separators and `digits` decimals (none for whole numbers); a dash for None."""
    if v is None:
        return "–"
    if isinstance(v, int) or float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:,.{digits}f}"


def dollars(v: float | None) -> str:
    """Dollars with cents."""
    return "–" if v is None else f"${v:,.2f}"


def percent(v: float | None) -> str:
    """A 0-1 share as a percentage (one decimal below 10 %)."""
    if v is None:
        return "–"
    return f"{v * 100:.1f} %" if 0 < v < 0.1 else f"{v * 100:.0f} %"


class Row(NamedTuple):
    """One line of the per-target tables (the fleet's is the last), its names already escaped."""

    target: str
    model_name: str
    summary: Summary
    costs: Costs
    sizing: Sizing | FleetSizing
