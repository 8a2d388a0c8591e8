"""A pair's server command line gives the what-if the scheduler limits vLLM does not export."""

from __future__ import annotations

from kvdoctor.whatif.compare import flag_values


def test_the_scheduler_limits_come_from_the_command_line():
    line = "VLLM_CPU_KVCACHE_SPACE=1 --max-model-len 2048 --max-num-seqs 32 --max-num-batched-tokens=512 --dtype float32"
    assert flag_values(line) == {"--max-num-seqs": 32, "--max-num-batched-tokens": 512}


def test_a_command_line_without_them_says_nothing():
    assert flag_values("--max-model-len 1024 --kv-cache-memory-bytes 16777216") == {}
    assert flag_values("--max-num-seqs") == {}  # a flag without its value is not a value
