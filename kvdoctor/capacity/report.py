"""Render a capacity result: a short table for humans, a dict for --json."""

from __future__ import annotations

from kvdoctor import fmt
from kvdoctor.capacity.advice import ARITH, LIVE
from kvdoctor.capacity.budget import CapacityEstimate, ModelFigures
from kvdoctor.capacity.live import LiveCapacity
from kvdoctor.capacity.presets import GpuSpec
from kvdoctor.jsondoc import JsonObject
from kvdoctor.verdicts import Advice

NO_CACHE = "KV cache not sized: give --gpu NAME, --gpu-memory GiB or --kv-cache-bytes SIZE for its tokens and concurrency"
Arithmetic = CapacityEstimate | ModelFigures  # ModelFigures: no GPU or cache size given


def _estimate_dict(e: Arithmetic) -> JsonObject:
    d, m = e.deployment, e.deployment.model
    sized = e if isinstance(e, CapacityEstimate) else None
    return {
        "model": m.name,
        "architecture": m.kind,
        "gpu": d.gpu.name if d.gpu else None,
        "gpu_memory_bytes": d.gpu.memory_bytes if d.gpu else None,
        "fp8_compute": d.gpu.fp8_compute if d.gpu and _fp8_known(d.gpu) else None,
        "tensor_parallel": d.tensor_parallel,
        "gpu_memory_utilization": d.gpu_memory_utilization,
        "kv_cache_dtype": d.kv_cache_dtype,
        "weights_dtype": e.weights_dtype,
        "kv_bytes_per_token": e.kv_bytes_per_token,
        "kv_bytes_per_token_per_gpu": e.kv_bytes_per_token_per_gpu,
        "weights_bytes": e.weights_bytes,
        "weights_bytes_per_gpu": e.weights_bytes_per_gpu,
        "kv_cache_bytes": sized.kv_cache_bytes if sized else None,
        "kv_cache_tokens": sized.kv_cache_tokens if sized else None,
        "max_model_len": e.max_model_len,
        "max_model_len_request_bytes": e.request_bytes,
        "max_concurrency": round(sized.max_concurrency, 3) if sized else None,
        "fits": sized.fits if sized else None,
        "assumptions": list(e.assumptions) + ([] if sized else [NO_CACHE]),
    }


def _fp8_known(gpu: GpuSpec) -> bool:
    return gpu.compute_capability is not None or gpu.fp8_native is not None


def _live_dict(lc: LiveCapacity) -> JsonObject:
    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 3)

    return {
        "engines": lc.engines,
        "kv_cache_tokens": lc.kv_cache_tokens,
        "tokens_source": lc.tokens_source,
        "num_gpu_blocks": lc.num_gpu_blocks,
        "block_size": lc.block_size,
        "kv_cache_memory_bytes": lc.kv_cache_memory_bytes,
        "kv_bytes_per_token": r(lc.kv_bytes_per_token),
        "kv_cache_max_concurrency": lc.kv_cache_max_concurrency,
        "cache_dtype": lc.cache_dtype,
        "gpu_memory_utilization": lc.gpu_memory_utilization,
        "max_model_len": lc.max_model_len,
        "max_model_len_bound": list(lc.max_model_len_bound) if lc.max_model_len_bound else None,
        "max_model_len_request_share": r(lc.max_len_request_share),
        "max_model_len_request_bytes": lc.max_len_request_bytes,
        "requests_observed": lc.requests_observed,
        "prompt_tokens_p50": r(lc.prompt_p50),
        "prompt_tokens_p99": r(lc.prompt_p99),
        "generation_tokens_p50": r(lc.generation_p50),
        "generation_tokens_p99": r(lc.generation_p99),
        "request_tokens_p50": r(lc.request_p50_tokens),
        "request_tokens_p99": r(lc.request_p99_tokens),
        "requests_fit_p50": r(lc.fits(lc.request_p50_tokens)),
        "requests_fit_p99": r(lc.fits(lc.request_p99_tokens)),
    }


def to_dict(est: Arithmetic | None, live: LiveCapacity | None, advice: list[Advice]) -> JsonObject:
    """The --json document: headline fields (arithmetic if available, else live), both views, advice."""
    out: JsonObject = {}
    if est is not None:
        out.update(_estimate_dict(est))
        out["source"] = ARITH
    elif live is not None:
        out.update(
            {
                "source": LIVE,
                "kv_bytes_per_token": _live_dict(live)["kv_bytes_per_token"],
                "weights_bytes": None,
                "kv_cache_bytes": live.kv_cache_memory_bytes,
                "kv_cache_tokens": live.kv_cache_tokens,
                "max_model_len": live.max_len,
                "max_concurrency": live.kv_cache_max_concurrency or live.fits(live.max_len),
                "assumptions": _live_notes(live),
            }
        )
    out["live"] = _live_dict(live) if live is not None else None
    out["advice"] = [{"flag": a.flag, "text": a.text, "source": a.source} for a in advice]
    return out


