"""Live capacity from vllm:cache_config_info and the token histograms, on hand-made and real scrapes."""

from __future__ import annotations

import pytest

from kvdoctor.capacity.live import live_capacity
from kvdoctor.sources.exposition import recording_text, samples_from_text

INFO = (
    'vllm:cache_config_info{block_size="16",cache_dtype="fp8_e4m3",engine="%s",gpu_memory_utilization="0.9",'
    'kv_cache_memory_bytes="None",num_cpu_blocks="None",num_gpu_blocks="%s"} 1.0\n'
)


def _hist(name: str, model: str, counts: dict[str, float], engine: str = "0") -> str:
    return "".join(
        f'vllm:{name}_bucket{{engine="{engine}",le="{le}",model_name="{model}"}} {c}\n'
        for le, c in counts.items()
    )


def test_kv_bound_recording(shared_032):
    live = live_capacity(samples_from_text(recording_text(shared_032 / "kv_bound.jsonl.gz")))
    # --kv-cache-memory-bytes 8388608 with 32 blocks of 128 tokens.
    assert live.kv_cache_tokens == 4096 and live.tokens_source == "kv_cache_size_tokens"
    assert (live.num_gpu_blocks, live.block_size) == (32, 128)
    assert live.kv_cache_memory_bytes == 8_388_608
    assert live.kv_bytes_per_token == 2048  # the tiny model: 4 layers × 2 KV heads, 2 KiB per token
    assert live.max_model_len == 1024 and live.max_model_len_bound == (1000, 2000)
    assert live.max_len_request_share == pytest.approx(0.25)
    assert live.max_len_request_bytes == 2 * 2**20
    # Client load: prompts 200-500 and outputs 300-500 tokens; all 255 requests land in the (200, 500] bucket.
    assert live.requests_observed == 255
    assert (live.prompt_p50, live.prompt_p99) == (pytest.approx(350.0), pytest.approx(497.0))
    assert (live.generation_p50, live.generation_p99) == (pytest.approx(350.0), pytest.approx(497.0))
    assert live.request_p99_tokens == pytest.approx(994.0)
    assert live.fits(live.request_p50_tokens) == pytest.approx(4096 / 768)  # 700 tokens → 6 blocks of 128
    assert live.fits(live.request_p99_tokens) == pytest.approx(4.0)


@pytest.mark.parametrize("name", ["idle", "healthy", "batch_cap", "compute_bound", "prefix_cache_shared"])
def test_every_recording_reports_the_engines_own_token_count(shared_032, name):
    text = recording_text(shared_032 / f"{name}.jsonl.gz")
    live = live_capacity(samples_from_text(text))
    info = next(line for line in text.splitlines() if line.startswith("vllm:cache_config_info{"))
    assert f'kv_cache_size_tokens="{live.kv_cache_tokens}"' in info
    assert live.engines == 1
    assert live.max_model_len_bound is not None
    if name == "idle":
        assert live.requests_observed == 0 and live.request_p50_tokens is None


def test_old_engine_without_size_labels_falls_back_to_blocks_and_parses_none():
    text = INFO % ("0", "5691") + _hist(
        "request_prompt_tokens", "m", {"1000.0": 3, "2000.0": 4, "5000.0": 4, "+Inf": 4}
    )
    live = live_capacity(samples_from_text(text))
    assert live.kv_cache_tokens == 5691 * 16 and live.tokens_source == "num_gpu_blocks × block_size"
    assert live.kv_cache_memory_bytes is None and live.kv_bytes_per_token is None
    assert live.cache_dtype == "fp8_e4m3" and live.gpu_memory_utilization == 0.9
    assert live.max_model_len is None and live.max_model_len_bound == (5000, 10000)
    assert live.max_len == 5000
    assert live.generation_p50 is None and live.request_p50_tokens is None


def test_data_parallel_engines_and_model_filter():
    text = INFO % ("0", "100") + INFO % ("1", "90")
    text += _hist("request_prompt_tokens", "a", {"100.0": 10, "+Inf": 10}, "0")
    text += _hist("request_prompt_tokens", "a", {"100.0": 0, "+Inf": 10}, "1")
    text += _hist("request_prompt_tokens", "b", {"100.0": 0, "+Inf": 50})
    both = live_capacity(samples_from_text(text))
    assert both.engines == 2 and both.kv_cache_tokens == 90 * 16  # the smaller engine bounds a request
    assert both.requests_observed == 70
    only_a = live_capacity(samples_from_text(text), model_name="a")
    assert only_a.requests_observed == 20
    assert only_a.prompt_p50 == pytest.approx(100.0)


def test_nothing_to_read():
    live = live_capacity([])
    assert live.engines == 0 and live.kv_cache_tokens is None and live.fits(1000) is None
    garbage = 'vllm:cache_config_info{engine="0",num_gpu_blocks="lots",block_size=""} 1\n'
    assert live_capacity(samples_from_text(garbage)).kv_cache_tokens is None


@pytest.mark.parametrize("blocks", ["-5", "inf", "NaN"])
def test_a_cache_size_that_cannot_be_is_no_capacity(blocks):
    live = live_capacity(samples_from_text(INFO % ("0", blocks)))
    assert live.num_gpu_blocks is None and live.kv_cache_tokens is None
