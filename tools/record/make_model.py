"""Write a small random-weight Qwen2-shaped model config plus a one-token-per-word tokenizer (nothing downloaded).

usage: make_model.py OUT [--hidden 512 --layers 4 --heads 8 --kv-heads 2 --inter 1408]
Serve OUT with --load-format dummy (random weights) and --tokenizer OUT-tok: keep the tokenizer in its own folder,
or transformers builds a Qwen2 tokenizer from the config and every prompt becomes zero tokens.
KV bytes per token (bf16) = 2 * layers * kv_heads * (hidden / heads) * 2; the default is 2 KiB.
"""

import argparse
import json
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast


def make(path, hidden, layers, heads, kv_heads, inter, vocab=4096, max_pos=4096):
    os.makedirs(path, exist_ok=True)
    cfg = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": hidden // heads,
        "vocab_size": vocab,
        "max_position_embeddings": max_pos,
        "max_window_layers": layers,
        "use_sliding_window": False,
        "sliding_window": None,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
    }
    with open(f"{path}/config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    gen = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "max_new_tokens": 64}
    with open(f"{path}/generation_config.json", "w") as f:
        json.dump(gen, f, indent=2)
    # WordLevel tokenizer: specials + w<i> words, whitespace split
    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    vocab_map = {t: i for i, t in enumerate(specials)}
    for i in range(vocab - len(specials)):
        vocab_map[f"w{i}"] = len(vocab_map)
    tok = Tokenizer(models.WordLevel(vocab=vocab_map, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins with spaces
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=max_pos,
    )
    fast.save_pretrained(path)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="folder for the model (config.json); the tokenizer goes to OUT-tok/")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--inter", type=int, default=1408)
    a = p.parse_args()
    shape = dict(hidden=a.hidden, layers=a.layers, heads=a.heads, kv_heads=a.kv_heads, inter=a.inter)
    make(a.out, **shape)
    make(a.out + "-tok", **shape)
    for f in ("config.json", "generation_config.json"):
        os.remove(os.path.join(a.out + "-tok", f))
    t = PreTrainedTokenizerFast.from_pretrained(a.out + "-tok")
    ids = t("w1 w2 w3")["input_ids"]
    print("tokenizer ok:", ids, repr(t.decode(ids)))
