"""Turn the second set of raw what-if pairs (record_pairs2.sh) into fixtures: gzipped recordings and pairs.json.

usage: tools/record/whatif2_fixtures.py RAW2_DIR OUT_DIR      (OUT_DIR: tests/fixtures/recordings/vllm-0.32-cpu-whatif2)
Windows as whatif_fixtures.py takes them: from 15 s after each load phase began to the end of its duration, the
last phase the heavy one. No labels.json: these pairs score the what-if (benchmarks/bench_whatif.py); their classes
were not checked against the classifier's criteria. A pair whose change no `whatif --set` knob can express (prefix
caching on/off) is skipped and said so; so is one whose raw files are missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from whatif_fixtures import SERVE, describe, observe, phases, trim

F = "--dtype float32"
C = "prompt_min=100,prompt_max=300,out_min=32,out_max=96"
# (pair, change as knobs (None: the after recording's cache size), before flags, after flags, load)
PAIRS = [
    (
        "tiny_kvhalf",
        None,
        f"--max-model-len 1024 --kv-cache-memory-bytes 33554432 {F}",
        f"--max-model-len 1024 --kv-cache-memory-bytes 16777216 {F}",
        "tiny model; light: 2 workers 30 s (seed 401); heavy: closed loop 16 workers 60 s, prompt 100-200, out 400-600 "
        "(seed 402); KV cache halved under long outputs",
    ),
    (
        "llama_cap",
        {"max_num_seqs": 24},
        f"--max-model-len 2048 --max-num-seqs 8 {F}",
        f"--max-model-len 2048 --max-num-seqs 24 {F}",
        f"llama-shaped model; light: 2 workers 30 s (seed 411); heavy: closed loop 24 workers 90 s, {C} (seed 412)",
    ),
    (
        "llama_mnbt",
        {"max_num_batched_tokens": 1024},
        f"--max-model-len 2048 --max-num-batched-tokens 256 {F}",
        f"--max-model-len 2048 --max-num-batched-tokens 1024 {F}",
        "llama-shaped model; light: 1 worker 30 s (seed 421); heavy: closed loop 6 workers 90 s, prompt 500-1000, "
        "out 16-48 (seed 422)",
    ),
    (
        "llama_loadx2",
        {"load": 2.0},
        f"--max-model-len 2048 --max-num-seqs 32 {F}",
        f"--max-model-len 2048 --max-num-seqs 32 {F}",
        f"llama-shaped model; light: 2 workers 30 s (seed 431); heavy: open loop 0.5 req/s before, 1.0 after, at most "
        f"44 in flight, 90 s, {C} (seed 432): the after side crosses into saturation",
    ),
    ("tiny_prefix", "prefix caching on -> off", "", "", ""),
    (
        "tiny_caplow",
        {"max_num_seqs": 6},
        f"--max-model-len 2048 --max-num-seqs 16 {F}",
        f"--max-model-len 2048 --max-num-seqs 6 {F}",
        "tiny model; light: 2 workers 30 s (seed 451); heavy: closed loop 24 workers 60 s, prompt 100-300, "
        "out 64-256 (seed 452)",
    ),
]
KV_SPACE = {"tiny_kvhalf": ""}  # the others ran with VLLM_CPU_KVCACHE_SPACE=1


def cache_tokens(path: Path) -> int:
    """num_gpu_blocks × block_size from the recording's first vllm:cache_config_info."""
    for line in path.open():
        text = json.loads(line).get("text", "")
        for ln in text.splitlines():
            if ln.startswith("vllm:cache_config_info{"):
                labels = dict(kv.split("=", 1) for kv in ln[ln.index("{") + 1 : ln.rindex("}")].split('",'))
                clean = {k.strip(): v.strip('"') for k, v in labels.items()}
                return int(clean["num_gpu_blocks"]) * int(clean["block_size"])
    raise SystemExit(f"{path}: no vllm:cache_config_info")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", type=Path)
    ap.add_argument("out", type=Path)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    pairs = []
    for name, change, bf, af, load in PAIRS:
        if isinstance(change, str):
            print(f"{name}: skipped, no knob for {change}")
            continue
        raw = {side: a.raw / f"{name}_{side}.jsonl" for side in ("before", "after")}
        if not all(p.exists() and (a.raw / f"{name}_{s}.client.json").exists() for s, p in raw.items()):
            print(f"{name}: skipped, raw recording or client.json missing")
            continue
        if change is None:
            change = {"kv_cache_tokens": cache_tokens(raw["after"])}
        env = KV_SPACE.get(name, "VLLM_CPU_KVCACHE_SPACE=1 ")
        entry: dict = {
            "name": name,
            "before": f"{name}_before.jsonl.gz",
            "after": f"{name}_after.jsonl.gz",
            "change": change,
            "before_flags": f"{env}{bf} {SERVE}",
            "after_flags": f"{env}{af} {SERVE}",
            "load": load,
        }
        notes = []
        for side in ("before", "after"):
            dst = a.out / f"{name}_{side}.jsonl.gz"
            trim(raw[side], dst, 0.0, float("inf"))
            (a.out / f"{name}_{side}.client.json").write_text(
                (a.raw / f"{name}_{side}.client.json").read_text()
            )
            ps = phases(a.raw, f"{name}_{side}")
            for p in ps:
                kind = "heavy" if p is ps[-1] else "light"
                entry[f"{kind}_{side}"] = list(p["window"])
                o = observe(dst, p["window"])
                notes.append(
                    f"{kind}_{side}: {describe(o)}, generation {o['gen']:.0f} tok/s, client TTFT p50/p95 "
                    f"{p['client_ttft_p50']:.2f}/{p['client_ttft_p95']:.2f} s, {p['requests_ok']} requests"
                )
        entry["notes"] = "recorded alone on the machine (session 5 campaign); " + "; ".join(notes)
        pairs.append(entry)
    (a.out / "pairs.json").write_text(json.dumps(pairs, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(pairs)} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