def _live_notes(lc: LiveCapacity) -> list[str]:
    notes = [f"tokens from {lc.tokens_source or 'nothing: no vllm:cache_config_info in the scrape'}"]
    if lc.max_model_len is None and lc.max_model_len_bound:
        lo, hi = lc.max_model_len_bound
        notes.append(
            f"max-model-len not exported; {lo:,} ≤ max-model-len < {hi:,} from the largest token bucket"
        )
    notes.append("request lengths: p50/p99 of prompt plus p50/p99 of generation, over the server's lifetime")
    return notes


def table(est: Arithmetic | None, live: LiveCapacity | None, advice: list[Advice]) -> str:
    """A short readable table; two columns when both the arithmetic and the engine's figures exist."""
    rows: list[tuple[str, str, str]] = []
    e, lc = est, live
    sized = e if isinstance(e, CapacityEstimate) else None
    if e is not None:
        d = e.deployment
        rows.append(("model", f"{d.model.name} ({d.model.kind})", ""))
        gpu = d.gpu.label if d.gpu else "—"
        rows.append(("GPU", gpu + (f" × TP {d.tensor_parallel}" if d.tensor_parallel > 1 else ""), ""))
    lv = lc.kv_bytes_per_token if lc else None
    rows += [
        ("KV bytes per token", _b(e.kv_bytes_per_token_per_gpu if e else None), _b(lv)),
        ("weights per GPU", _weights(e), ""),
        (
            "KV cache per GPU",
            fmt.gib(sized.kv_cache_bytes) if sized else "",
            fmt.gib(lc.kv_cache_memory_bytes) if lc and lc.kv_cache_memory_bytes else "",
        ),
        (
            "KV cache tokens",
            f"{sized.kv_cache_tokens:,}" if sized else "",
            f"{lc.kv_cache_tokens:,}" if lc and lc.kv_cache_tokens else "",
        ),
        ("max-model-len", f"{e.max_model_len:,}" if e else "", _len(lc)),
        (
            "one max-len request",
            _req(e),
            f"{lc.max_len_request_share:.0%} of cache" if lc and lc.max_len_request_share else "",
        ),
        ("max-len requests at once", fmt.times(sized.max_concurrency) if sized else "", _conc(lc)),
    ]
    if lc is not None and lc.request_p50_tokens is not None:
        rows.append(
            (
                "request p50 / p99",
                "",
                f"{lc.request_p50_tokens:,.0f} / {lc.request_p99_tokens or 0:,.0f} tok"
                f" ({lc.requests_observed:,} requests)",
            )
        )
        f50, f99 = lc.fits(lc.request_p50_tokens), lc.fits(lc.request_p99_tokens)
        if f50 and f99:
            rows.append(("p50 / p99 requests at once", "", f"{fmt.times(f50)} / {fmt.times(f99)}"))
    head = ("", "model arithmetic" if e else "", "engine (cache_config_info)" if lc else "")
    rows = [r for r in rows if r[1] or r[2]]
    w0 = max(len(r[0]) for r in [head, *rows])
    w1 = max(len(r[1]) for r in [head, *rows])
    lines = [f"{a:<{w0}}  {b:<{w1}}  {c}".rstrip() for a, b, c in [head, *rows]]
    if sized is not None and not sized.fits:
        lines.append(
            f"does not fit: one {sized.max_model_len:,}-token request needs {fmt.gib(sized.request_bytes)}"
        )
    if e is not None and sized is None:
        lines.append(NO_CACHE)
    notes = list(e.assumptions) if e else (_live_notes(lc) if lc else [])
    lines += ["", "assumptions:", *(f"  - {n}" for n in notes)]
    if advice:
        lines += ["", "to get more KV cache:", *(f"  - {a.text} [{a.source}]" for a in advice)]
    return "\n".join(lines)


def _b(x: float | None) -> str:
    return "" if x is None else f"{x:,.0f} B ({fmt.gib(x) if x >= 2**20 else f'{x / 1024:.1f} KiB'})"


def _len(lc: LiveCapacity | None) -> str:
    if lc is None:
        return ""
    if lc.max_model_len is not None:
        return f"{lc.max_model_len:,}"
    return (
        f"{lc.max_model_len_bound[0]:,}–{lc.max_model_len_bound[1] - 1:,}" if lc.max_model_len_bound else ""
    )


def _req(e: Arithmetic | None) -> str:
    if e is None:
        return ""
    if isinstance(e, ModelFigures):
        return f"{fmt.gib(e.request_bytes)} ({e.request_bytes:,} B)"
    share = f" ({e.request_bytes / e.kv_cache_bytes:.0%} of cache)" if e.kv_cache_bytes else ""
    return fmt.gib(e.request_bytes) + share


def _weights(e: Arithmetic | None) -> str:
    if e is None:
        return ""
    if e.weights_bytes_per_gpu is None:
        return f"unknown ({e.weights_dtype})"
    exact = f", {e.weights_bytes_per_gpu:,} B" if isinstance(e, ModelFigures) else ""
    return f"{fmt.gb(e.weights_bytes_per_gpu)} ({e.weights_dtype}{exact})"


def _conc(lc: LiveCapacity | None) -> str:
    if lc is None:
        return ""
    n = lc.kv_cache_max_concurrency or lc.fits(lc.max_len)
    return fmt.times(n) if n else ""
