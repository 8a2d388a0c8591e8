"""Write a random-weight LoRA adapter (PEFT layout) for a model made by make_model.py — nothing downloaded.

usage: make_lora.py MODEL_DIR OUT_DIR [--rank 8 --seed 0]
Writes OUT_DIR/adapter_config.json and OUT_DIR/adapter_model.safetensors with lora_A/lora_B for q_proj, k_proj,
v_proj and o_proj of every layer; serve with --enable-lora --max-lora-rank >= rank --lora-modules NAME=OUT_DIR.
"""

import argparse
import json
import os

import torch
from safetensors.torch import save_file


def make(model_dir, out, rank, seed):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    hidden, heads, kv_heads = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or hidden // heads
    shapes = {  # (in, out) of each projection
        "q_proj": (hidden, heads * head_dim),
        "k_proj": (hidden, kv_heads * head_dim),
        "v_proj": (hidden, kv_heads * head_dim),
        "o_proj": (heads * head_dim, hidden),
    }
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(cfg["num_hidden_layers"]):
        for name, (d_in, d_out) in shapes.items():
            key = f"base_model.model.model.layers.{layer}.self_attn.{name}"
            tensors[f"{key}.lora_A.weight"] = torch.randn(rank, d_in, generator=g) * 0.01
            tensors[f"{key}.lora_B.weight"] = torch.randn(d_out, rank, generator=g) * 0.01
    os.makedirs(out, exist_ok=True)
    save_file(
        {k: v.to(torch.bfloat16).contiguous() for k, v in tensors.items()}, f"{out}/adapter_model.safetensors"
    )
    conf = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": os.path.abspath(model_dir),
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": False,
        "target_modules": sorted(shapes),
        "modules_to_save": None,
        "use_rslora": False,
        "use_dora": False,
    }
    with open(f"{out}/adapter_config.json", "w") as f:
        json.dump(conf, f, indent=2)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir")
    p.add_argument("out")
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    make(a.model_dir, a.out, a.rank, a.seed)
    print("adapter ok:", a.out)
