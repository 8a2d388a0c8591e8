"""Quantified KV-cache advice: each option says how many tokens or requests it buys, and where the numbers come from."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvdoctor import fmt
from kvdoctor.capacity.arch import request_kv_bytes, weights_bytes
from kvdoctor.capacity.budget import CapacityEstimate
from kvdoctor.capacity.live import LiveCapacity
from kvdoctor.capacity.presets import PresetError, get_model
from kvdoctor.verdicts import Advice

LIVE, ARITH = "cache_config_info", "model arithmetic"
TARGET_UTILIZATION = 0.95
FAR_ABOVE = 2.0  # suggest a shorter --max-model-len when it is this many times the observed p99
MISMATCH = 1.5  # engine bytes per token this far from the preset's: the preset is another model


@dataclass(frozen=True)
class _Base:
    tokens: int
    bytes_per_token: float | None  # per GPU
    max_len: int | None
    block: int
    cache_dtype: str
    engines: int
    source: str


def _base(live: LiveCapacity | None, est: CapacityEstimate | None) -> _Base | None:
    if live is not None and live.kv_cache_tokens:
        bpt = live.kv_bytes_per_token or (est.kv_bytes_per_token_per_gpu if est else None)
        dtype = live.cache_dtype or (est.deployment.kv_cache_dtype if est else "auto")
        return _Base(
            live.kv_cache_tokens, bpt, live.max_len, live.block_size or 16, dtype, live.engines, LIVE
        )
    if est is not None:
        d = est.deployment
        return _Base(
            est.kv_cache_tokens,
            est.kv_bytes_per_token_per_gpu,
            est.max_model_len,
            d.block_size,
            d.kv_cache_dtype,
            1,
            ARITH,
        )
    return None


def suggest_max_model_len(p99_tokens: float) -> int:
    """A --max-model-len with 25 % headroom over the observed p99, rounded up to 256 (1024 above 4096)."""
    step = 256 if p99_tokens * 1.25 <= 4096 else 1024
    return max(step, math.ceil(p99_tokens * 1.25 / step) * step)


def _concurrency(b: _Base, est: CapacityEstimate | None, length: int) -> float:
    # Arithmetic knows sliding windows and mamba state; live figures count whole blocks of one group.
    if b.source == ARITH and est is not None:
        d = est.deployment
        tp = max(1, d.tensor_parallel)
        return est.kv_cache_bytes / request_kv_bytes(d.model, length, d.kv_cache_dtype, tp, d.block_size)
    return b.tokens / (math.ceil(length / b.block) * b.block)


def kv_cache_advice(
    live: LiveCapacity | None,
    spec: CapacityEstimate | None,
    observed_p99_tokens: float | None = None,
    served_model: str | None = None,
) -> list[Advice]:
    """Options that enlarge the KV cache or shrink what requests reserve, each with its numbers."""
    wrong = preset_mismatch(live, spec, served_model)
    if wrong:
        spec = None  # its weights and bytes per token belong to another model: the engine's own figures only
    b = _base(live, spec)
    if b is None:
        return [Advice("model", wrong, LIVE)] if wrong else []
    p99 = (
        observed_p99_tokens
        if observed_p99_tokens is not None
        else (live.request_p99_tokens if live else None)
    )
    out: list[Advice] = [Advice("model", wrong, LIVE)] if wrong else []
    if p99 and b.max_len and b.max_len >= FAR_ABOVE * p99:
        new = suggest_max_model_len(p99)
        now, then = _concurrency(b, spec, b.max_len), _concurrency(b, spec, new)
        out.append(
            Advice(
                "--max-model-len",
                (
                    f"`--max-model-len {new}` (observed p99 request {p99:,.0f} tokens, limit {b.max_len:,}): "
                    f"full-length requests that fit at once go from {fmt.times(now)} to {fmt.times(then)}; "
                    "longer requests are then rejected"
                ),
                b.source,
            )
        )
    if not b.cache_dtype.startswith("fp8"):
        # with no finished request yet there is no typical request to count: say nothing rather than "?"
        n = live.fits(live.request_p50_tokens) if live else None
        typical = f" ({fmt.times(n)} → {fmt.times(2 * n)} typical requests at once)" if n is not None else ""
        out.append(
            Advice(
                "--kv-cache-dtype",
                (
                    f"`--kv-cache-dtype fp8` doubles the cache from {fmt.tokens(b.tokens)} to "
                    f"{fmt.tokens(2 * b.tokens)} tokens{typical}; check accuracy on your own evals"
                ),
                b.source,
                {"kv_cache_dtype": "fp8"},
            )
        )
    if spec is not None:
        out.extend(_fp8_weights(b, spec, live))
        out.extend(_memory(b, spec, live))
    elif live is not None and live.kv_cache_memory_bytes and b.bytes_per_token:
        out.append(_fixed_cache(live, b))
    total = b.tokens * (b.engines + 1)
    out.append(
        Advice(
            "--data-parallel-size",
            (
                f"another replica (`--data-parallel-size {b.engines + 1}` or one more server behind the router) "
                f"raises the total cache from {fmt.tokens(b.tokens * b.engines)} to {fmt.tokens(total)} tokens"
            ),
            b.source,
            {"replicas": b.engines + 1},
        )
    )
    return out


def preset_mismatch(
    live: LiveCapacity | None, est: CapacityEstimate | None, served_model: str | None = None
) -> str | None:
    """Why the configured model preset is not the model this server serves, when its metrics say so."""
    if est is None:
        return None
    name = est.deployment.model.name
    fix = "fix `model:` in the config; the advice uses the engine's own cache figures"
    if served_model:
        try:
            served = get_model(served_model).name
        except PresetError:
            served = None  # a served name of its own (--served-model-name) says nothing either way
        if served and served != name:
            return f"the config names model {name}, but this server serves {served_model} ({served}): {fix}"
    if live is None or not live.kv_bytes_per_token or not est.kv_bytes_per_token_per_gpu:
        return None
    expect = float(est.kv_bytes_per_token_per_gpu)
    fp8_live, fp8_est = (
        (live.cache_dtype or "").startswith("fp8"),
        est.deployment.kv_cache_dtype.startswith("fp8"),
    )
    expect *= 0.5 if fp8_live and not fp8_est else 2.0 if fp8_est and not fp8_live else 1.0
    ratio = live.kv_bytes_per_token / expect
    if 1 / MISMATCH <= ratio <= MISMATCH:
        return None
    return (
        f"the config's model {name} holds {expect:,.0f} B of KV per token, this engine "
        f"{live.kv_bytes_per_token:,.0f} B (cache_config_info): it serves another model; {fix}"
    )


def _fp8_weights(b: _Base, est: CapacityEstimate, live: LiveCapacity | None) -> list[Advice]:
    d = est.deployment
    if est.weights_dtype not in ("bf16", "fp16") or not b.bytes_per_token:
        return []
    freed = est.weights_bytes_per_gpu - weights_bytes(d.model.params, "fp8") / max(1, d.tensor_parallel)
    gain = int(freed // b.bytes_per_token)
    how, note = "it ", ""
    if d.gpu is not None and d.gpu.compute_capability is not None and not d.gpu.fp8_compute:
        how = f"on {d.gpu.name} (cc {d.gpu.compute_capability}, below 8.9) FP8 runs weight-only (Marlin): it "
    elif d.gpu is None or (d.gpu.compute_capability is None and d.gpu.fp8_native is None):
        note = " (FP8 compute needs compute capability ≥ 8.9; older GPUs run it weight-only)"
    # a cache sized in bytes (--kv-cache-memory-bytes, or --kv-cache-bytes here) does not grow by itself
    fixed = (live is not None and bool(live.kv_cache_memory_bytes)) or d.kv_cache_bytes is not None
    then = " once the freed memory goes to the cache" if fixed else ""
    src = f"{LIVE} + {ARITH}" if b.source == LIVE else ARITH
    return [
        Advice(
            "--quantization",
            (
                f"`--quantization fp8` (or an FP8 checkpoint): {how}frees {fmt.gb(freed)} of weights per GPU{note} → "
                f"+{fmt.tokens(gain)} tokens ({fmt.tokens(b.tokens)} → {fmt.tokens(b.tokens + gain)}){then}"
            ),
            src,
        )
    ]


def _memory(b: _Base, est: CapacityEstimate, live: LiveCapacity | None) -> list[Advice]:
    d = est.deployment
    if live is not None and live.kv_cache_memory_bytes and b.bytes_per_token:
        return [_fixed_cache(live, b)]
    util = live.gpu_memory_utilization if live and live.gpu_memory_utilization else d.gpu_memory_utilization
    if d.gpu is None or d.kv_cache_bytes is not None or util >= TARGET_UTILIZATION or not b.bytes_per_token:
        return []
    extra = d.gpu.memory_bytes * (TARGET_UTILIZATION - util)
    gain = int(extra // b.bytes_per_token)
    src = f"{LIVE} + {ARITH}" if b.source == LIVE else ARITH
    return [
        Advice(
            "--gpu-memory-utilization",
            (
                f"`--gpu-memory-utilization {TARGET_UTILIZATION}` (from {util:g}) gives the cache {fmt.gib(extra)} more "
                f"per GPU → +{fmt.tokens(gain)} tokens ({fmt.tokens(b.tokens)} → {fmt.tokens(b.tokens + gain)}), "
                "if nothing else uses the GPU"
            ),
            src,
        )
    ]


def _fixed_cache(live: LiveCapacity, b: _Base) -> Advice:
    per_gib = int(2**30 // (b.bytes_per_token or 1))
    return Advice(
        "--kv-cache-memory-bytes",
        (
            f"`--kv-cache-memory-bytes` fixes the cache at {fmt.gib(live.kv_cache_memory_bytes or 0)} "
            f"({fmt.tokens(b.tokens)} tokens, {b.bytes_per_token:,.0f} B/token): each extra GiB adds "
            f"{fmt.tokens(per_gib)} tokens; drop the flag to let --gpu-memory-utilization size it"
        ),
        LIVE,
    )


def max_model_len_finding_text(bound_low: int, bound_high: int | None, p99_tokens: float) -> str:
    """The sentence for "--max-model-len far above observed request lengths": observed p99 vs the limit."""
    ratio = f"{bound_low / p99_tokens:.0f}×" if p99_tokens > 0 else "far"
    if bound_high is None or bound_high <= bound_low + 1:
        limit = f"is {bound_low:,}, {ratio} longer"
    else:
        limit = f"is between {bound_low:,} and {bound_high - 1:,} (token-histogram buckets), at least {ratio} longer"
    return (
        f"Observed p99 request length is {p99_tokens:,.0f} tokens (prompt + generation) while --max-model-len "
        f"{limit}; `--max-model-len {suggest_max_model_len(p99_tokens)}` would still fit the p99 request."
    )
