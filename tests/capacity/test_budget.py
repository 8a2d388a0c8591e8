"""The vLLM-like memory budget: tokens and max-model-len concurrency from GPU memory, TP and flags."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvdoctor.capacity.budget import Deployment, estimate
from kvdoctor.capacity.presets import GIB, custom_gpu, get_gpu, get_model, model_names

QWEN = get_model("Qwen3-8B")


def test_seed_fifty_gigabytes_hold_339k_tokens():
    est = estimate(Deployment(QWEN, kv_cache_bytes=50_000_000_000, max_model_len=32_768))
    assert est.kv_bytes_per_token == 147_456
    assert est.kv_cache_tokens == 339_084
    assert est.request_bytes / GIB == pytest.approx(4.5)
    assert est.weights_bytes / 1e9 == pytest.approx(16.4, abs=0.05)
    assert est.max_concurrency == pytest.approx(50e9 / (32_768 * 147_456))
    assert any("replaces the memory estimate" in a for a in est.assumptions)


def test_budget_is_memory_times_utilization_minus_weights_and_overhead():
    h100 = get_gpu("H100")
    est = estimate(Deployment(QWEN, h100, max_model_len=32_768))
    expected = math.ceil(h100.memory_bytes * 0.92) - 16_380_000_000 - 2 * GIB
    assert est.kv_cache_bytes == pytest.approx(expected, abs=1)
    assert est.kv_cache_tokens == est.kv_cache_bytes // 147_456
    assert any("2 GiB" in a and "0.92" in a for a in est.assumptions)


def test_tensor_parallel_splits_weights_and_kv_heads():
    one = estimate(Deployment(get_model("Llama-3.3-70B"), get_gpu("H100"), tensor_parallel=1))
    four = estimate(Deployment(get_model("Llama-3.3-70B"), get_gpu("H100"), tensor_parallel=4))
    assert not one.fits and one.kv_cache_bytes == 0  # 141 GB of weights on one 80 GB card
    assert four.weights_bytes_per_gpu == pytest.approx(70.6e9 * 2 / 4, abs=1)
    assert four.kv_bytes_per_token_per_gpu == 327_680 // 4
    assert four.fits and four.kv_cache_tokens > 500_000


def test_mla_cache_is_replicated_on_every_tp_rank():
    est = estimate(Deployment(get_model("DeepSeek-V3"), get_gpu("H200"), tensor_parallel=8))
    assert est.kv_bytes_per_token_per_gpu == 70_272
    assert est.weights_bytes == pytest.approx(671e9)  # FP8 checkpoint, 1 B per parameter
    assert any("every TP rank" in a for a in est.assumptions)


def test_defaults_come_from_the_model():
    est = estimate(Deployment(QWEN, get_gpu("H100")))
    assert est.max_model_len == 40_960
    assert est.weights_dtype == "bf16"
    assert estimate(Deployment(QWEN, get_gpu("H100"), weights_dtype="fp8")).weights_bytes == 8_190_000_000


def test_sliding_window_and_hybrid_models_fit_more_long_requests_than_their_token_count_suggests():
    for name in ("gpt-oss-120b", "Gemma-3-27B", "Qwen3-Next-80B-A3B"):
        est = estimate(Deployment(get_model(name), get_gpu("H200"), max_model_len=131_072))
        naive = est.kv_cache_tokens / 131_072
        if name == "Qwen3-Next-80B-A3B":
            assert est.max_concurrency == pytest.approx(naive, rel=0.05)  # state is small next to 131k tokens
        else:
            assert est.max_concurrency > 1.9 * naive, name


def test_needs_a_gpu_or_cache_bytes():
    with pytest.raises(ValueError, match="need a GPU"):
        estimate(Deployment(QWEN))


@given(
    st.sampled_from(model_names()),
    st.floats(16, 200),
    st.floats(16, 200),
    st.integers(1024, 131_072),
    st.sampled_from(["auto", "fp8"]),
)
def test_capacity_grows_with_memory(name, a, b, max_len, kv_dtype):
    small, big = sorted((a, b))
    spec = get_model(name)
    lo = estimate(Deployment(spec, custom_gpu(small), max_model_len=max_len, kv_cache_dtype=kv_dtype))
    hi = estimate(Deployment(spec, custom_gpu(big), max_model_len=max_len, kv_cache_dtype=kv_dtype))
    assert lo.kv_cache_tokens <= hi.kv_cache_tokens
    assert lo.max_concurrency <= hi.max_concurrency


@given(st.sampled_from(model_names()), st.integers(256, 262_144), st.integers(256, 262_144))
def test_capacity_shrinks_with_max_model_len(name, a, b):
    short, long = sorted((a, b))
    spec = get_model(name)
    gpu = get_gpu("B200")
    s = estimate(Deployment(spec, gpu, tensor_parallel=8, max_model_len=short))
    lg = estimate(Deployment(spec, gpu, tensor_parallel=8, max_model_len=long))
    assert lg.max_concurrency <= s.max_concurrency
    assert lg.kv_cache_tokens == s.kv_cache_tokens


@given(st.sampled_from(model_names()), st.integers(1, 10**12))
def test_fp8_cache_doubles_tokens(name, cache_bytes):
    spec = get_model(name)
    auto = estimate(Deployment(spec, kv_cache_bytes=cache_bytes))
    fp8 = estimate(Deployment(spec, kv_cache_bytes=cache_bytes, kv_cache_dtype="fp8"))
    assert fp8.kv_bytes_per_token * 2 == auto.kv_bytes_per_token
    assert 2 * auto.kv_cache_tokens <= fp8.kv_cache_tokens <= 2 * auto.kv_cache_tokens + 1
