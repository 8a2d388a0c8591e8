"""Number formatting shared by advice texts and the capacity table."""

from __future__ import annotations


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
