"""Reading Hugging Face config.json files: nesting, layer patterns, hybrids, dtypes and errors that name the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdoctor.capacity.arch import kv_bytes_per_token, request_kv_bytes, state_bytes_per_sequence
from kvdoctor.capacity.config import load_model_config, spec_from_config
from kvdoctor.capacity.fields import ModelConfigError
from kvdoctor.capacity.presets import get_model, model_config, model_names

FIX = Path(__file__).parents[1] / "fixtures" / "capacity"


def test_nested_text_config_and_sliding_window_pattern():
    g = load_model_config(FIX / "gemma3-4b-it.json")
    assert g.name == "gemma3-4b-it"
    assert (g.num_layers, g.kv_heads, g.head_dim) == (34, 4, 256)  # head_dim from config, not 2560/8
    assert (g.full_layers, g.sliding_layers, g.sliding_window) == (5, 29, 1024)
    assert kv_bytes_per_token(g) == 2 * 34 * 4 * 256 * 2
    assert g.max_position_embeddings == 131_072


def test_jamba_attention_period_leaves_mamba_layers_with_state():
    j = load_model_config(FIX / "jamba-v0.1.json")
    assert (j.full_layers, j.state_layers) == (4, 28)
    assert kv_bytes_per_token(j) == 2 * 4 * 8 * 128 * 2
    inner = 2 * 4096  # mamba_expand × hidden
    assert state_bytes_per_sequence(j) == 28 * (inner * 16 + inner * 3) * 2
    assert j.params == pytest.approx(52e9, rel=0.03)  # Jamba v0.1 is published as 52B


def test_mamba2_layer_types_list():
    h = load_model_config(FIX / "granite-hybrid.json")
    assert (h.full_layers, h.state_layers, h.sliding_layers) == (8, 32, 0)
    per_layer = 48 * 64 * 128 + (48 * 64 + 2 * 128) * 3
    assert state_bytes_per_sequence(h) == 32 * per_layer * 2
    assert request_kv_bytes(h, 1000) == 1008 * 2 * 8 * 4 * 128 * 2 + 32 * per_layer * 2


def test_nemotron_h_pattern_string():
    cfg = {
        "hidden_size": 1024,
        "num_hidden_layers": 6,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "hybrid_override_pattern": "M-M*-E",
        "mamba_num_heads": 16,
        "mamba_head_dim": 64,
        "ssm_state_size": 128,
        "n_groups": 2,
        "conv_kernel": 4,
        "vocab_size": 1000,
        "intermediate_size": 4096,
        "n_routed_experts": 4,
        "moe_intermediate_size": 512,
    }
    s = spec_from_config(cfg, "nemo")
    assert (s.full_layers, s.state_layers, s.kv_layers) == (1, 2, 1)
    assert kv_bytes_per_token(s) == 2 * 2 * 128 * 2


def test_sliding_window_ignored_when_disabled_and_all_layers_when_no_pattern():
    base = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8}
    assert (
        spec_from_config({**base, "sliding_window": 4096, "use_sliding_window": False}, "q").sliding_layers
        == 0
    )
    assert spec_from_config({**base, "sliding_window": 4096}, "m").sliding_layers == 32
    assert spec_from_config({**base, "sliding_window": 4096, "model_type": "gemma2"}, "g").full_layers == 16


def test_missing_kv_heads_means_mha_and_head_dim_falls_back_to_hidden_over_heads():
    s = spec_from_config({"hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 16}, "mha")
    assert (s.kv_heads, s.head_dim, s.kind) == (16, 128, "MHA")
    mqa = spec_from_config(
        {"hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71, "multi_query": True},
        "falcon",
    )
    assert (mqa.kv_heads, mqa.head_dim, mqa.kind) == (1, 64, "MQA")


@pytest.mark.parametrize(
    ("quant", "dtype"),
    [
        ({"quant_method": "fp8"}, "fp8"),
        ({"quant_method": "mxfp4"}, "mxfp4"),
        ({"quant_method": "awq", "bits": 4}, "int4"),
        ({"quant_method": "gptq", "bits": 8}, "int8"),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}},
            },
            "fp8",
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}},
            },
            "int4",
        ),
        (None, "bf16"),
    ],
)
def test_weights_dtype_from_quantization_config(quant, dtype):
    cfg = {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 100,
        "intermediate_size": 128,
        "torch_dtype": "bfloat16",
        "quantization_config": quant,
    }
    assert spec_from_config(cfg, "x").weights_dtype == dtype


def test_presets_ship_their_checkpoint_dtype():
    assert get_model("DeepSeek-V3").weights_dtype == "fp8"
    assert get_model("gpt-oss-120b").weights_dtype == "mxfp4"
    assert get_model("Qwen3-8B").weights_dtype == "bf16"


@pytest.mark.parametrize("name", model_names())
def test_preset_configs_reproduce_their_published_parameter_count(name):
    # Cross-checks the stored shapes: an estimate from them lands within 5 % of the published count
    # (Gemma 3's published count includes its ~0.4B vision tower, which the text config does not describe).
    estimated = spec_from_config(model_config(name), name).params
    assert estimated == pytest.approx(get_model(name).params, rel=0.05)


@pytest.mark.parametrize("field", ["num_hidden_layers", "hidden_size", "num_attention_heads"])
def test_missing_required_field_names_field_and_file(tmp_path, field):
    cfg = json.loads((FIX / "jamba-v0.1.json").read_text())
    del cfg[field]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ModelConfigError) as err:
        load_model_config(path)
    assert field in str(err.value) and str(path) in str(err.value)


def test_missing_hybrid_and_window_fields_are_named(tmp_path):
    cfg = json.loads((FIX / "jamba-v0.1.json").read_text())
    del cfg["mamba_d_state"]
    with pytest.raises(ModelConfigError, match="mamba_d_state"):
        spec_from_config(cfg, "j", "jamba.json")
    layer_types = ["sliding_attention", "full_attention"]
    with pytest.raises(ModelConfigError, match="'sliding_window'"):
        spec_from_config(
            {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "layer_types": layer_types},
            "s",
            "s.json",
        )
    with pytest.raises(ModelConfigError, match="qk_rope_head_dim"):
        spec_from_config(
            {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "kv_lora_rank": 512},
            "d",
            "d.json",
        )


def test_bad_files_are_reported(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ModelConfigError, match="not valid JSON"):
        load_model_config(bad)
    with pytest.raises(ModelConfigError, match="cannot read"):
        load_model_config(tmp_path / "absent.json")
    with pytest.raises(ModelConfigError, match="unknown layer type 'banana'"):
        spec_from_config(
            {"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "layer_types": ["banana"]},
            "b",
        )
