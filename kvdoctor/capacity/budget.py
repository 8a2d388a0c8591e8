"""Memory budget like vLLM's: GPU memory × utilization − weights − overhead = KV cache, then tokens and concurrency."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvdoctor.capacity.arch import (
    DTYPE_BYTES,
    ModelSpec,
    kv_bytes_per_token,
    kv_bytes_per_token_per_gpu,
    request_kv_bytes,
    state_bytes_per_sequence,
    weights_bytes,
)
from kvdoctor.capacity.presets import GIB, GpuSpec

DEFAULT_UTILIZATION = 0.92
DEFAULT_OVERHEAD = 2 * GIB
DEFAULT_BLOCK_SIZE = 16


@dataclass(frozen=True)
class Deployment:
    """How a model is served: GPU, parallelism and the vLLM flags that decide the cache size."""

    model: ModelSpec
    gpu: GpuSpec | None = None
    tensor_parallel: int = 1
    gpu_memory_utilization: float = DEFAULT_UTILIZATION
    max_model_len: int | None = None
    kv_cache_dtype: str = "auto"
    weights_dtype: str | None = None  # None: as shipped
    kv_cache_bytes: int | None = None  # per GPU, like --kv-cache-memory-bytes; replaces the estimate
    overhead_bytes: int = DEFAULT_OVERHEAD  # per GPU
    block_size: int = DEFAULT_BLOCK_SIZE


@dataclass(frozen=True)
class ModelFigures:
    """What the model costs whatever the GPU: KV bytes per token, weights, one max-model-len request."""

    deployment: Deployment
    kv_bytes_per_token: int  # whole model
    kv_bytes_per_token_per_gpu: int
    weights_bytes: int | None  # whole model; None when the parameter count is unknown
    weights_bytes_per_gpu: int | None
    max_model_len: int
    request_bytes: int  # one max_model_len request on one GPU
    assumptions: tuple[str, ...]

    @property
    def weights_dtype(self) -> str:
        """The weights dtype used."""
        return self.deployment.weights_dtype or self.deployment.model.weights_dtype


@dataclass(frozen=True)
class CapacityEstimate:
    """What the arithmetic says the engine will hold (bytes per GPU unless named otherwise)."""

    deployment: Deployment
    kv_bytes_per_token: int  # whole model
    kv_bytes_per_token_per_gpu: int
    weights_bytes: int  # whole model
    weights_bytes_per_gpu: int
    kv_cache_bytes: int
    kv_cache_tokens: int
    max_model_len: int
    request_bytes: int  # one max_model_len request on one GPU
    max_concurrency: float  # max_model_len requests that fit
    budget_bytes: int | None  # GPU memory × utilization, None when --kv-cache-bytes was given
    assumptions: tuple[str, ...]

    @property
    def weights_dtype(self) -> str:
        """The weights dtype used."""
        return self.deployment.weights_dtype or self.deployment.model.weights_dtype

    @property
    def fits(self) -> bool:
        """True when one max_model_len request fits (vLLM refuses to start otherwise)."""
        return self.max_concurrency >= 1


def model_figures(dep: Deployment) -> ModelFigures:
    """Bytes per token, weights and one max-model-len request's KV bytes: no GPU or cache size needed."""
    m, tp = dep.model, max(1, dep.tensor_parallel)
    notes: list[str] = []
    wdtype = dep.weights_dtype or m.weights_dtype
    w_total: int | None = None
    if m.params:
        w_total = weights_bytes(m.params, wdtype)
        notes.append(
            f"weights: {m.params / 1e9:.1f}B parameters ({m.params_source}, all experts) × "
            f"{DTYPE_BYTES[wdtype]:g} B ({wdtype}) = {w_total / 1e9:.1f} GB"
            + (f", split evenly over {tp} GPUs" if tp > 1 else "")
        )
    else:
        weights_bytes(0, wdtype)  # still refuse an unknown dtype
        notes.append(f"weights unknown: parameters {m.params_source}")
    max_len = dep.max_model_len or m.max_position_embeddings or 8192
    if dep.max_model_len is None:
        notes.append(f"max-model-len {max_len}: the model's max_position_embeddings (vLLM's default)")
    notes.extend(_arch_notes(m, dep, tp))
    return ModelFigures(
        deployment=dep,
        kv_bytes_per_token=kv_bytes_per_token(m, dep.kv_cache_dtype),
        kv_bytes_per_token_per_gpu=kv_bytes_per_token_per_gpu(m, dep.kv_cache_dtype, tp),
        weights_bytes=w_total,
        weights_bytes_per_gpu=None if w_total is None else math.ceil(w_total / tp),
        max_model_len=max_len,
        request_bytes=request_kv_bytes(m, max_len, dep.kv_cache_dtype, tp, dep.block_size),
        assumptions=tuple(notes),
    )


