"""bench_whatif's per-pair table: one pair's errors, directions, 80 % intervals and bucket resolution, a row each."""

from __future__ import annotations

from kvdoctor.whatif.compare import HEADLINE, PairResult

COLUMN = 24


def pct(v: float) -> str:
    """A ratio as a right-aligned percentage ("n/a" when unknown)."""
    return "  n/a" if v != v else f"{v:5.0%}"


def header() -> str:
    """The table's column titles."""
    return f"\n{'pair':28s} {'part':9s} {'':10s}" + "".join(f"{k:>{COLUMN}s}" for k in HEADLINE)


def pair_rows(r: PairResult, part: str) -> list[str]:
    """The rows of one pair: errors unchanged and after, directions (measured and predicted), interval, bucket ±."""
    out = [
        f"{r.name:28s} {part:9s} {kind:10s}" + "".join(f"{pct(errs[k]):>{COLUMN}s}" for k in HEADLINE)
        for kind, errs in (("unchanged", r.unchanged_error), ("changed", r.changed_error))
    ]
    m, u, p, a = r.prediction.measured, r.prediction.unchanged, r.prediction.predicted, r.after
    out.append(
        f"{'':28s} {'':9s} {'direction':10s}"
        + "".join(
            f"{'right' if r.direction_right[k] else 'WRONG':>9s} {getattr(m, k):.3g}→{getattr(a, k):.3g}"
            f" ({getattr(u, k):.3g}→{getattr(p, k):.3g})".rjust(COLUMN)
            for k in HEADLINE
        )
    )
    band = r.prediction.band_after
    if band is not None:
        out.append(
            f"{'':28s} {'':9s} {'80 %':10s}"
            + "".join(
                f"{'in' if r.inside_changed.get(k) else 'OUT':>4s} {getattr(band.low, k):.3g}-"
                f"{getattr(band.high, k):.3g}".rjust(COLUMN)
                for k in HEADLINE
            )
            + (f"  ({'; '.join(band.unseen)})" if band.unseen else "")
        )
    out.append(
        f"{'':28s} {'':9s} {'bucket ±':10s}"
        + "".join(f"{pct(r.resolution_after.get(k, float('nan'))):>{COLUMN}s}" for k in HEADLINE)
    )
    return out
