"""KV bytes per token, per-request KV and weights: pinned to public configs and the seed figures."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvdoctor.capacity.arch import (
    ModelSpec,
    kv_bytes_per_token,
    kv_bytes_per_token_per_gpu,
    request_kv_bytes,
    state_bytes_per_sequence,
    weights_bytes,
)
from kvdoctor.capacity.presets import get_model, model_names

GIB = 2**30

# 2 × layers × KV heads × head_dim × 2 B (GQA) or (kv_lora_rank + qk_rope_head_dim) × layers × 2 B (MLA),
# from each model's public config.json.
PUBLIC_KV_BYTES = {
    "Qwen3-8B": 2 * 36 * 8 * 128 * 2,
    "Qwen3-32B": 2 * 64 * 8 * 128 * 2,
    "Qwen3-30B-A3B": 2 * 48 * 4 * 128 * 2,
    "Qwen3-235B-A22B": 2 * 94 * 4 * 128 * 2,
    "Qwen3-Next-80B-A3B": 2 * 12 * 2 * 256 * 2,  # only the 12 full-attention layers of 48
    "Llama-3.1-8B": 2 * 32 * 8 * 128 * 2,
    "Llama-3.3-70B": 2 * 80 * 8 * 128 * 2,
    "Llama-3.1-405B": 2 * 126 * 8 * 128 * 2,
    "Mistral-7B-v0.3": 2 * 32 * 8 * 128 * 2,
    "Mistral-7B-v0.1": 2 * 32 * 8 * 128 * 2,
    "Mixtral-8x7B": 2 * 32 * 8 * 128 * 2,
    "Gemma-3-27B": 2 * 62 * 16 * 128 * 2,
    "Gemma-3-12B": 2 * 48 * 8 * 256 * 2,
    "DeepSeek-V3": (512 + 64) * 61 * 2,
    "DeepSeek-R1": (512 + 64) * 61 * 2,
    "Kimi-K2": (512 + 64) * 61 * 2,
    "gpt-oss-120b": 2 * 36 * 8 * 64 * 2,
    "gpt-oss-20b": 2 * 24 * 8 * 64 * 2,
}


def test_every_preset_is_pinned_to_its_public_config():
    assert set(PUBLIC_KV_BYTES) == set(model_names())
    got = {name: kv_bytes_per_token(get_model(name)) for name in model_names()}
    assert got == PUBLIC_KV_BYTES


def test_seed_figures_for_qwen3_8b():
    qwen = get_model("Qwen3-8B")
    assert kv_bytes_per_token(qwen) == 147_456
    assert request_kv_bytes(qwen, 32_768) / GIB == pytest.approx(4.5)
    assert weights_bytes(qwen.params, "bf16") / 1e9 == pytest.approx(16.4, abs=0.05)
    assert 50_000_000_000 // kv_bytes_per_token(qwen) == 339_084


def test_fp8_kv_halves_mla_and_gqa():
    assert kv_bytes_per_token(get_model("DeepSeek-V3"), "fp8") == 35_136
    assert kv_bytes_per_token(get_model("Qwen3-8B"), "fp8") == 73_728


def test_tensor_parallel_splits_kv_heads_but_replicates_scarce_heads_and_mla():
    qwen, next_, ds = get_model("Qwen3-8B"), get_model("Qwen3-Next-80B-A3B"), get_model("DeepSeek-V3")
    assert kv_bytes_per_token_per_gpu(qwen, tensor_parallel=4) == 147_456 // 4
    # 8 KV heads over TP 16: each GPU still keeps one whole head.
    assert kv_bytes_per_token_per_gpu(qwen, tensor_parallel=16) == 147_456 // 8
    assert kv_bytes_per_token_per_gpu(next_, tensor_parallel=4) == 24_576 // 2
    assert kv_bytes_per_token_per_gpu(ds, tensor_parallel=8) == 70_272


def test_sliding_window_layers_stop_growing_at_the_window():
    oss = get_model("gpt-oss-120b")
    assert (oss.full_layers, oss.sliding_layers, oss.sliding_window) == (18, 18, 128)
    per_layer_token = 2 * 8 * 64 * 2
    long = request_kv_bytes(oss, 131_072)
    # Full layers pay for every token; sliding layers for 128 tokens plus one block.
    assert long == 18 * per_layer_token * 131_072 + 18 * per_layer_token * 144
    assert long < 0.51 * kv_bytes_per_token(oss) * 131_072
    # Below the window every layer pays for every token.
    assert request_kv_bytes(oss, 64) == kv_bytes_per_token(oss) * 64


def test_gemma3_has_one_global_layer_in_six():
    g = get_model("Gemma-3-27B")
    assert (g.full_layers, g.sliding_layers, g.sliding_window) == (10, 52, 1024)
    short, long = request_kv_bytes(g, 1024), request_kv_bytes(g, 128_000)
    assert short == kv_bytes_per_token(g) * 1024
    assert long < 0.3 * kv_bytes_per_token(g) * 128_000


def test_hybrid_model_pays_a_fixed_state_per_sequence():
    n = get_model("Qwen3-Next-80B-A3B")
    assert (n.full_layers, n.state_layers) == (12, 36)
    # Gated DeltaNet per layer: 32 value heads × 128 × 128 recurrent + (2·16·128 + 32·128) × 3 conv values.
    per_layer = 32 * 128 * 128 + (2 * 16 * 128 + 32 * 128) * 3
    assert state_bytes_per_sequence(n) == 36 * per_layer * 2
    assert request_kv_bytes(n, 16) == 16 * 24_576 + 36 * per_layer * 2


def test_weights_count_every_expert_and_scale_with_dtype():
    mixtral = get_model("Mixtral-8x7B")
    assert weights_bytes(mixtral.params, "bf16") == pytest.approx(93.4e9, rel=0.01)
    assert weights_bytes(mixtral.params, "fp8") == pytest.approx(46.7e9, rel=0.01)
    assert weights_bytes(8e9, "int4") == pytest.approx(4.25e9)  # 4 bits + group scales
    with pytest.raises(ValueError, match="unknown weights dtype"):
        weights_bytes(1e9, "fp6")


specs = st.builds(
    ModelSpec,
    name=st.just("m"),
    num_layers=st.just(0),
    hidden_size=st.just(1),
    num_attention_heads=st.just(1),
    full_layers=st.integers(1, 128),
    sliding_layers=st.integers(0, 64),
    sliding_window=st.integers(16, 8192),
    kv_heads=st.integers(1, 64),
    head_dim=st.sampled_from([64, 80, 128, 256]),
    mla_dim=st.sampled_from([0, 0, 576]),
)


@given(specs, st.integers(1, 200_000))
def test_fp8_halves_kv_bytes(spec, tokens):
    assert kv_bytes_per_token(spec, "fp8") * 2 == kv_bytes_per_token(spec, "auto")
    assert request_kv_bytes(spec, tokens, "fp8") * 2 == request_kv_bytes(spec, tokens, "auto")


@given(specs, st.integers(1, 100_000), st.integers(1, 100_000))
def test_request_cost_grows_with_length_and_never_beats_full_attention(spec, a, b):
    short, long = sorted((a, b))
    assert request_kv_bytes(spec, short) <= request_kv_bytes(spec, long)
    assert request_kv_bytes(spec, long) <= kv_bytes_per_token(spec) * (-(-long // 16) * 16)
