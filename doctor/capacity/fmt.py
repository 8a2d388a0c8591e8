"""Number formatting shared by advice texts and the capacity table, and byte sizes as operators write them."""

from __future__ import annotations

import math
import re

_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgt]i?b?|b)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}  # fmt: skip


def parse_size(text: str) -> int:
    """Bytes from `50GB` (decimal), `50GiB` (binary), `5e10` or `50000000000`; raises ValueError."""
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
