"""The step-time model, fitted to the target's own history of ITL, step counts, prefill times and batch sizes.

Rows: every few seconds of history gives the mean ITL (a step's duration, once per decoding request), the mean
step period when the engine never idled (interval / steps), and the mean prefill time of the requests that
finished. Decoding requests per step are ITL observations per step; prefill tokens per step are scheduled tokens
(`iteration_tokens_total`) minus decode tokens. A first fit shares one per-token cost between decode and prefill
tokens (a compute-bound, CPU-like linear shape); the free fit is pulled toward it where the history spans too few
batch sizes to tell the two apart. The fit keeps every coefficient ≥ 0 by refitting without a negative one; a
prompt's attention cost (P²/2 token pairs however it is chunked) is its own term, so long prompts cost more per token.
"""

from __future__ import annotations

import math
from dataclasses import replace

from kvdoctor.whatif.model import StepModel
from kvdoctor.whatif.window import Snap, delta, delta_buckets, hist_name, mean_of

INTERVAL_S = 5.0
MIN_ITL = 5  # ITL observations an interval needs to count
PRIOR_WEIGHT = 0.3  # ridge strength toward the shared-per-token shape, relative to the data's total weight

Row = tuple[
    list[float], float, float
]  # features (1, decoding, prefill tokens, context tokens, prefill pairs), y seconds, weight


def history_rows(snaps: list[Snap], prefill_budget: int, interval_s: float = INTERVAL_S) -> list[Row]:
    """Regression rows from consecutive intervals of the history."""
    rows: list[Row] = []
    pre_rows: list[Row] = []
    itl = hist_name(snaps[-1], "itl")
    i = 0
    while i < len(snaps) - 1:
        j = i + 1
        while j < len(snaps) - 1 and snaps[j].t - snaps[i].t < interval_s:
            j += 1
        a, b = snaps[i], snaps[j]
        i = j
        if b.get("vllm:generation_tokens_total", 0) < a.get("vllm:generation_tokens_total", 0):
            continue  # restart inside the interval
        steps = delta(a, b, "vllm:iteration_tokens_total_count")
        n_itl = delta(a, b, f"{itl}_count")
        if steps < 3 or n_itl < MIN_ITL:
            continue
        tokens = delta(a, b, "vllm:iteration_tokens_total_sum")
        decoding = n_itl / steps
        per_request = _context(a, b)
        half = _half_prompt(a, b)
        # iteration_tokens counts a prompt once, at its first token: a preempted request's recompute is not in
        # it, so add what each preemption costs again (its context so far, on average)
        recompute = delta(a, b, "vllm:num_preemptions_total") * per_request
        prefill = (max(0.0, tokens - n_itl) + recompute) / steps
        ctx = decoding * per_request
        pairs = prefill * half  # a prompt of P tokens makes P²/2 pairs however it is chunked
        y = delta(a, b, f"{itl}_sum") / n_itl
        window = [s for s in snaps if a.t <= s.t <= b.t]
        # the ITL mean weighs each step by its decoding requests: when the batch swings (open-loop arrivals) it
        # answers for the decoder-weighted batch Σr²/Σr, not the plain mean, read from the running gauge
        run = [s.get("vllm:num_requests_running", 0.0) for s in window]
        if sum(run) > 0:
            mean_run = sum(run) / len(run)
            weighted = decoding * (sum(r * r for r in run) / sum(run)) / mean_run
            # a step's prefill reaches the ITL mean only through the decoders it delays: a lone request's prefill
            # step records no ITL at all; a prefilling request shares its step with the others running
            shared = prefill * steps * min(decoding, max(0.0, mean_run - 1.0)) / n_itl
            rows.append(([1.0, weighted, shared, weighted * per_request, shared * half], y, n_itl))
        else:
            rows.append(([1.0, decoding, prefill, ctx, pairs], y, n_itl))
        if all(s.get("vllm:num_requests_running", 0) > 0 for s in window):
            rows.append(([1.0, decoding, prefill, ctx, pairs], (b.t - a.t) / steps, steps))
        n_pre = delta(a, b, "vllm:request_prefill_time_seconds_count")
        computed = mean_of(a, b, "vllm:request_prefill_kv_computed_tokens")
        if not math.isfinite(computed):
            computed = mean_of(a, b, "vllm:request_prompt_tokens")
        # a request preempted mid-prefill counts its wait in its prefill time: only clean intervals say how long
        # a prefill takes
        clean = delta(a, b, "vllm:num_preemptions_total") == 0
        if clean and n_pre >= 2 and math.isfinite(computed) and computed <= prefill_budget:
            y_pre = mean_of(a, b, "vllm:request_prefill_time_seconds")
            n = max(computed, prefill)
            pre_rows.append(([1.0, decoding, n, ctx, n * half], y_pre, n_pre))
    # prefill times are few (one per request) beside ITLs (one per token): weigh them as much in total, or the
    # fit would trade TTFT for ITL
    total, total_pre = sum(r[2] for r in rows), sum(r[2] for r in pre_rows)
    scale = total / total_pre if total_pre else 0.0
    return rows + [(x, y, w * scale) for x, y, w in pre_rows]


