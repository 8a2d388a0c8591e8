"""Read a Hugging Face config.json (any architecture we can size) into a ModelSpec."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvdoctor.capacity.arch import ModelSpec
from kvdoctor.capacity.fields import Fields, ModelConfigError
from kvdoctor.capacity.params import estimate_params

LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
HEADS = ("num_attention_heads", "n_head", "num_heads")
HIDDEN = ("hidden_size", "n_embd", "d_model")
KV_HEADS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num")
MAX_LEN = ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions", "max_seq_len")

FULL = {"full_attention", "attention", "global", "global_attention", "full"}
SLIDING = {"sliding_attention", "sliding_window", "local", "local_attention", "chunked_attention"}
STATE = {"linear_attention", "mamba", "mamba2", "ssm", "gated_delta_net", "conv", "short_conv"}
NONE = {"mlp", "moe", "none"}


def flatten(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language-model part of a config: `text_config`/`llm_config` merged over the outer fields."""
    for key in ("text_config", "llm_config", "language_config"):
        inner = cfg.get(key)
        if isinstance(inner, dict):
            merged = {k: v for k, v in cfg.items() if k != key}
            merged.update(inner)
            return merged
    return cfg


def layer_kinds(f: Fields, num_layers: int) -> list[str]:
    """Per layer: "full", "sliding", "state" (mamba / linear attention) or "none" (no cache at all)."""
    types = f.get("layer_types", "layers_block_type")
    if isinstance(types, list):
        if len(types) != num_layers:
            raise ModelConfigError(
                f"{f.source}: 'layer_types' has {len(types)} entries for {num_layers} layers"
            )
        return [_kind(f, str(t)) for t in types]
    pattern = f.get("hybrid_override_pattern")
    if isinstance(pattern, str):
        return [{"M": "state", "*": "full"}.get(c, "none") for c in pattern[:num_layers]]
    interval = f.get("full_attention_interval")
    if interval:
        return ["full" if (i + 1) % int(interval) == 0 else "state" for i in range(num_layers)]
    period = f.get("attn_layer_period")
    if period:
        offset = int(f.get("attn_layer_offset") or 0)
        return ["full" if i % int(period) == offset else "state" for i in range(num_layers)]
    if f.get("sliding_window") is None or f.get("use_sliding_window") is False:
        return ["full"] * num_layers
    every = f.get("sliding_window_pattern") or (2 if f.cfg.get("model_type") == "gemma2" else None)
    if every:
        return ["full" if (i + 1) % int(every) == 0 else "sliding" for i in range(num_layers)]
    return ["sliding"] * num_layers


def _kind(f: Fields, t: str) -> str:
    t = t.lower()
    for kind, names in (("full", FULL), ("sliding", SLIDING), ("state", STATE), ("none", NONE)):
        if t in names:
            return kind
    raise ModelConfigError(f"{f.source}: unknown layer type {t!r} in 'layer_types'")


def state_elements_per_layer(f: Fields, hidden: int) -> int:
    """Values of recurrent + convolution state one sequence keeps in one mamba/linear-attention layer."""
    if f.get("linear_num_value_heads") is not None:  # Gated DeltaNet (Qwen3-Next)
        vh, kh = f.need_int("linear_num_value_heads"), f.need_int("linear_num_key_heads")
        kd, vd = f.need_int("linear_key_head_dim"), f.need_int("linear_value_head_dim")
        conv = f.need_int("linear_conv_kernel_dim")
        return vh * kd * vd + (2 * kh * kd + vh * vd) * (conv - 1)
    if f.get("conv_L_cache") is not None:  # short convolution (LFM2)
        return hidden * f.need_int("conv_L_cache")
    d_state = f.need_int("mamba_d_state", "ssm_state_size", "state_size")
    d_conv = f.need_int("mamba_d_conv", "conv_kernel", "mamba_conv_kernel")
    n_heads = f.get("mamba_n_heads", "mamba_num_heads")
    if n_heads is not None:  # Mamba-2 (Granite 4.0-H, Nemotron-H, Bamba)
        d_head = f.need_int("mamba_d_head", "mamba_head_dim")
        groups = int(f.get("mamba_n_groups", "n_groups") or 1)
        inner = int(n_heads) * d_head
        return inner * d_state + (inner + 2 * groups * d_state) * (d_conv - 1)
    inner = int(f.get("mamba_expand", "expand") or 2) * hidden  # Mamba-1 (Jamba)
    return inner * d_state + inner * (d_conv - 1)


