"""Advice with numbers: what each option buys, and whether the numbers are the engine's or the arithmetic's."""

from __future__ import annotations

import pytest

from kvdoctor.capacity.advice import kv_cache_advice, max_model_len_finding_text, suggest_max_model_len
from kvdoctor.capacity.budget import Deployment, estimate
from kvdoctor.capacity.live import LiveCapacity, live_capacity
from kvdoctor.capacity.presets import get_gpu, get_model
from kvdoctor.sources.exposition import recording_text, samples_from_text

QWEN = get_model("Qwen3-8B")


def _by_flag(advice):
    return {a.flag: a for a in advice}


def test_seed_fp8_cache_doubles_339k_to_678k():
    est = estimate(Deployment(QWEN, kv_cache_bytes=50_000_000_000, max_model_len=32_768))
    fp8 = _by_flag(kv_cache_advice(None, est, None))["--kv-cache-dtype"]
    assert "`--kv-cache-dtype fp8` doubles the cache from 339k to 678k tokens" in fp8.text
    assert fp8.source == "model arithmetic"


def test_kv_bound_recording_advice_uses_the_engines_numbers(shared_032):
    live = live_capacity(samples_from_text(recording_text(shared_032 / "kv_bound.jsonl.gz")))
    advice = _by_flag(kv_cache_advice(live, None, None))
    assert "from 4,096 to 8,192 tokens" in advice["--kv-cache-dtype"].text
    assert "5.3 → 10.7 typical requests" in advice["--kv-cache-dtype"].text
    # The cache was fixed with --kv-cache-memory-bytes 8388608: more bytes, not utilization, is the lever.
    assert "8.0 MiB" in advice["--kv-cache-memory-bytes"].text
    assert "2,048 B/token" in advice["--kv-cache-memory-bytes"].text
    assert "--gpu-memory-utilization" not in advice
    assert "from 4,096 to 8,192 tokens" in advice["--data-parallel-size"].text
    # max-model-len 1024 is already close to the observed p99 of 994 tokens.
    assert "--max-model-len" not in advice
    assert {a.source for a in advice.values()} == {"cache_config_info"}


def test_shorter_max_model_len_when_far_above_observed_p99():
    est = estimate(Deployment(QWEN, get_gpu("H100"), max_model_len=40_960))
    mml = _by_flag(kv_cache_advice(None, est, 3000.0))["--max-model-len"]
    assert mml.text.startswith("`--max-model-len 3840`")
    now, then = est.max_concurrency, est.kv_cache_bytes / (3840 * 147_456)
    assert f"go from {now:.1f} to {then:.0f};" in mml.text
    assert "--max-model-len" not in _by_flag(kv_cache_advice(None, est, 30_000.0))


def test_fp8_weights_only_where_the_gpu_computes_fp8():
    h100 = _by_flag(kv_cache_advice(None, estimate(Deployment(QWEN, get_gpu("H100"))), None))
    a100 = _by_flag(kv_cache_advice(None, estimate(Deployment(QWEN, get_gpu("A100-80GB"))), None))
    assert "frees 8.2 GB of weights per GPU → +56k tokens" in h100["--quantization"].text
    assert "weight-only" not in h100["--quantization"].text
    assert "weight-only" in a100["--quantization"].text and "cc 8.0" in a100["--quantization"].text
    fp8_ckpt = kv_cache_advice(None, estimate(Deployment(get_model("DeepSeek-V3"), get_gpu("H200"), 8)), None)
    assert "--quantization" not in _by_flag(fp8_ckpt)  # already FP8


def test_fp8_weights_with_a_cache_given_in_bytes_say_the_gain_needs_the_cache_resized():
    est = estimate(Deployment(QWEN, kv_cache_bytes=50 * 2**30, max_model_len=32_768))
    text = _by_flag(kv_cache_advice(None, est, None))["--quantization"].text
    assert text == (
        "`--quantization fp8` (or an FP8 checkpoint): it frees 8.2 GB of weights per GPU (FP8 compute needs "
        "compute capability ≥ 8.9; older GPUs run it weight-only) → +56k tokens (364k → 420k) once the freed "
        "memory goes to the cache"
    )


