"""Parameter count estimated from config shapes, for configs without a published count (all MoE experts)."""

from __future__ import annotations

from kvdoctor.capacity.fields import Fields

EXPERTS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")


def estimate_params(f: Fields, kinds: list[str], kv_heads: int, head_dim: int) -> float:
    """Parameters of embeddings, attention/mixer and MLP/MoE blocks; norms and biases are ignored."""
    hidden = f.need_int("hidden_size", "n_embd", "d_model")
    vocab = f.need_int("vocab_size", "padded_vocab_size")
    tied = f.cfg.get("tie_word_embeddings", True) is not False
    total = vocab * hidden * (1 if tied else 2)
    pattern = f.get("hybrid_override_pattern")
    for i, kind in enumerate(kinds):
        if isinstance(pattern, str):
            # Nemotron-H style: each layer is one block (M mamba, * attention, - MLP, E MoE).
            c = pattern[i]
            total += _mixer(f, kind, kv_heads, head_dim) if c in "M*" else _mlp(f, i, moe=c == "E")
        else:
            total += _mixer(f, kind, kv_heads, head_dim) + _mlp(f, i, moe=_is_moe_layer(f, i))
    return float(total)


def _mixer(f: Fields, kind: str, kv_heads: int, head_dim: int) -> int:
    hidden = f.need_int("hidden_size", "n_embd", "d_model")
    heads = f.need_int("num_attention_heads", "n_head", "num_heads")
    if kind == "state":
        return _state_mixer(f, hidden)
    if kind == "none":
        return 0
    if f.get("kv_lora_rank") is not None:
        rope, nope = f.need_int("qk_rope_head_dim"), f.need_int("qk_nope_head_dim")
        v_dim, kv_rank = f.need_int("v_head_dim"), f.need_int("kv_lora_rank")
        q_rank = f.get("q_lora_rank")
        q = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank else hidden * heads * (nope + rope)
        return q + hidden * (kv_rank + rope) + kv_rank * heads * (nope + v_dim) + heads * v_dim * hidden
    return 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim


def _state_mixer(f: Fields, hidden: int) -> int:
    if f.get("linear_num_value_heads") is not None:
        vh, kh = f.need_int("linear_num_value_heads"), f.need_int("linear_num_key_heads")
        kd, vd = f.need_int("linear_key_head_dim"), f.need_int("linear_value_head_dim")
        return hidden * (2 * kh * kd + 2 * vh * vd + 2 * vh) + vh * vd * hidden
    if f.get("conv_L_cache") is not None:
        return 4 * hidden * hidden
    n_heads = f.get("mamba_n_heads", "mamba_num_heads")
    if n_heads is not None:
        inner = int(n_heads) * f.need_int("mamba_d_head", "mamba_head_dim")
        d_state = f.need_int("mamba_d_state", "ssm_state_size", "state_size")
        groups = int(f.get("mamba_n_groups", "n_groups") or 1)
        return hidden * (2 * inner + 2 * groups * d_state + int(n_heads)) + inner * hidden
    return 3 * hidden * int(f.get("mamba_expand", "expand") or 2) * hidden


def _is_moe_layer(f: Fields, i: int) -> bool:
    if not f.get(*EXPERTS):
        return False
    if i < int(f.get("first_k_dense_replace") or 0) or i in (f.get("mlp_only_layers") or []):
        return False
    period = f.get("expert_layer_period")
    if period:
        return i % int(period) == int(f.get("expert_layer_offset") or 0)
    step = int(f.get("decoder_sparse_step", "moe_layer_freq") or 1)
    return (i + 1) % step == 0


def _mlp(f: Fields, i: int, moe: bool) -> int:
    hidden = f.need_int("hidden_size", "n_embd", "d_model")
    if not moe:
        return 3 * hidden * f.need_int("intermediate_size", "ffn_dim", "n_inner")
    experts = f.need_int(*EXPERTS)
    inter = f.need_int("moe_intermediate_size", "intermediate_size")
    shared = int(f.get("n_shared_experts") or 0) * 3 * hidden * inter
    if f.get("shared_expert_intermediate_size"):
        shared = 3 * hidden * int(f.get("shared_expert_intermediate_size"))
    return experts * 3 * hidden * inter + shared + hidden * experts