def _context(a: Snap, b: Snap) -> float:
    p = mean_of(a, b, "vllm:request_prompt_tokens")
    g = mean_of(a, b, "vllm:request_generation_tokens")
    return (p if math.isfinite(p) else 0.0) + (g / 2 if math.isfinite(g) else 0.0)


def _half_prompt(a: Snap, b: Snap) -> float:
    """E[P²] / 2E[P] over the interval's prompts, uniform within each bucket: prefill pairs per prefill token."""
    buckets = sorted(delta_buckets(a, b, "vllm:request_prompt_tokens").items())
    lo, prev, sq, lin = 0.0, 0.0, 0.0, 0.0
    for hi, cum in buckets:
        n = cum - prev
        if n > 0 and math.isfinite(hi):
            sq += n * (lo * lo + lo * hi + hi * hi) / 3
            lin += n * (lo + hi) / 2
        prev, lo = cum, hi
    if lin <= 0:
        return 0.0
    mean = mean_of(a, b, "vllm:request_prompt_tokens")
    scale = mean / (lin / prev) if math.isfinite(mean) and prev > 0 else 1.0
    return sq / lin / 2 * scale


def fit_step_model(snaps: list[Snap], prefill_budget: int, physical: StepModel | None = None) -> StepModel:
    """t = c0 + c_decode·decoding + c_prefill·prefill tokens (+ c_kv·context from a physical prior), fitted."""
    return fit_rows(history_rows(snaps, prefill_budget), physical)


def fit_rows(rows: list[Row], physical: StepModel | None = None) -> StepModel:
    """fit_step_model on rows already read from a history (the intervals refit resampled ones)."""
    if len(rows) < 2:
        raise ValueError("fewer than 2 busy intervals in the history: nothing to fit step times to")
    levels = {round(r[0][1] * 2) / 2 for r in rows if r[2] > 0}
    notes = []
    c_kv = 0.0
    if physical is not None:
        # the roofline shape, scaled to this target's own step times; its KV-read term is kept as scaled
        num = sum(w * physical.duration(*x[1:]) / y for x, y, w in rows)
        den = sum(w * (physical.duration(*x[1:]) / y) ** 2 for x, y, w in rows)
        shape = physical.scaled(num / den if den else 1.0)
        c_kv = shape.c_kv
        prior = [shape.c0, shape.c_decode, shape.c_prefill]
        rows = [(x, max(y - c_kv * x[3], 1e-9), w) for x, y, w in rows]
        notes.append(
            f"physical prior: {physical.source}, scaled ×{num / den if den else 1.0:.2g} to the history"
        )
        shape_name = "roofline"
    else:
        # one per-token cost for decode and prefill tokens (the compute-bound, CPU-like shape)
        shared = [([x[0], x[1] + x[2]], y, w) for x, y, w in rows]
        c0, c_tok = _solve(shared, [0.0, 0.0], [0.0, 0.0])
        if c0 <= 0:
            c0 = min(y for _, y, _ in rows) * 0.5
            notes.append("fixed step overhead not identifiable; taken as half the shortest step seen")
        if c_tok <= 0:
            # one operating point cannot split a step into fixed and per-token cost; the midpoint errs least
            # either way (all fixed would predict no cost for a bigger batch, all per-token no floor)
            w_sum = sum(w for _, _, w in shared)
            mean_y = sum(w * y for _, y, w in shared) / w_sum
            mean_tok = sum(w * x[1] for x, _, w in shared) / w_sum
            c0, c_tok = mean_y / 2, mean_y / 2 / mean_tok if mean_tok > 0 else 0.0
            notes.append(
                "step times did not grow with the batch in the history: per-token cost not identifiable, "
                "taken as half the mean step (uncertain: a bigger batch may cost between 0 and 2x that)"
            )
        prior = [c0, c_tok, c_tok]
        notes.append("KV reads not separated from per-request cost (context tokens folded into c_decode)")
        shape_name = "shared per-token cost"
    spread = _spread([r[0][1] for r in rows])
    strength = PRIOR_WEIGHT * (1.0 if spread < 1.5 else 0.05)
    # the attention term is pulled toward 0 only lightly: short prompts leave it unidentified and near-harmless
    c = _solve_nonneg(
        [([*x[:3], x[4]], y, w) for x, y, w in rows], [*prior, 0.0], [strength] * 3 + [0.05 * strength]
    )
    if c[0] <= 0:
        c[0] = prior[0]
    model = StepModel(c[0], c[1], c[2], c_kv, c[3], points=len(levels))
    resid = _residual(model, [(x, y + c_kv * x[3], w) for x, y, w in rows])
    if spread < 1.5:
        notes.append(
            f"the history shows decoding batches of {min(levels):g}-{max(levels):g} only: the per-request "
            f"cost leans on the {shape_name} shape, uncertain beyond that range"
        )
    source = "fit" if spread >= 1.5 else f"fit+prior({shape_name})"
    return replace(model, source=source, residual_ratio=resid, notes=tuple(notes))


