"""Architecture arithmetic: KV bytes per token, per-request KV, per-sequence state and weight bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass

# Bytes per stored value. 4-bit formats carry a 16-bit scale (and zero point) per group of 128 or an 8-bit
# scale per 32 values: about 4.25 bits a weight.
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 4.25 / 8,
    "mxfp4": 4.25 / 8,
}
KV_CACHE_DTYPES = ("auto", "fp8")
WEIGHTS_DTYPES = ("bf16", "fp16", "fp8", "int4")


@dataclass(frozen=True)
class ModelSpec:
    """What the capacity model needs to know about one model (from a preset or a config.json)."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    full_layers: int  # attention layers that keep every token
    sliding_layers: int = 0  # attention layers that keep at most `sliding_window` tokens
    sliding_window: int | None = None
    kv_heads: int = 0  # 0 for MLA
    head_dim: int = 0
    mla_dim: int = 0  # kv_lora_rank + qk_rope_head_dim for MLA, else 0
    state_layers: int = 0  # mamba / linear-attention layers
    state_elements: int = 0  # per sequence, summed over the state layers
    params: float = 0.0
    params_source: str = "preset"
    weights_dtype: str = "bf16"  # as shipped (quantization_config or torch_dtype)
    max_position_embeddings: int | None = None
    source: str = ""

    @property
    def kv_layers(self) -> int:
        """Layers that hold a KV cache."""
        return self.full_layers + self.sliding_layers

    @property
    def is_mla(self) -> bool:
        """True for multi-head latent attention (DeepSeek-V2/V3/R1, Kimi K2)."""
        return self.mla_dim > 0

    @property
    def kind(self) -> str:
        """Short architecture label for humans."""
        parts = ["MLA" if self.is_mla else _gqa_label(self.kv_heads, self.num_attention_heads)]
        if self.sliding_layers:
            parts.append(f"{self.sliding_layers}/{self.kv_layers} layers sliding {self.sliding_window}")
        if self.state_layers:
            parts.append(f"hybrid: {self.kv_layers} attention + {self.state_layers} state layers")
        return ", ".join(parts)


def _gqa_label(kv_heads: int, heads: int) -> str:
    if kv_heads == heads:
        return "MHA"
    return "MQA" if kv_heads == 1 else "GQA"


def kv_dtype_bytes(kv_cache_dtype: str) -> float:
    """Bytes per KV value: 2 for auto (the bf16/fp16 activation dtype), 1 for any fp8 variant."""
    return 1.0 if kv_cache_dtype.startswith("fp8") else 2.0


def kv_heads_per_gpu(spec: ModelSpec, tensor_parallel: int = 1) -> int:
    """KV heads one GPU stores: vLLM splits them across TP ranks and replicates when there are fewer heads."""
    return max(1, spec.kv_heads // max(1, tensor_parallel))


def _entry_elements(spec: ModelSpec, tensor_parallel: int | None) -> int:
    # Values stored per token per layer. The MLA latent is not split across TP ranks: each GPU keeps all of it.
    if spec.is_mla:
        return spec.mla_dim
    heads = spec.kv_heads if tensor_parallel is None else kv_heads_per_gpu(spec, tensor_parallel)
    return 2 * heads * spec.head_dim


def kv_bytes_per_token(spec: ModelSpec, kv_cache_dtype: str = "auto") -> int:
    """KV bytes one token costs in every KV-holding layer (whole model, no TP split)."""
    return int(_entry_elements(spec, None) * spec.kv_layers * kv_dtype_bytes(kv_cache_dtype))


def kv_bytes_per_token_per_gpu(
    spec: ModelSpec, kv_cache_dtype: str = "auto", tensor_parallel: int = 1
) -> int:
    """KV bytes one token costs on each GPU of a tensor-parallel group."""
    return int(_entry_elements(spec, tensor_parallel) * spec.kv_layers * kv_dtype_bytes(kv_cache_dtype))


def state_bytes_per_sequence(spec: ModelSpec, tensor_parallel: int = 1) -> int:
    """Fixed per-sequence state of mamba/linear-attention layers, in the 16-bit model dtype, on one GPU."""
    return math.ceil(spec.state_elements * 2 / max(1, tensor_parallel))


def _blocks(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size) * block_size


def request_kv_bytes(
    spec: ModelSpec,
    tokens: int,
    kv_cache_dtype: str = "auto",
    tensor_parallel: int = 1,
    block_size: int = 16,
) -> int:
    """Bytes one request of `tokens` tokens holds on one GPU: blocks of full and sliding layers plus state."""
    per_layer = _entry_elements(spec, tensor_parallel) * kv_dtype_bytes(kv_cache_dtype)
    full = _blocks(tokens, block_size)
    sliding = full
    if spec.sliding_window:
        # vLLM keeps window-1 past tokens plus the current one, block-aligned.
        sliding = min(full, _blocks(spec.sliding_window - 1, block_size) + block_size)
    attention = per_layer * (spec.full_layers * full + spec.sliding_layers * sliding)
    return int(attention) + state_bytes_per_sequence(spec, tensor_parallel)


def weights_bytes(params: float, dtype: str) -> int:
    """Weight bytes for `params` parameters stored as `dtype` (all MoE experts included)."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown weights dtype {dtype!r}; one of {', '.join(DTYPE_BYTES)}")
    return int(params * DTYPE_BYTES[dtype])
