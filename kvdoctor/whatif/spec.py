"""Speculative decoding as a window's counters show it, and what another `num_speculative_tokens` would do.

vLLM records one ITL observation per decoding request per step, however many tokens the step emitted, so the
decode steps of a window are its ITL count. Of those steps, `spec_decode_num_drafts` carried drafts (an n-gram
proposer drafts only where the context repeats), `…_num_draft_tokens` were verified and `…_accepted_tokens_per_pos`
say how often position i was accepted. A draft token is verified in the decoding request's own step, as one
more query token with its own logits: it is priced as a share of the fitted per-request cost (`verify_cost`).
What the speculation machinery costs per step besides (the proposer, the rejection sampler) is not exported:
it stays inside the fitted step time whatever `num_speculative_tokens` becomes, and the prediction says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kvdoctor.whatif.model import Engine, StepModel
from kvdoctor.whatif.window import PER_POSITION as PER_POS
from kvdoctor.whatif.window import Snap, delta, hist_name

MAX_TOKENS = 16  # beyond this the extrapolated acceptance is pure guesswork; vLLM's own examples use 1-7


@dataclass(frozen=True)
class Speculation:
    """What the window's speculation measured: drafts, their length and per-position acceptance."""

    num_speculative_tokens: int  # k the server runs with (the positions its counters carry)
    draft_share: float  # share of decode steps that carried a draft
    draft_length: float  # draft tokens per draft (≤ k: an n-gram match may be shorter)
    acceptance: tuple[float, ...]  # per position: share of drafts whose token at that position was accepted

    def acceptance_at(self, k: int) -> tuple[float, ...]:
        """Per-position acceptance for k draft tokens; positions never measured continue the last ratio."""
        seen = list(self.acceptance[:k])
        if k > len(seen) and seen:
            # each position is accepted only after the one before it: continue the last conditional rate
            last = seen[-1]
            prev = seen[-2] if len(seen) > 1 else 1.0
            ratio = min(0.95, last / prev) if prev > 0 else 0.0
            while len(seen) < k:
                seen.append(seen[-1] * ratio)
        return tuple(seen)

    def accepted_per_step(self, k: int) -> float:
        """Output tokens a decoding request gains per step with k draft tokens (1 without drafts)."""
        return 1.0 + self.draft_share * sum(self.acceptance_at(k))

    def draft_tokens_per_step(self, k: int) -> float:
        """Draft tokens a decoding request verifies per step with k draft tokens, drafts as long relative to k."""
        if not self.num_speculative_tokens:
            return 0.0
        return self.draft_share * self.draft_length * k / self.num_speculative_tokens


def read(snaps: list[Snap]) -> Speculation | None:
    """The window's speculation; None when no draft was proposed in it."""
    a, b = snaps[0], snaps[-1]
    drafts = delta(a, b, "vllm:spec_decode_num_drafts_total")
    steps = delta(a, b, f"{hist_name(b, 'itl')}_count")
    if not drafts > 0 or not steps > 0:
        return None
    positions = sorted(
        int(key[len(PER_POS) + 11 : -2])
        for key in b.flat
        if key.startswith(PER_POS + '{position="') and key[len(PER_POS) + 11 : -2].isdigit()
    )
    tokens = delta(a, b, "vllm:spec_decode_num_draft_tokens_total")
    # the positions vLLM counts acceptance at are 0…k-1; a draft is never longer than k
    k = max(positions[-1] + 1 if positions else 1, math.ceil(tokens / drafts - 1e-9))
    if positions:
        acceptance = tuple(max(0.0, delta(a, b, f'{PER_POS}{{position="{i}"}}') / drafts) for i in range(k))
    else:  # no per-position counters: the mean acceptance spread geometrically over k positions
        acceptance = _geometric(delta(a, b, "vllm:spec_decode_num_accepted_tokens_total") / drafts, k)
    return Speculation(k, min(1.0, drafts / steps), min(float(k), tokens / drafts), acceptance)


def _geometric(mean: float, k: int) -> tuple[float, ...]:
    """p, p², … over k positions with Σ = mean (bisection on p)."""
    lo, hi = 0.0, 1.0
    for _ in range(50):
        p = (lo + hi) / 2
        lo, hi = (p, hi) if sum(p ** (i + 1) for i in range(k)) < mean else (lo, p)
    return tuple(lo ** (i + 1) for i in range(k))