def _spread(values: list[float]) -> float:
    lo, hi = min(values), max(values)
    return hi / lo if lo > 0 else (math.inf if hi > 0 else 1.0)


def _residual(m: StepModel, rows: list[Row]) -> float:
    num = den = 0.0
    for x, y, w in rows:
        pred = m.duration(*x[1:])
        num += w * ((pred - y) / y) ** 2
        den += w
    return math.sqrt(num / den) if den else math.nan


def _solve_nonneg(rows: list[Row], prior: list[float], strength: list[float]) -> list[float]:
    """_solve with every coefficient ≥ 0: a negative one is pinned at 0 and the others refitted without it.

    Clipping a negative coefficient after the fact leaves the others fitted to compensate for it (a negative
    per-request cost inflates the prefill cost), which the simulator then applies where the history had no data.
    """
    free = list(range(len(prior)))
    while True:
        sol = _solve(
            [([x[j] for j in free], y, w) for x, y, w in rows],
            [prior[j] for j in free],
            [strength[j] for j in free],
        )
        worst = min(range(len(free)), key=lambda i: sol[i])
        if sol[worst] >= 0 or len(free) == 1:
            out = [0.0] * len(prior)
            for i, j in enumerate(free):
                out[j] = max(sol[i], 0.0)
            return out
        free.pop(worst)


def _solve(rows: list[Row], prior: list[float], strength: list[float]) -> list[float]:
    """Weighted least squares on relative errors, ridge toward prior in column-normalised units."""
    k = len(prior)
    scale = [
        max(1e-12, sum(abs(x[j]) * w for x, _, w in rows) / sum(w for _, _, w in rows)) for j in range(k)
    ]
    total_w = sum(w for _, _, w in rows)
    ata = [[0.0] * k for _ in range(k)]
    atb = [0.0] * k
    for x, y, w in rows:
        if y <= 0:
            continue
        z = [x[j] * scale[j] ** -1 for j in range(k)]
        ww = w / (y * y)
        for p in range(k):
            atb[p] += ww * z[p] * y
            for q in range(k):
                ata[p][q] += ww * z[p] * z[q]
    norm = sum(ata[p][p] for p in range(k)) / k or 1.0
    for j in range(k):
        lam = strength[j] * norm * (1 if total_w else 0)
        ata[j][j] += lam + 1e-12 * norm
        atb[j] += lam * prior[j] * scale[j]
    sol = _gauss(ata, atb)
    return [sol[j] / scale[j] for j in range(k)]


def _gauss(a: list[list[float]], b: list[float]) -> list[float]:
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
