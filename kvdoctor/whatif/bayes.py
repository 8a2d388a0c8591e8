"""Bayesian linear regression on relative errors: a Gaussian prior per coefficient, the data's rows, the posterior.

Each row is (features, y, weight); its residual counts relative to y, so a 20 ms step and a 2 s prefill weigh
alike. A row's weight is how many observations it averaged (ITLs, steps, prefills). Its error is the model's own
misfit, the same for every row, plus sampling noise that shrinks with that count: a row counts w / (w + w̃), w̃
the median weight, so a well-filled interval counts as one observation however many ITLs it averaged and a
sparse one less; σ, the misfit's relative spread, comes from the residuals. Where the rows span a coefficient the data decide it; where they do not (one batch
size, one context length) its posterior stays at the prior's mean with the prior's spread.
"""

from __future__ import annotations

import math
import random
from typing import NamedTuple

Rows = list[tuple[list[float], float, float]]


class Posterior(NamedTuple):
    """The posterior mean and variance of each coefficient, and their covariance (a pinned one's row is 0)."""

    mean: list[float]
    var: list[float]
    cov: tuple[tuple[float, ...], ...] = ()


def posterior(rows: Rows, mean: list[float], sd: list[float], sigma: float) -> Posterior:
    """Posterior of y ≈ x·c with c_j ~ N(mean_j, sd_j²) and relative errors of spread sigma."""
    k = len(mean)
    usable = [(x, y, w) for x, y, w in rows if y > 0 and w > 0]
    total = sum(w for _, _, w in usable)
    half = _median([w for _, _, w in usable])
    # columns in units of their typical size, so coefficients of 1e-9 s/pair and 1e-2 s/step solve alike
    scale = [
        max(1e-12, sum(abs(x[j]) * w for x, _, w in usable) / total) if total > 0 else 1.0 for j in range(k)
    ]
    ata = [[0.0] * k for _ in range(k)]
    atb = [0.0] * k
    inv_s2 = 1.0 / (sigma * sigma)
    for x, y, w in usable:
        z = [x[j] / scale[j] / y for j in range(k)]  # the row's features relative to its y
        ww = w / (w + half) * inv_s2
        for p in range(k):
            atb[p] += ww * z[p]
            for q in range(k):
                ata[p][q] += ww * z[p] * z[q]
    for j in range(k):
        prec = 1.0 / (sd[j] * scale[j]) ** 2 if sd[j] > 0 else 1e12
        ata[j][j] += prec
        atb[j] += prec * mean[j] * scale[j]
    sol = solve(ata, atb)
    inv = [solve(ata, [1.0 if i == j else 0.0 for i in range(k)]) for j in range(k)]
    cov = tuple(tuple(inv[p][q] / (scale[p] * scale[q]) for q in range(k)) for p in range(k))
    return Posterior([sol[j] / scale[j] for j in range(k)], [cov[j][j] for j in range(k)], cov)


def nonneg_posterior(
    rows: Rows, mean: list[float], sd: list[float], sigma: float
) -> tuple[Posterior, list[int]]:
    """posterior with every coefficient ≥ 0: a negative one is pinned at 0 and the others refitted without it.

    Clipping a negative coefficient after the fact leaves the others fitted to compensate for it (a negative
    per-request cost inflates the prefill cost), which the simulator then applies where the history had no data.
    Returns the posterior and the indices pinned at 0.
    """
    free = list(range(len(mean)))
    while True:
        post = posterior(
            [([x[j] for j in free], y, w) for x, y, w in rows],
            [mean[j] for j in free],
            [sd[j] for j in free],
            sigma,
        )
        worst = min(range(len(free)), key=lambda i: post.mean[i])
        if post.mean[worst] >= 0 or len(free) == 1:
            k = len(mean)
            out, var = [0.0] * k, [0.0] * k
            cov = [[0.0] * k for _ in range(k)]
            for i, j in enumerate(free):
                out[j], var[j] = max(post.mean[i], 0.0), post.var[i]
                for i2, j2 in enumerate(free):
                    cov[j][j2] = post.cov[i][i2]
            pinned = [j for j in range(k) if j not in free]
            return Posterior(out, var, tuple(tuple(r) for r in cov)), pinned
        free.pop(worst)


def draw(post: Posterior, rng: random.Random) -> list[float]:
    """One draw of the coefficients from the posterior (Gaussian with its covariance), each kept ≥ 0."""
    k = len(post.mean)
    low = _cholesky(
        [list(r) for r in post.cov]
        if post.cov
        else [[post.var[i] if i == j else 0.0 for j in range(k)] for i in range(k)]
    )
    z = [rng.gauss(0.0, 1.0) for _ in range(k)]
    return [max(0.0, post.mean[i] + sum(low[i][j] * z[j] for j in range(i + 1))) for i in range(k)]


def _cholesky(a: list[list[float]]) -> list[list[float]]:
    """Lower-triangular L with L·Lᵀ = a (a direction of no variance gets 0)."""
    n = len(a)
    low = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1):
            s = a[i][j] - sum(low[i][m] * low[j][m] for m in range(j))
            if i == j:
                low[i][j] = math.sqrt(s) if s > 0 else 0.0
            else:
                low[i][j] = s / low[j][j] if low[j][j] > 0 else 0.0
    return low


def spread(coeffs: list[float], rows: Rows, free: int) -> float:
    """The rows' relative misfit σ about x·c, as posterior() counts rows, corrected for the free coefficients."""
    usable = [(x, y, w) for x, y, w in rows if y > 0 and w > 0]
    half = _median([w for _, _, w in usable])
    num = den = 0.0
    for x, y, w in usable:
        v = w / (w + half)
        num += v * ((sum(c * f for c, f in zip(coeffs, x, strict=False)) - y) / y) ** 2
        den += v
    n = len(usable)
    return math.sqrt(num / den * n / (n - free)) if den and n > free else math.inf


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] if values else 1.0


def relative_rms(coeffs: list[float], rows: Rows) -> float:
    """Weighted RMS of (x·c − y) / y over the rows."""
    num = den = 0.0
    for x, y, w in rows:
        if y > 0 and w > 0:
            num += w * ((sum(c * v for c, v in zip(coeffs, x, strict=False)) - y) / y) ** 2
            den += w
    return math.sqrt(num / den) if den else math.nan


def solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (a singular column solves to 0)."""
    n = len(b)
    m = [[*row[:], b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[piv] = m[piv], m[col]
        if abs(m[col][col]) < 1e-300:
            continue
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    return [m[i][n] / m[i][i] if abs(m[i][i]) > 1e-300 else 0.0 for i in range(n)]