def estimate(dep: Deployment) -> CapacityEstimate:
    """Estimate KV-cache bytes, tokens and max-model-len concurrency for a deployment."""
    fig = model_figures(dep)
    m = dep.model
    notes = list(fig.assumptions)
    if fig.weights_bytes is None and dep.kv_cache_bytes is None:
        raise ValueError(f"cannot size the weights of {m.name}: parameters {m.params_source}")
    w_gpu = fig.weights_bytes_per_gpu or 0
    budget: int | None = None
    if dep.kv_cache_bytes is not None:
        kv_bytes = dep.kv_cache_bytes
        notes.insert(1, f"KV cache {kv_bytes / GIB:.2f} GiB per GPU as given (replaces the memory estimate)")
    elif dep.gpu is None:
        raise ValueError("need a GPU (or --gpu-memory) or --kv-cache-bytes to size the cache")
    else:
        budget = math.ceil(dep.gpu.memory_bytes * dep.gpu_memory_utilization)
        kv_bytes = max(0, budget - w_gpu - dep.overhead_bytes)
        notes.insert(
            1,
            f"budget per GPU: {dep.gpu.memory_bytes / GIB:.1f} GiB × {dep.gpu_memory_utilization:g} "
            f"− weights − {dep.overhead_bytes / GIB:g} GiB for activations, CUDA graphs and non-torch memory "
            "(vLLM measures this by profiling; real overhead varies with --max-num-batched-tokens)",
        )
    per_tok, req = fig.kv_bytes_per_token_per_gpu, fig.request_bytes
    return CapacityEstimate(
        deployment=dep,
        kv_bytes_per_token=fig.kv_bytes_per_token,
        kv_bytes_per_token_per_gpu=per_tok,
        weights_bytes=fig.weights_bytes or 0,
        weights_bytes_per_gpu=w_gpu,
        kv_cache_bytes=kv_bytes,
        kv_cache_tokens=kv_bytes // per_tok if per_tok else 0,
        max_model_len=fig.max_model_len,
        request_bytes=req,
        max_concurrency=kv_bytes / req if req else 0.0,
        budget_bytes=budget,
        assumptions=tuple(notes),
    )


def _arch_notes(m: ModelSpec, dep: Deployment, tp: int) -> list[str]:
    notes = [f"KV dtype {dep.kv_cache_dtype}: {1 if dep.kv_cache_dtype.startswith('fp8') else 2} B per value"]
    if m.is_mla:
        notes.append("MLA: (kv_lora_rank + qk_rope_head_dim) values per layer, held whole on every TP rank")
    elif tp > 1 and m.kv_heads < tp:
        notes.append(f"{m.kv_heads} KV heads < TP {tp}: vLLM replicates a KV head on each GPU")
    if m.sliding_layers:
        notes.append(
            f"{m.sliding_layers} sliding-window layers keep at most {m.sliding_window} tokens a request; "
            "kv_cache_tokens counts tokens at the short-request cost (every layer)"
        )
    if m.state_layers:
        notes.append(
            f"{m.state_layers} mamba/linear-attention layers: {state_bytes_per_sequence(m, tp) / 2**20:.1f} MiB "
            "fixed state per sequence in the 16-bit model dtype"
        )
    notes.append(f"requests occupy whole {dep.block_size}-token blocks")
    return notes


def tokens_for_bytes(est: CapacityEstimate, extra_bytes: float) -> int:
    """How many more tokens `extra_bytes` of cache per GPU hold at this deployment's bytes per token."""
    return int(extra_bytes // est.kv_bytes_per_token_per_gpu) if est.kv_bytes_per_token_per_gpu else 0
