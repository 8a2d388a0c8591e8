"""Latency objectives a plan must hold (`--slo ttft_p95=2s`), and their value in a simulated run."""

from __future__ import annotations

import math

from kvdoctor.config.durations import EXAMPLES, parse_duration
from kvdoctor.errors import InputError
from kvdoctor.whatif import histo
from kvdoctor.whatif.model import SimResult

METRICS = {"ttft": "ttft", "itl": "itl", "queue": "queue_time", "queue_time": "queue_time"}
QUANTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99}


class SloError(InputError):
    """An --slo the planner cannot read; the message names it."""


def parse_slo(text: str) -> tuple[str, float]:
    """`ttft_p95=2s` → ("ttft_p95_s", 2.0): TTFT, ITL or queue time at p50/p95/p99, a duration."""
    name, sep, raw = text.partition("=")
    metric, _, q = name.strip().lower().rpartition("_")
    if not sep or metric not in METRICS or q not in QUANTILES:
        raise SloError(
            f"--slo {text!r}: expected NAME=DURATION with NAME one of ttft, itl, queue_time at p50, p95 or "
            "p99, e.g. --slo ttft_p95=2s"
        )
    try:
        seconds = parse_duration(raw)
    except ValueError:
        raise SloError(f"--slo {text!r}: {raw.strip()!r} is not a duration ({EXAMPLES})") from None
    if seconds <= 0:
        raise SloError(f"--slo {text!r}: the objective must be above zero")
    return f"{METRICS[metric]}_{q}_s", seconds


def parse_slos(texts: list[str]) -> dict[str, float]:
    """Every --slo flag, in order; the same quantity twice is an error."""
    out: dict[str, float] = {}
    for text in texts:
        key, v = parse_slo(text)
        if key in out:
            raise SloError(f"--slo {text!r}: {key[:-2]} given twice")
        out[key] = v
    if not out:
        raise SloError("--slo: give at least one objective, e.g. --slo ttft_p95=2s")
    return out


def extra_value(key: str, res: SimResult, buckets: dict[str, tuple[float, ...]], sigma: float) -> float:
    """A quantile the what-if's Quantities do not carry (p99s, queue p50), read through the server's buckets."""
    metric, q = key[:-2].rsplit("_", 1)
    quant = QUANTILES[q]
    if metric == "itl":
        return histo.quantile(quant, res.itl, buckets["itl"], sigma)
    obs = res.ttft if metric == "ttft" else res.queue
    return histo.quantile(quant, [(v, 1) for v in obs], buckets["ttft" if metric == "ttft" else "queue"])


def margin(value: float | None, objective: float) -> float | None:
    """The fraction of the objective left ((objective - value) / objective); negative when it is broken."""
    if value is None or not math.isfinite(value):
        return None
    return (objective - value) / objective


def holds(value: float | None, objective: float) -> bool:
    """The objective holds: a finite value at or under it (no observation is no evidence it holds)."""
    return value is not None and math.isfinite(value) and value <= objective


def number(v: object) -> float | None:
    """A number from a prediction's value or an info label's text; None when it is neither."""
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None
