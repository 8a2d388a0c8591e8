"""Priors for the step-time coefficients: from the engine's facts (a roofline) or from the step's structure.

The roofline (a GPU's data sheet and the model's size, half of peak): a decode step reads every weight once and
the KV of every running request, c0 ≈ weight bytes / bandwidth and c_kv ≈ KV bytes per token / bandwidth; each
token, decode or prefill, costs ≈ 2 × parameters FLOPs and each prefill pair 4 × layers × heads × head_dim.

The structure, when no data sheet is given: what even a history of single requests shows, a decode step's cost
and a prefill token's, is fitted with a decoding request priced at DECODE_PER_PREFILL prefill tokens. A decoding
request pushes one token through every weight, as a prefill token does, but as one row of a thin matrix product
beside a prompt's thick one, and it alone pays the vocabulary projection, the sampler and its KV read: its compute
runs at about half a prefill token's efficiency (decode kernels reach roughly half their ideal speed on GPUs too).
That is also what a request costs in a batch the history never reached, which a light window cannot tell: its few
batch sizes read the server's local slope, and the recorded servers' slope bends beyond them either way (11-12 ms
a decoder to 5 running and 8 ms to 25 on the Llama-shaped ramp, whose light step reads ~2 ms; 2.0 ms to 6 running
and 1.1 ms to 22 on plan's check). So the structure holds the per-request cost within DECODE_SPREAD of its mean:
on the recordings not set aside (the ramps' and plan's check's whole runs, the tuned pairs' after sides) a decoder
with its KV read costs 1.5-3.7 prefill tokens, and the data move it further only where their batches outweigh
that. The KV-read and attention terms start at 0, the KV read free to be as large as the per-request cost at the
context lengths the history showed (decode kernels on CPUs can cost far more per request at long contexts), and
data that span either decide it. The intervals draw with the roofline's wide spread (`draw_sd`): the point leans on
the structure, the members on what the data alone leave open.

Only ratios are taken from either (decode, KV-read and attention cost per prefill token's): c0 and a prefill
token's cost are fitted to the target's own step times, and the fit's data override each coefficient where the
history spans it (bayes.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvdoctor.capacity.arch import ModelSpec, weights_bytes
from kvdoctor.capacity.presets import GpuSpec
from kvdoctor.whatif.bayes import Rows, nonneg_posterior, spread
from kvdoctor.whatif.model import StepModel

EFFICIENCY = 0.5
DECODE_PER_PREFILL = 2.0
# a prior's spread per coefficient, relative to its mean (c0, c_decode, c_prefill, c_kv, c_attn): the roofline's
SPREAD = (0.5, 1.5, 0.5, 0.5, 0.5)
DECODE_SPREAD = 0.5  # the structure's per-request cost, relative: the recordings' scatter about it
RESOLVED = 2.0  # a fixed/per-token split counts only this many standard errors above 0
FLAT = 1e3  # relative spread of a prior that says nothing


@dataclass(frozen=True)
class Prior:
    """A Gaussian prior per coefficient (c0, c_decode, c_prefill, c_kv, c_attn), and what it came from."""

    mean: tuple[float, ...]
    sd: tuple[float, ...]
    kind: str  # "prior" (the engine's facts) or "structure" (the step's shape)
    source: str  # in words, for the notes
    notes: tuple[str, ...] = ()
    draw_sd: tuple[float, ...] = ()  # the intervals draw with this spread when it is wider than sd


def physical_prior(
    model: ModelSpec,
    gpu: GpuSpec,
    kv_bytes_per_token: float,
    tensor_parallel: int = 1,
    dtype: str = "bf16",
) -> StepModel | None:
    """The roofline step-time shape for this model on this GPU; None when the preset lacks bandwidth or FLOP/s."""
    if not gpu.bandwidth_bytes_per_s or not gpu.bf16_flops_per_s or not model.params:
        return None
    tp = max(1, tensor_parallel)
    bw = gpu.bandwidth_bytes_per_s * EFFICIENCY
    flops = gpu.bf16_flops_per_s * EFFICIENCY
    per_token = 2 * model.params / tp / flops
    head_dim = model.head_dim or model.hidden_size // max(1, model.num_attention_heads)
    per_pair = 4 * model.full_layers * model.num_attention_heads * head_dim / tp / flops
    return StepModel(
        c0=weights_bytes(model.params, dtype) / tp / bw,
        c_decode=per_token,
        c_prefill=per_token,
        c_kv=kv_bytes_per_token / tp / bw,
        c_attn=per_pair,
        source=f"roofline {model.name} on {gpu.name}",
    )


def roofline(physical: StepModel, rows: Rows) -> Prior:
    """The roofline's ratios of decode, KV-read and attention cost to a prefill token's, fitted to the history."""
    per = physical.c_prefill or 1.0
    ratios = (physical.c_decode / per, physical.c_kv / per, physical.c_attn / per)
    return shaped(rows, ratios, "prior", physical.source, SPREAD)


def structural(rows: Rows) -> Prior:
    """The step's structure fitted to the history: a decoding request costs DECODE_PER_PREFILL prefill tokens."""
    source = f"structure: a decoding request costs {DECODE_PER_PREFILL:g}× a prefill token"
    spreads = (SPREAD[0], DECODE_SPREAD, *SPREAD[2:])
    return shaped(rows, (DECODE_PER_PREFILL, 0.0, 0.0), "structure", source, spreads)