def test_utilization_headroom_only_below_095():
    at_092 = _by_flag(kv_cache_advice(None, estimate(Deployment(QWEN, get_gpu("H100"))), None))
    gpu_mem = get_gpu("H100").memory_bytes
    gain = int(gpu_mem * (0.95 - 0.92) // 147_456)
    assert f"+{gain / 1e3:.0f}k tokens" in at_092["--gpu-memory-utilization"].text
    at_095 = kv_cache_advice(
        None, estimate(Deployment(QWEN, get_gpu("H100"), gpu_memory_utilization=0.95)), None
    )
    assert "--gpu-memory-utilization" not in _by_flag(at_095)


def test_fp8_cache_not_advised_when_already_fp8():
    live = LiveCapacity(engines=1, kv_cache_tokens=100_000, block_size=16, cache_dtype="fp8_e4m3")
    assert "--kv-cache-dtype" not in _by_flag(kv_cache_advice(live, None, None))


def test_live_numbers_with_model_arithmetic_for_weights():
    live = LiveCapacity(
        engines=2, kv_cache_tokens=300_000, block_size=16, cache_dtype="auto", gpu_memory_utilization=0.9
    )
    est = estimate(Deployment(QWEN, get_gpu("H100"), gpu_memory_utilization=0.9))
    advice = _by_flag(kv_cache_advice(live, est, None))
    assert advice["--quantization"].source == "cache_config_info + model arithmetic"
    assert "(300k → 356k)" in advice["--quantization"].text
    assert "from 600k to 900k tokens" in advice["--data-parallel-size"].text
    assert "`--data-parallel-size 3`" in advice["--data-parallel-size"].text


def test_no_numbers_no_advice():
    assert kv_cache_advice(None, None, 1000.0) == []
    assert kv_cache_advice(LiveCapacity(), None, None) == []


@pytest.mark.parametrize(("p99", "suggested"), [(994, 1280), (3000, 3840), (100, 256), (20_000, 25_600)])
def test_suggested_length_leaves_headroom(p99, suggested):
    assert suggest_max_model_len(p99) == suggested
    assert suggested >= p99 * 1.25


def test_max_model_len_finding_states_p99_against_the_limit():
    text = max_model_len_finding_text(20_000, 50_000, 2_100)
    assert "p99 request length is 2,100 tokens" in text
    assert "between 20,000 and 49,999" in text and "at least 10× longer" in text
    assert "`--max-model-len 2816` would still fit the p99 request" in text
    exact = max_model_len_finding_text(32_768, None, 2_100)
    assert "--max-model-len is 32,768, 16× longer" in exact


def test_a_preset_of_another_model_is_named_and_its_numbers_left_out(shared_032):
    # the kv_bound server holds 2,048 B of KV per token; Qwen3-8B would need 147,456
    live = live_capacity(samples_from_text(recording_text(shared_032 / "kv_bound.jsonl.gz")))
    est = estimate(Deployment(QWEN, get_gpu("H100")))
    advice = kv_cache_advice(live, est, None)
    assert advice[0].flag == "model"
    assert "Qwen3-8B holds 147,456 B of KV per token, this engine 2,048 B" in advice[0].text
    assert "--quantization" not in _by_flag(advice)  # the preset's weights are not this server's
    assert "from 4,096 to 8,192 tokens" in _by_flag(advice)["--kv-cache-dtype"].text


def test_a_served_model_that_is_another_preset_is_named():
    est = estimate(Deployment(QWEN, get_gpu("H100")))
    advice = kv_cache_advice(None, est, None, served_model="meta-llama/Llama-3.3-70B-Instruct")
    assert advice[0].flag == "model"
    assert (
        "names model Qwen3-8B, but this server serves meta-llama/Llama-3.3-70B-Instruct (Llama-3.3-70B)"
        in advice[0].text
    )
    assert "--quantization" not in _by_flag(advice)
    matching = kv_cache_advice(None, est, None, served_model="Qwen/Qwen3-8B")
    assert "model" not in _by_flag(matching) and "--quantization" in _by_flag(matching)
    own_name = kv_cache_advice(None, est, None, served_model="my-chat-model")  # --served-model-name: unknown
    assert "model" not in _by_flag(own_name)


def test_fp8_cache_advice_counts_typical_requests_only_once_requests_have_finished():
    # a server that has not finished a request has no typical request size: the advice says the tokens and no "?"
    fresh = LiveCapacity(engines=1, kv_cache_tokens=4096, block_size=16, cache_dtype="auto")
    text = _by_flag(kv_cache_advice(fresh, None, None))["--kv-cache-dtype"].text
    assert "from 4,096 to 8,192 tokens; check accuracy" in text and "?" not in text
    seen = LiveCapacity(
        engines=1, kv_cache_tokens=4096, block_size=16, cache_dtype="auto", prompt_p50=400, generation_p50=112
    )
    assert (
        "(8.0 → 16.0 typical requests at once)"
        in _by_flag(kv_cache_advice(seen, None, None))["--kv-cache-dtype"].text
    )
