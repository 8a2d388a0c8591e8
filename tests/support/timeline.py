"""Judging a replay over time: when a limit began and ended relative to the load, and how many incidents it made."""

from __future__ import annotations

from collections.abc import Iterable

LIMITS = {"kv_cache", "batch_cap", "compute"}
WITHIN_S = 60.0

Timeline = list[
    tuple[float, str, set[str]]
]  # (t, class, finding names) per evaluation of one (target, model)


def timeline(cycles: Iterable, model: str | None = None) -> Timeline:
    """The classes and findings of every evaluation (of the one model, or any model-level diagnosis)."""
    out = []
    for c in cycles:
        for d in c.diagnoses:
            if d.model_name and (model is None or d.model_name == model):
                out.append((c.t, d.bottleneck, {f.name for f in d.findings}))
    return out


def onset_s(tl: Timeline, expected: str, load_start: float) -> float | None:
    """Seconds from load_start to the first evaluation with the expected class (None: never)."""
    return next((t - load_start for t, cls, _ in tl if t >= load_start and cls == expected), None)


def resolution_s(tl: Timeline, expected: str, load_end: float, until: float | None = None) -> float | None:
    """Seconds from load_end until the expected class stops for good (up to `until`); None if it never stops."""
    after = [(t, cls) for t, cls, _ in tl if t >= load_end and (until is None or t < until)]
    last = max((t for t, cls in after if cls == expected), default=None)
    if last is None:
        return 0.0
    later = [t for t, _ in after if t > last]
    return later[0] - load_end if later else None


def incidents(tl: Timeline, expected: str, start: float, end: float) -> int:
    """How many times the expected class began between start and end (1 for a burst without flapping)."""
    n, prev = 0, False
    for t, cls, _ in tl:
        now = cls == expected
        if start <= t <= end and now and not prev:
            n += 1
        prev = now
    return n
