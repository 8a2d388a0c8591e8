"""Advice for each limit, with numbers from the target's own capacity and signals where they exist."""

from __future__ import annotations

import math

from doctor.capacity.advice import kv_cache_advice
from doctor.capacity.budget import CapacityEstimate
from doctor.capacity.live import LiveCapacity
from doctor.verdicts import Advice

COLD_START_ITL_S = 0.05  # the pack's reference before a light-load baseline is learned (rules/kvdoctor.yml)


def kv_cache(live: LiveCapacity | None, est: CapacityEstimate | None, ev: dict[str, float]) -> list[Advice]:
    """KV-cache options, quantified from cache_config_info or the model arithmetic."""
    p99 = _add(ev.get("prompt_tokens_p99"), ev.get("generation_tokens_p99"))
    out = kv_cache_advice(live, est, p99)
    if out:
        return out
    return [
        Advice("--max-model-len", "shorten `--max-model-len` to the longest request you must serve"),
        Advice(
            "--kv-cache-dtype",
            "`--kv-cache-dtype fp8` halves KV bytes per token, doubling the cache in tokens",
        ),
        Advice(
            "--quantization",
            "FP8 weights free memory for the cache (FP8 compute needs compute capability ≥ 8.9)",
        ),
        Advice("--gpu-memory-utilization", "raise `--gpu-memory-utilization` if the GPU has free memory"),
        Advice("replicas", "add a replica behind the router"),
    ]


def batch_cap(ev: dict[str, float]) -> list[Advice]:
    """Raise --max-num-seqs, by how much the KV cache allows."""
    cap = ev.get("batch_cap_configured") or ev.get("running_max_1m") or ev.get("batch_cap_inferred")
    kv = ev.get("kv_usage_max_1m")
    if not cap:
        return [
            Advice(
                "--max-num-seqs", "raise `--max-num-seqs`; the KV cache has room for more running requests"
            )
        ]
    cap = int(cap)
    text = f"raise `--max-num-seqs` from {cap}"
    if kv is not None and kv > 0:
        room = int(cap * 0.9 / kv)
        target = max(cap * 2, min(room, cap * 4))
        text += (
            f" to {target}: at {cap} running the KV cache is only {kv:.1%} used, room for about {room:,} such "
            f"requests at 90 % usage"
        )
    else:
        text += f" to {cap * 2}: the KV cache is nearly empty at the cap"
    waiting = ev.get("waiting_avg_1m")
    if waiting:
        text += f"; {waiting:.0f} requests are waiting now"
    return [
        Advice("--max-num-seqs", text + "; watch inter-token latency as the batch grows", "signals"),
        Advice(
            "--max-num-batched-tokens",
            "keep `--max-num-batched-tokens` ≥ the new batch so prefills still fit",
        ),
    ]


def compute(ev: dict[str, float], gpu_fp8: bool | None = None) -> list[Advice]:
    """Compute options: scale out, quantize activations, stop speculating at peak."""
    itl, base = ev.get("itl_p50_s"), ev.get("itl_baseline_s")
    slo = ev.get("slo_itl_p95_s")
    if itl and base:
        why = f"inter-token latency p50 {itl * 1000:.0f} ms is {itl / base:.1f}× the light-load {base * 1000:.1f} ms"
    elif slo and ev.get("itl_p95_s"):
        why = f"inter-token latency p95 {ev['itl_p95_s'] * 1000:.0f} ms exceeds the SLO {slo * 1000:.0f} ms"
    elif itl:
        why = (
            f"inter-token latency p50 {itl * 1000:.0f} ms is above the {COLD_START_ITL_S * 1000:.0f} ms cold-start "
            "reference (no light-load baseline learned yet; set an ITL SLO for this target to judge by it)"
        )
    else:
        why = "tokens are slow"
    quant = "W8A8 (INT8) or FP8 quantization (`--quantization fp8`, compute capability ≥ 8.9) speeds up the matmuls"
    if gpu_fp8 is False:
        quant = "W8A8 INT8 quantization speeds up the matmuls (this GPU has no FP8 compute)"
    return [
        Advice(
            "replicas",
            f"{why}: add replicas or GPUs (`--tensor-parallel-size`) to spread the work",
            "signals",
        ),
        Advice("--quantization", quant),
        Advice(
            "--speculative-config", "turn speculative decoding off at peak: it helps latency at low load only"
        ),
        Advice(
            "--max-num-batched-tokens",
            "a smaller `--max-num-batched-tokens` favours inter-token latency over TTFT",
        ),
    ]


def _add(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or math.isnan(a) or math.isnan(b):
        return None
    return a + b