def weights_dtype(f: Fields) -> str:
    """The dtype the checkpoint ships in, from quantization_config, else torch_dtype."""
    q = f.get("quantization_config")
    if isinstance(q, dict):
        method = str(q.get("quant_method", "")).lower()
        if method in ("fp8", "fbgemm_fp8") or "fp8" in str(q.get("quant_algo", "")).lower():
            return "fp8"
        if method == "mxfp4":
            return "mxfp4"
        bits = q.get("bits") or q.get("w_bit") or _compressed_bits(q) or (4 if q.get("load_in_4bit") else 8)
        if method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "compressed-tensors", "bitsandbytes"):
            if int(bits) <= 4:
                return "int4"
            return "fp8" if _compressed_float(q) else "int8"
    dtype = str(f.get("torch_dtype", "dtype") or "bfloat16")
    return "bf16" if dtype == "bfloat16" else "fp16"


def _weights_groups(q: dict[str, Any]) -> list[dict[str, Any]]:
    groups = q.get("config_groups")
    if not isinstance(groups, dict):
        return []
    return [
        g["weights"] for g in groups.values() if isinstance(g, dict) and isinstance(g.get("weights"), dict)
    ]


def _compressed_bits(q: dict[str, Any]) -> int | None:
    bits = [int(w["num_bits"]) for w in _weights_groups(q) if w.get("num_bits")]
    return min(bits) if bits else None


def _compressed_float(q: dict[str, Any]) -> bool:
    return any(w.get("type") == "float" for w in _weights_groups(q))


def spec_from_config(
    cfg: dict[str, Any], name: str, source: str = "config.json", params: float | None = None
) -> ModelSpec:
    """A ModelSpec from a parsed config.json; params are estimated from the shapes unless given."""
    f = Fields(flatten(cfg), source)
    layers = f.need_int(*LAYERS)
    hidden = f.need_int(*HIDDEN)
    heads = f.need_int(*HEADS)
    kinds = layer_kinds(f, layers)
    kv_heads = 1 if f.get("multi_query") is True else int(f.get(*KV_HEADS) or heads)
    head_dim = int(f.get("head_dim") or hidden // heads)
    mla_dim = 0
    if f.get("kv_lora_rank") is not None:
        mla_dim = f.need_int("kv_lora_rank") + f.need_int("qk_rope_head_dim")
    sliding = kinds.count("sliding")
    window = None
    if sliding:
        window = f.need_int("sliding_window", "attention_chunk_size")
    n_state = kinds.count("state")
    state = n_state * state_elements_per_layer(f, hidden) if n_state else 0
    max_len = f.get(*MAX_LEN)
    params_source = "published"
    if params is None:
        try:
            params, params_source = (
                estimate_params(f, kinds, kv_heads, head_dim),
                "estimated from config shapes",
            )
        except ModelConfigError as e:
            # Weights only matter for the memory budget; --kv-cache-bytes works without them.
            params, params_source = 0.0, f"unknown: {e}"
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        full_layers=kinds.count("full"),
        sliding_layers=sliding,
        sliding_window=window,
        kv_heads=0 if mla_dim else kv_heads,
        head_dim=0 if mla_dim else head_dim,
        mla_dim=mla_dim,
        state_layers=n_state,
        state_elements=state,
        params=params,
        params_source=params_source,
        weights_dtype=weights_dtype(f),
        max_position_embeddings=int(max_len) if max_len else None,
        source=source,
    )


def load_model_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """A ModelSpec from a config.json file; errors name the file and the field."""
    p = Path(path)
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ModelConfigError(f"{p}: cannot read: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise ModelConfigError(f"{p}: not valid JSON: {e}") from e
    if not isinstance(cfg, dict):
        raise ModelConfigError(f"{p}: expected a JSON object")
    default = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    return spec_from_config(cfg, name or str(cfg.get("_name_or_path") or default), source=str(p))
