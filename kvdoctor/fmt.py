"""Numbers for humans (93 %, 0.4/s, 1.2 s, 7m 30s, 339k tokens, 15.3 GiB); evidence values by their unit in kvdoctor.signals."""

from __future__ import annotations

import math
import re
import time

from kvdoctor.signals import SIGNALS


def label_of(key: str) -> str:
    """Human label for an evidence key."""
    if key in SIGNALS:
        return SIGNALS[key].label
    return key.replace("_", " ").strip().capitalize()


def kind_of(key: str) -> str:
    """How to format an evidence value: pct, rate, seconds, tok/s, tokens, count or plain."""
    if key in SIGNALS:
        return SIGNALS[key].unit
    if key.endswith(("_perc", "_ratio", "_hit_rate", "_usage", "_fraction", "_pct")):
        return "pct"
    if key.endswith(("_per_s", "_per_second", "_rate")):
        return "rate"
    if key.endswith(("_seconds", "_s", "_p50", "_p90", "_p95", "_p99")):
        return "seconds"
    return "plain"


def num(x: float) -> str:
    """Compact number: 3, 0.42, 12.5, 1.2k, 3.4M."""
    if math.isnan(x) or math.isinf(x):
        return "n/a"
    a = abs(x)
    if a >= 1e6:
        return f"{x / 1e6:.1f}M"
    if a >= 1e4:
        return f"{x / 1e3:.0f}k"
    if a >= 1e3:
        return f"{x / 1e3:.1f}k"
    if float(x).is_integer():
        return str(int(x))
    if a >= 10:
        return f"{x:.0f}"
    if a >= 1:
        return f"{x:.1f}"
    return f"{x:.2g}"


def sig3(x: float) -> str:
    """Three significant figures without exponents: 0.162, 5.13, 607, 1,303 (a table cell an operator reads)."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def seconds(x: float) -> str:
    """Latency: 850 ms, 1.2 s, 45 s, 3m 10s."""
    if math.isnan(x):
        return "n/a"
    if x < 1:
        return f"{x * 1000:.0f} ms"
    if x < 60:
        return f"{x:.1f} s" if x < 10 else f"{x:.0f} s"
    return duration(x)


def duration(x: float) -> str:
    """Elapsed time: 45s, 7m 30s, 4h 0m, 2d 3h."""
    s = max(0, round(x))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s" if s % 60 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def value(key: str, v: float | str | None) -> str:
    """Format one evidence value according to its key."""
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    kind = kind_of(key)
    if kind == "pct":
        return f"{v * 100:.0f} %" if abs(v) <= 1.5 else f"{v:.0f} %"
    if kind == "rate":
        return f"{num(v)}/s"
    if kind == "seconds":
        return seconds(v)
    if kind in ("tok/s", "tokens"):
        return f"{num(v)} {kind}"
    return num(v)


def clock(t: float) -> str:
    """UTC wall time for messages: 2026-09-01 12:03 UTC."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def is_fraction_key(key: str) -> bool:
    """True when the key's value is a 0–1 fraction (compare absolute, not relative, changes)."""
    return kind_of(key) == "pct"


def tokens(n: float) -> str:
    """Token counts the way operators say them: 4,096 / 339k / 1.2M."""
    if n >= 1e6:
        return f"{n / 1e6:.1f}M"
    if n >= 1e4:
        return f"{n / 1e3:.0f}k"
    return f"{n:,.0f}"


def gib(n: float) -> str:
    """Bytes as GiB (MiB below 1 GiB)."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def gb(n: float) -> str:
    """Bytes as decimal GB, the unit of model weight sizes."""
    return f"{n / 1e9:.1f} GB"


def times(x: float) -> str:
    """A concurrency figure: 0.5, 4.0, 12, 340."""
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgt]i?b?|b)?\s*", re.IGNORECASE)
_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
}


def parse_size(text: str) -> int:
    """Bytes from a size as operators write it: `50GB` (decimal), `50GiB` (binary), `5e10` or `50000000000`."""
    m = _SIZE.fullmatch(text)
    unit = (m.group(2) or "").lower().removesuffix("b") if m else ""
    if m is None or unit not in _UNITS:
        raise ValueError(
            f"not a size: {text!r} (bytes, or a number with B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)"
        )
    value = float(m.group(1)) * _UNITS[unit]
    if not math.isfinite(value):
        raise ValueError(f"not a size: {text!r}")
    return round(value)
