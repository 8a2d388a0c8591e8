"""The step-time model: a prior from the engine's facts or the step's structure, updated by the target's history.

t = c0 + c_decode·decoding requests + c_prefill·prefill tokens + c_kv·context tokens read + c_attn·prefill pairs:
a fixed cost per step, a cost per decoding request, per prefill token, per token of KV cache read, and per
attention pair of a prompt (P²/2 however it is chunked, so long prompts cost more per token). Rows come from
every interval of the history (steprows.py). Each coefficient has a Gaussian prior (prior.py): the roofline of
`--model`/`--gpu` when given, else the step's structure. The fit is Bayesian (bayes.py): where the history spans a
coefficient (several batch sizes, context lengths, prompt lengths) the data decide it; where it does not, the
prior does, and the model says which coefficient came from which. Every coefficient stays ≥ 0.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvdoctor.whatif.bayes import Posterior, draw, nonneg_posterior, relative_rms, spread
from kvdoctor.whatif.model import StepModel
from kvdoctor.whatif.prior import Prior, roofline, structural
from kvdoctor.whatif.steprows import INTERVAL_S, MAX_STEP_S, MIN_STEP_S, Row, history_rows
from kvdoctor.whatif.window import Snap

__all__ = ["INTERVAL_S", "Row", "fit_rows", "fit_step_model", "history_rows", "posterior_draws"]

COEFFS = ("c0", "c_decode", "c_prefill", "c_kv", "c_attn")
MIN_SIGMA, MAX_SIGMA = 0.05, 1.0  # bounds on the rows' relative spread, estimated from the fit's own residual
FROM_DATA = 0.75  # share of a prior's variance the data removed for a coefficient to count as the data's
FROM_PRIOR = 0.25  # below this share the coefficient is the prior's


def fit_step_model(snaps: list[Snap], prefill_budget: int, physical: StepModel | None = None) -> StepModel:
    """The step model of a history, with a roofline prior when `physical` is given (else the structure's)."""
    return fit_rows(history_rows(snaps, prefill_budget), physical)


def fit_rows(rows: list[Row], physical: StepModel | None = None) -> StepModel:
    """fit_step_model on rows already read from a history."""
    prior, post, pinned = _posterior(rows, physical)
    return _model(rows, prior, post, pinned, post.mean)


def posterior_draws(
    rows: list[Row], physical: StepModel | None, k: int, rng: random.Random
) -> list[StepModel]:
    """k step models with coefficients drawn from the fit's posterior (for the intervals).

    The posterior, not a bootstrap of the rows: refitting resampled rows spreads a coefficient only as far as the
    rows move its point estimate, which for the per-decoder cost of a window that saw 2-7 decoders is 3-8× less
    than the posterior's own spread (tools/decode_slope.py's windows), so the intervals forgot what the prior
    and the narrow batch range leave open. The posterior under the structure's wide spread (prior.draw_sd): the
    point holds the per-request cost near the structure's ratio, but a server nobody recorded may sit anywhere
    in the recordings' scatter about it, and draws at the point's own spread took the tuned pairs' unchanged
    coverage from 73 % to 65-68 % (70 % with these)."""
    prior, post, pinned = _posterior(rows, physical, wide=True)
    return [_model(rows, prior, post, pinned, draw(post, rng)) for _ in range(k)]


def _posterior(
    rows: list[Row], physical: StepModel | None, wide: bool = False
) -> tuple[Prior, Posterior, list[int]]:
    """The prior, and the posterior at the rows' own spread, with the coefficients pinned at 0 (wide: the
    posterior under the prior's draw spread)."""
    if len(rows) < 2:
        raise ValueError(
            f"fewer than 2 busy intervals in the history with step times an engine could take ({MIN_STEP_S * 1e3:g} "
            f"ms to {MAX_STEP_S:g} s, read through the ITL histogram): nothing to fit step times to"
        )
    prior = roofline(physical, rows) if physical is not None else structural(rows)
    mean, sd = list(prior.mean), list(prior.draw_sd if wide and prior.draw_sd else prior.sd)
    post, pinned = nonneg_posterior(rows, mean, sd, MAX_SIGMA)
    # the rows' spread from the fit's own residual, then the posterior at that spread
    sigma = min(MAX_SIGMA, max(MIN_SIGMA, spread(post.mean, rows, len(COEFFS) - len(pinned))))
    post, pinned = nonneg_posterior(rows, mean, sd, sigma)
    return prior, post, pinned


def _model(
    rows: list[Row], prior: Prior, post: Posterior, pinned: list[int], coeffs: list[float]
) -> StepModel:
    """The step model of coefficients `coeffs`, its provenance and notes from the prior and the posterior."""
    sd = prior.sd
    c = list(coeffs)
    if c[0] <= 0:
        c[0] = prior.mean[0]
    origin = [_origin(j, post.var[j], sd[j], pinned, prior) for j in range(len(COEFFS))]
    levels = {round(x[1] * 2) / 2 for x, _, w in rows if w > 0}
    model = StepModel(c[0], c[1], c[2], c[3], c[4], points=len(levels), provenance=tuple(origin))
    notes = [*prior.notes, f"step prior: {prior.source}", _said(model, origin)]
    # how a step grows with the batch is what extrapolates: say when the history could not decide it alone
    unsure = [n for n, o in zip(COEFFS, origin, strict=True) if prior.kind in o and n in ("c0", "c_decode")]
    if unsure:
        lo, hi = min(levels), max(levels)
        notes.append(
            f"the history shows decoding batches of {lo:g}-{hi:g} only: {' and '.join(unsure)} lean on the "
            f"{prior.kind}, uncertain beyond that range"
        )
    share_data = all(o == "data" or o.startswith("pinned") for o in origin)
    source = "fit" if share_data else f"fit+{prior.kind}" + ("(roofline)" if prior.kind == "prior" else "")
    return replace(model, source=source, residual_ratio=relative_rms(c, rows), notes=tuple(notes))


def _origin(j: int, var: float, sd: float, pinned: list[int], prior: Prior) -> str:
    """Where coefficient j came from: the data, the prior, or both (by how much of the prior's variance is left)."""
    if j in pinned:
        return "pinned at 0"
    share = 1.0 - var / (sd * sd) if sd > 0 else 0.0
    if share >= FROM_DATA:
        return "data"
    return prior.kind if share < FROM_PRIOR else f"data+{prior.kind}"


def _said(m: StepModel, origin: list[str]) -> str:
    """The coefficients in words, each with where it came from."""
    parts = (
        f"c0 {m.c0 * 1e3:.3g} ms/step",
        f"c_decode {m.c_decode * 1e3:.3g} ms/decoding request",
        f"c_prefill {m.c_prefill * 1e6:.3g} µs/prefill token",
        f"c_kv {m.c_kv * 1e9:.3g} ns/context token read",
        f"c_attn {m.c_attn * 1e9:.3g} ns/prefill pair",
    )
    return "step coefficients: " + "; ".join(f"{p} ({o})" for p, o in zip(parts, origin, strict=True))
