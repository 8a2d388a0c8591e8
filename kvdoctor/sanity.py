"""Values a target cannot mean (NaN, ±Inf, negative gauges, absurd rates): found before anything but PromQL uses them.

PromQL computes with NaN and ±Inf as IEEE says; everything else kvdoctor does with a number (report bins, the
classifier's evidence, capacity, the what-if, JSON, the state file) would crash on one or read it as a fact.
"""

from __future__ import annotations

import math
from typing import Any

from kvdoctor.jsondoc import JsonValue

# Ratios vLLM exports as fractions 0-1; a little over 1 is rounding, more is a broken exporter.
RATIO_MAX = 1.05
RATIOS = frozenset({"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:cpu_cache_usage_perc"})
# Beyond these no server runs: a rate of a billion requests or tokens per second, ten million requests in a batch.
# (COUNT_MAX is the smallest bound: a value from 0 to it is valid in every unit.)
RATE_MAX = 1e9
COUNT_MAX = 1e7
SECONDS_MAX = 1e7
# No vLLM sample reaches this: a token counter at a million tokens a second for thirty years is under it. Above it a
# value is a broken or hostile exporter's, and sums of a few such (1e308) overflow every float they touch.
RAW_MAX = 1e15


def describe(v: float) -> str:
    """How a refused value is shown: NaN, +Inf, -Inf or the number."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return f"{v:g}"


def raw_problem(name: str, v: float) -> str | None:
    """Why a scraped vLLM sample cannot be used ("+Inf", "-5 is negative"), or None when it can.

    Only vLLM's own families are judged: every one of them is a count, a ratio, a duration or a token number,
    none of which is ever negative or infinite.
    """
    if not name.startswith("vllm:"):
        return None
    if not math.isfinite(v):
        return describe(v)
    if v < 0:
        return f"{describe(v)} (negative)"
    if name in RATIOS and v > RATIO_MAX:
        return f"{describe(v)} (over 1)"
    if v > RAW_MAX:
        return f"{describe(v)} (absurd)"
    return None


def evidence_problem(unit: str, v: float) -> str | None:
    """Why a value of an evidence key with this unit (kvdoctor.signals.UNITS) cannot be used, or None."""
    if not math.isfinite(v):
        return describe(v)
    if v < 0:
        return f"{describe(v)} (negative)"
    bound = {"rate": RATE_MAX, "tok/s": RATE_MAX, "count": COUNT_MAX, "seconds": SECONDS_MAX}.get(unit)
    if bound is not None and v > bound:
        return f"{describe(v)} (absurd)"
    return None


def finite(v: Any) -> float | None:
    """v as a float when it is a finite number (bool excluded), else None."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def scrub(doc: JsonValue) -> JsonValue:
    """A copy of a JSON-ready document with every non-finite float replaced by None (JSON has no Infinity)."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: scrub(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [scrub(v) for v in doc]
    return doc
