"""Advice for each limit, with numbers from the target's own capacity and signals where they exist."""

from __future__ import annotations

import math

from kvdoctor.capacity.advice import kv_cache_advice
from kvdoctor.capacity.budget import CapacityEstimate
from kvdoctor.capacity.live import LiveCapacity
from kvdoctor.ceiling import CEILING_SHARE, COLD_START_ITL_S, ceiling_share, compute_threshold_ratio
from kvdoctor.verdicts import Advice


def kv_cache(
    live: LiveCapacity | None,
    est: CapacityEstimate | None,
    ev: dict[str, float],
    served_model: str | None = None,
) -> list[Advice]:
    """KV-cache options, quantified from cache_config_info or the model arithmetic."""
    p99 = _add(ev.get("prompt_tokens_p99"), ev.get("generation_tokens_p99"))
    out = kv_cache_advice(live, est, p99, served_model)
    if out:
        return out
    return [
        Advice(
            "--max-model-len",
            "a shorter `--max-model-len` frees KV only when long requests are what fills the cache: V1 allocates "
            "blocks as tokens arrive, so a large limit alone reserves nothing; it caps how much one request can hold",
        ),
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


def batch_cap(ev: dict[str, float], plateau: float | None = None, engines: int = 1) -> list[Advice]:
    """Raise --max-num-seqs, by how much the KV cache allows (per engine: the cap, queue and cache are each engine's)."""
    cap = ev.get("batch_cap_configured") or plateau or ev.get("batch_cap_inferred")
    if not cap and engines <= 1:
        cap = ev.get("running_max_1m")
    kv = ev.get("kv_usage_max_1m")
    if not cap:
        return [
            Advice(
                "--max-num-seqs", "raise `--max-num-seqs`; the KV cache has room for more running requests"
            )
        ]
    cap = int(cap)
    # one step of x2, the change the what-if's relief check simulates: one number for the advice and the check
    text = f"raise `--max-num-seqs` from {cap} to {cap * 2}"
    if kv is not None and kv > 0:
        room = int(cap * 0.9 / kv)
        text += (
            f": at {cap} running the KV cache is only {kv:.1%} used, room for about {room:,} such requests at "
            f"90 % usage, so a further step if this one pays"
        )
    else:
        text += ": the KV cache is nearly empty at the cap"
    if engines > 1:
        text += f" (per engine; {engines} data-parallel engines)"
    waiting = ev.get("waiting_avg_1m")
    if waiting:
        text += f"; {waiting:.0f} requests are waiting now"
    change: dict[str, float | str] = {"max_num_seqs": cap * 2}
    return [
        Advice("--max-num-seqs", text + "; watch inter-token latency as the batch grows", "signals", change),
        Advice(
            "--max-num-batched-tokens",
            "keep `--max-num-batched-tokens` ≥ the new batch so prefills still fit",
        ),
    ]


PREFILL_HEAVY = (
    8.0  # prompt tokens computed per generated token (rules/kvdoctor.yml, kvdoctor:prefill_decode:ratio1m)
)


def compute(ev: dict[str, float], gpu_fp8: bool | None = None, engines: int = 1) -> list[Advice]:
    """Compute options: scale out, quantize, stop speculating at peak where it drafts; prefill options on long prompts.
    A second replica of a data-parallel server of `engines` engines is as many engines again."""
    itl, base = ev.get("itl_p50_s"), ev.get("itl_baseline_s")
    slo, slo_ttft = ev.get("slo_itl_p95_s"), ev.get("slo_ttft_p95_s")
    if slo and ev.get("itl_p95_s", 0) > slo:
        why = f"inter-token latency p95 {ev['itl_p95_s'] * 1000:.0f} ms exceeds the SLO {slo * 1000:.0f} ms"
    elif slo_ttft and ev.get("ttft_p95_s", 0) > slo_ttft:
        why = f"time to first token p95 {ev['ttft_p95_s']:.2f} s exceeds the SLO {slo_ttft:.2f} s"
    elif itl and base:
        why = slower_than_the_batch(ev, itl, base)
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
    ratio = ev.get("prefill_decode_ratio", 0.0)
    if ratio >= PREFILL_HEAVY:
        mean, mean_base = ev.get("itl_mean_30s"), ev.get("itl_mean_baseline_s")
        if mean and mean_base and not (slo or slo_ttft):
            why = (
                f"mean inter-token latency {mean * 1000:.0f} ms is {mean / mean_base:.1f}× its light-load "
                f"{mean_base * 1000:.1f} ms: prefill chunks stall decoding"
            )
        return _prefill(ev, why, ratio, quant)
    out = [
        Advice(
            "replicas",
            f"{why}: add replicas or GPUs (`--tensor-parallel-size`) to spread the work",
            "signals",
            {"replicas": 2 * engines},
        ),
        Advice("--quantization", quant),
    ]
    if "spec_decode_acceptance" in ev:  # only a server that drafts has speculation to turn off
        out.append(
            Advice(
                "--speculative-config",
                "turn speculative decoding off at peak: it helps latency at low load only",
                "spec_decode counters",
                {"num_speculative_tokens": 0},  # the what-if predicts whether throughput drops without it
            )
        )
    out.append(
        Advice(
            "--max-num-batched-tokens",
            "a smaller `--max-num-batched-tokens` favours inter-token latency over TTFT",
        )
    )
    return out


def slower_than_the_batch(ev: dict[str, float], itl: float, base: float) -> str:
    """Why ITL is slow for the batch: its ratio to light load, and tokens/s against this server's own ceiling."""
    running = ev.get("running_avg_1m", 0.0)
    share = ev.get("compute_utilisation")
    if share is None:
        share = ceiling_share(running, itl, base)
    text = f"inter-token latency p50 {itl * 1000:.0f} ms is {itl / base:.1f}× its light-load {base * 1000:.1f} ms"
    if share is None:  # too small a batch to say how much of a step it pays for
        return f"{text} (compute from {compute_threshold_ratio(running):.1f}×)"
    return (
        f"{text} at {running:.0f} running: tokens/s at {share * 100:.0f} % of this server's ceiling (a bigger "
        f"batch buys little more; compute from {CEILING_SHARE * 100:.0f} %, {compute_threshold_ratio(running):.1f}× here)"
    )


def _prefill(ev: dict[str, float], why: str, ratio: float, quant: str) -> list[Advice]:
    hit = ev.get("prefix_cache_hit_ratio")
    if hit is not None and hit < 0.5:
        prefix = (
            f"the prefix-cache hit rate is {hit:.0%}: where prompts share a prefix (system prompt, RAG template), "
            "keep it byte-stable and first so `--enable-prefix-caching` skips its prefill"
        )
    elif hit is not None:
        prefix = (
            f"the prefix cache already serves {hit:.0%} of prompt tokens; longer shared prefixes save more"
        )
    else:
        prefix = (
            "where prompts share a prefix, `--enable-prefix-caching` skips its prefill (keep it byte-stable)"
        )
    return [
        Advice(
            "prefill",
            f"prefill-heavy load ({ratio:.0f} prompt tokens computed per generated token): {why}; first tokens wait "
            "for prefill compute while the KV cache has room",
            "signals",
        ),
        Advice("--enable-prefix-caching", prefix),
        Advice(
            "--max-num-batched-tokens",
            "a larger `--max-num-batched-tokens` prefills more per step (better TTFT, worse inter-token latency); "
            "a smaller one protects inter-token latency at the cost of TTFT",
        ),
        Advice(
            "--long-prefill-token-threshold",
            "`--long-prefill-token-threshold` (with `--max-num-partial-prefills`) stops one long prompt from "
            "taking the whole step budget, so short requests still start",
        ),
        Advice(
            "disaggregated prefill",
            "at scale, separate prefill and decode instances (`--kv-transfer-config`, disaggregated prefill) so "
            "long prefills never stall decodes; or add replicas",
        ),
        Advice("--quantization", quant),
    ]


def _add(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or math.isnan(a) or math.isnan(b):
        return None
    return a + b


def lora_slots(ev: dict[str, float], max_loras: int | None) -> list[Advice]:
    """More adapter slots for the requests deferred behind a full --max-loras, or adapters kept apart."""
    waiting = ev.get("waiting_deferred", 0.0)
    held = f"all {max_loras} slots are" if max_loras else "every slot is"
    text = (
        f"{waiting:.0f} requests wait for a LoRA adapter slot while {held} held by adapters with requests running; "
        "each slot keeps one adapter of up to `--max-lora-rank` in GPU memory"
    )
    more = (
        f"raise `--max-loras` from {max_loras} to at least {max_loras + 1}"
        if max_loras
        else "raise `--max-loras`"
    )
    return [
        Advice("--max-loras", f"{more} (one slot per adapter in use at once): {text}", "lora_requests_info"),
        Advice("router", "or route each adapter's traffic to servers that keep it loaded"),
    ]
