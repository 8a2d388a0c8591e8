"""Built-in model and GPU presets: coverage, lookups and FP8 support."""

from __future__ import annotations

import pytest

from kvdoctor.capacity.presets import PresetError, custom_gpu, get_gpu, get_model, gpu_names, model_names

GIB = 2**30


def test_at_least_fifteen_models_each_with_a_parameter_count():
    names = model_names()
    assert len(names) >= 15
    for name in names:
        spec = get_model(name)
        assert spec.params > 1e9 and spec.params_source == "published", name
        assert spec.max_position_embeddings and spec.max_position_embeddings >= 32_768, name


def test_architectures_are_recognised():
    kinds = {name: get_model(name).kind for name in model_names()}
    assert kinds["DeepSeek-R1"] == "MLA" and kinds["Kimi-K2"] == "MLA"
    assert "hybrid" in kinds["Qwen3-Next-80B-A3B"]
    assert "sliding 128" in kinds["gpt-oss-20b"] and "sliding 1024" in kinds["Gemma-3-12B"]
    assert kinds["Mistral-7B-v0.3"] == "GQA"  # v0.3 dropped the 4096-token window of v0.1
    assert "sliding 4096" in kinds["Mistral-7B-v0.1"]


@pytest.mark.parametrize(
    ("name", "gib", "cc", "fp8"),
    [
        ("L4", 22.5, 8.9, True),
        ("A10", 22.5, 8.6, False),
        ("L40S", 45.0, 8.9, True),
        ("A100-40GB", 40.0, 8.0, False),
        ("A100-80GB", 80.0, 8.0, False),
        ("H100-80GB", 79.6, 9.0, True),
        ("H200-141GB", 140.4, 9.0, True),
        ("B200", 179.1, 10.0, True),
        ("RTX-4090", 24.0, 8.9, True),
        ("MI300X", 192.0, None, True),
    ],
)
def test_gpu_memory_and_fp8_compute(name, gib, cc, fp8):
    gpu = get_gpu(name)
    assert gpu.memory_bytes / GIB == pytest.approx(gib, abs=0.1)
    assert gpu.compute_capability == cc
    assert gpu.fp8_compute is fp8
    assert name in gpu_names()


def test_lookup_by_alias_repo_id_and_case():
    assert get_model("qwen/qwen3-8b").name == "Qwen3-8B"
    assert get_model("Llama-3.3-70B-Instruct").name == "Llama-3.3-70B"
    assert get_model("deepseek_v3").name == "DeepSeek-V3"
    assert get_gpu("h100").name == "H100-80GB"
    assert get_gpu("RTX 4090").name == "RTX-4090"


def test_unknown_names_list_the_known_ones():
    with pytest.raises(PresetError, match=r"unknown model 'Llama-9'.*Qwen3-8B"):
        get_model("Llama-9")
    with pytest.raises(PresetError, match=r"unknown GPU 'V100'.*H100-80GB"):
        get_gpu("V100")


def test_custom_gpu_has_memory_and_unknown_fp8():
    gpu = custom_gpu(48)
    assert gpu.memory_bytes == 48 * GIB
    assert gpu.compute_capability is None and gpu.fp8_compute is False