def measured(engine: Engine, spec: Speculation) -> Engine:
    """The engine running the window's speculation; the step times learned from it include its drafts."""
    k = spec.num_speculative_tokens
    drafts = spec.draft_tokens_per_step(k)
    return replace(
        engine,
        num_speculative_tokens=k,
        accepted_per_step=spec.accepted_per_step(k),
        draft_tokens_per_step=drafts,
        fitted_draft_tokens_per_step=drafts,
        speculation=spec,
    )


def describe(spec: Speculation) -> str:
    """One line on the window's speculation, for the assumptions."""
    k = spec.num_speculative_tokens
    per_pos = "/".join(f"{a:.2f}" for a in spec.acceptance)
    return (
        f"speculative decoding: {k} draft tokens, drafts on {spec.draft_share:.0%} of decode steps "
        f"({spec.draft_length:.2g} tokens each), accepted per position {per_pos} of drafts: "
        f"{spec.accepted_per_step(k):.3g} tokens per step"
    )


def with_tokens(engine: Engine, k: int) -> tuple[Engine, str]:
    """The engine with `num_speculative_tokens` k (0: off), and a note on what it changes per step."""
    spec = engine.speculation
    if spec is None:
        raise ValueError("no speculation measured")
    if k == 0:
        after = replace(engine, num_speculative_tokens=0, accepted_per_step=1.0, draft_tokens_per_step=0.0)
        return after, (
            f"speculation off: 1 token per decode step instead of {engine.accepted_per_step:.3g}, each step "
            f"without its {engine.draft_tokens_per_step:.2g} draft tokens per request to verify; what proposing "
            "and rejection sampling cost each step is not exported and is kept, so steps may shorten more"
        )
    after = replace(
        engine,
        num_speculative_tokens=k,
        accepted_per_step=spec.accepted_per_step(k),
        draft_tokens_per_step=spec.draft_tokens_per_step(k),
    )
    unseen = (
        f"; positions {spec.num_speculative_tokens + 1}-{k} never measured, their acceptance extrapolated "
        f"({'/'.join(f'{a:.2f}' for a in spec.acceptance_at(k)[spec.num_speculative_tokens :])})"
        if k > spec.num_speculative_tokens
        else ""
    )
    return after, (
        f"num_speculative_tokens {engine.num_speculative_tokens} → {k}: {after.accepted_per_step:.3g} tokens "
        f"per decode step (now {engine.accepted_per_step:.3g}), {after.draft_tokens_per_step:.2g} draft tokens "
        f"per request to verify (now {engine.draft_tokens_per_step:.2g}){unseen}"
    )


def verify_cost(engine: Engine, step: StepModel) -> float:
    """Seconds a decoding request adds to a step for its drafts beyond those the fitted step times include.

    A draft token is computed like the token it rides with (the same layers, its own logits, the same context),
    so the fitted per-request cost is shared by the 1 + drafts tokens a decoding request computed per step.
    """
    fitted = engine.fitted_draft_tokens_per_step
    return step.c_decode * (engine.draft_tokens_per_step - fitted) / (1.0 + fitted)


def capacity_note(
    now: Engine, after: Engine, step: StepModel, batches: tuple[float, float], context: float
) -> str:
    """Whether decode throughput rises or drops with the change, at the window's batch and the predicted one.

    A batch of b decoders emits b × tokens-per-step per step; speculation pays when that outgrows the step's
    extra verify cost. On a memory-bound GPU verifying is nearly free at small batches and costs more as the
    batch fills; on a compute-bound CPU it costs from the start.
    """
    parts = []
    for label, b in zip(("window's", "predicted"), batches, strict=True):
        b = max(1.0, b)
        before, later = _decode_rate(now, step, b, context), _decode_rate(after, step, b, context)
        if math.isfinite(before) and math.isfinite(later) and before > 0:
            parts.append(
                f"at the {label} batch of {b:.3g}: {before:.3g} → {later:.3g} tokens/s ({later / before - 1:+.0%})"
            )
    if not parts:
        return ""
    return (
        "decode capacity, speculation "
        + ("off" if not after.num_speculative_tokens else "changed")
        + ": "
        + "; ".join(parts)
    )


def _decode_rate(engine: Engine, step: StepModel, batch: float, context: float) -> float:
    """Output tokens per second a batch of decoding requests emits, each at `context` tokens."""
    t = step.duration(batch, 0.0, batch * context) + batch * verify_cost(engine, step)
    return batch * engine.accepted_per_step / t if t > 0 else math.nan