def shaped(
    rows: Rows,
    ratios: tuple[float, float, float],
    kind: str,
    source: str,
    spreads: tuple[float, ...] = SPREAD,
) -> Prior:
    """c0 and a prefill token's cost fitted to the history, the other costs as ratios of it (decode, KV, pairs).

    Both are what even a history of single requests shows (a decode step's cost and a prompt's), so the prior is
    anchored to the target's own step times whatever machine the ratios were drawn for."""
    r_dec, r_kv, r_attn = ratios
    shape = [([x[0], r_dec * x[1] + x[2] + r_kv * x[3] + r_attn * x[4]], y, w) for x, y, w in rows]
    post, _ = nonneg_posterior(shape, [0.0, 0.0], [FLAT, FLAT], 1.0)
    ys = [y for _, y, w in rows if y > 0 and w > 0]
    c0, c_tok = post.mean
    notes = []
    # the posterior above is at a relative spread of 1; the rows' own spread scales its standard error
    se_tok = math.sqrt(max(post.var[1], 0.0)) * min(1.0, spread(post.mean, shape, 2))
    if c_tok <= RESOLVED * se_tok:
        # one operating point cannot split a step into fixed and per-token cost (the split lands anywhere from
        # 0 up, by noise: a window at 6-7 running split 9.4 ms + 0 at a ratio of 2 and 8.9 ms + 0.02 ms a token
        # at 2.5, a tenth of the cost the midpoint gives); the midpoint errs least either way (all fixed would
        # predict no cost for a bigger batch, all per-token no floor)
        w_sum = sum(w for _, _, w in shape) or 1.0
        mean_y = sum(w * y for _, y, w in shape) / w_sum
        mean_tok = sum(w * x[1] for x, _, w in shape) / w_sum
        c0, c_tok = mean_y / 2, mean_y / 2 / mean_tok if mean_tok > 0 else 0.0
        notes.append(
            "step times did not grow with the batch or the prompt in the history: fixed and per-token cost "
            "taken as half the mean step each (uncertain: a bigger batch may cost between 0 and 2x that)"
        )
    floor = min(ys, default=0.0)
    if c0 <= 0:  # the steps are (nearly) all per-token cost: a small fixed cost, free to move
        c0 = 0.1 * floor
    mean = (c0, r_dec * c_tok, c_tok, r_kv * c_tok, r_attn * c_tok)
    sd = [m * s for m, s in zip(mean, spreads, strict=True)]
    sd[0] = max(sd[0], 0.5 * floor) if c0 < 0.5 * floor else sd[0]
    # a term the ratios leave at 0 may still be there: the KV reads as much as the per-request cost again (or
    # more) at the context lengths the history showed, attention up to half the per-token cost
    ctx, half = _ratio(rows, 3, 1), _ratio(rows, 4, 2)
    if r_kv == 0:
        sd[3] = 1.5 * mean[1] / ctx if ctx > 0 else FLAT * mean[1]
    if r_attn == 0:
        sd[4] = 0.5 * c_tok / half if half > 0 else FLAT * c_tok
    wide = tuple(max(d, m * s) for d, m, s in zip(sd, mean, SPREAD, strict=True))
    return Prior(mean, tuple(sd), kind, source, tuple(notes), wide if wide != tuple(sd) else ())


def _ratio(rows: Rows, num: int, den: int) -> float:
    top = sum(w * x[num] for x, _, w in rows if x[den] > 0)
    bottom = sum(w * x[den] for x, _, w in rows if x[den] > 0)
    return top / bottom if bottom > 0 else 0.0
