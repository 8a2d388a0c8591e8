"""Turn the fifth set of raw what-if pairs (record_pairs5.sh, session 21) into vllm-0.32-cpu-whatif4/.

usage: tools/record/whatif4_fixtures.py RAW_DIR OUT_DIR      (OUT_DIR: tests/fixtures/recordings/vllm-0.32-cpu-whatif4)
RAW_DIR holds both runs of record_pairs5.sh: the Llama-shaped pairs and, with SHAPE=mha, the multi-head ones.
The same files and notes as whatif2_fixtures.py (one scrape every 2 s kept). These pairs were recorded to be held
out: every one carries `set_aside`, and bench_whatif.py scores it with the set-aside part, never printing its own
errors. labels.json: the class each window was meant to show was written into EXPECT below before the recording
ran; a window is labelled only when its scrapes meet that class's criteria (whatif_fixtures.check), and one that
does not is printed and left unlabelled, so the classifier's tests (tests/diagnosis/test_recordings.py and the
others reading labels.json) judge it on windows no session tuned it on.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from whatif2_fixtures import build
from whatif_fixtures import check, describe, label, observe, phases

B = "--dtype bfloat16"
OPEN = "prompt 100-300, out 64-192 (ignore_eos)"
# (pair, change as knobs, before flags, after flags, load, seconds between kept scrapes)
PAIRS = [
    (
        "llama_bf16_kvhalf",
        None,  # the after side's cache tokens, read from its cache_config_info
        f"--max-model-len 2048 --kv-cache-memory-bytes 50331648 {B}",
        f"--max-model-len 2048 --kv-cache-memory-bytes 25165824 {B}",
        "llama-shaped model; light: 2 workers 30 s (seed 701); heavy: closed loop 12 workers, 90 s, prompt 100-300, "
        "out 128-384 (seed 702): the KV cache halved, 48 -> 24 MiB (6,144 -> 3,072 tokens of 8 KiB)",
        2,
    ),
    (
        "llama_bf16_cap8to16",
        {"max_num_seqs": 16},
        f"--max-model-len 2048 --max-num-seqs 8 {B}",
        f"--max-model-len 2048 --max-num-seqs 16 {B}",
        f"llama-shaped model; light: 2 workers 30 s (seed 711); heavy: open loop Poisson 1.8 req/s, at most 200 in "
        f"flight, 120 s, {OPEN} (seed 712): a queue at cap 8, relieved at 16",
        2,
    ),
    (
        "llama_bf16_loadx1.5",
        {"load": 1.5},
        f"--max-model-len 2048 --max-num-seqs 32 {B}",
        f"--max-model-len 2048 --max-num-seqs 32 {B}",
        f"llama-shaped model; light: 2 workers 30 s (seed 721); heavy: open loop Poisson 1.4 req/s before, 2.1 "
        f"after (seed 722: the same requests, inter-arrival times / 1.5), at most 200 in flight, 120 s, {OPEN}",
        2,
    ),
    (
        "mha_bf16_cap8to16",
        {"max_num_seqs": 16},
        f"--max-model-len 2048 --max-num-seqs 8 {B}",
        f"--max-model-len 2048 --max-num-seqs 16 {B}",
        f"multi-head model; light: 2 workers 30 s (seed 711); heavy: open loop Poisson 1.8 req/s, at most 200 in "
        f"flight, 120 s, {OPEN} (seed 712): a queue at cap 8, relieved at 16",
        2,
    ),
    (
        "mha_bf16_loadx1.5",
        {"load": 1.5},
        f"--max-model-len 2048 --max-num-seqs 32 {B}",
        f"--max-model-len 2048 --max-num-seqs 32 {B}",
        f"multi-head model; light: 2 workers 30 s (seed 721); heavy: open loop Poisson 1.4 req/s before, 2.1 "
        f"after (seed 722), at most 200 in flight, 120 s, {OPEN}: near the ~2 req/s the cap-16 ramp held",
        2,
    ),
]  # fmt: skip  (a data table: one pair a row group, as the recording script lists them)
LATER = {
    name: "recorded in session 21 as fresh held-out pairs, before anything was tuned or looked at on them"
    for name, *_ in PAIRS
}
SESSION = {name: "session 21, Intel Xeon with AVX-512 BF16, bf16, engine on core 0" for name, *_ in PAIRS}
KV_SPACE = {"llama_bf16_kvhalf": ""}  # the others ran with VLLM_CPU_KVCACHE_SPACE=1
# the class each (pair, side, phase) was recorded to show, written before the recording ran
EXPECT = {
    ("llama_bf16_kvhalf", "after", "heavy"): "kv_cache",
    ("llama_bf16_cap8to16", "before", "heavy"): "batch_cap",
    ("llama_bf16_cap8to16", "after", "heavy"): "healthy",
    ("llama_bf16_loadx1.5", "before", "heavy"): "healthy",
    ("llama_bf16_loadx1.5", "after", "heavy"): "healthy",
    ("mha_bf16_cap8to16", "before", "heavy"): "batch_cap",
    ("mha_bf16_cap8to16", "after", "heavy"): "healthy",
    ("mha_bf16_loadx1.5", "before", "heavy"): "healthy",
    ("mha_bf16_loadx1.5", "after", "heavy"): "healthy",
    **{(name, side, "light"): "healthy" for name, *_ in PAIRS for side in ("before", "after")},
}


def labels(raw_dir: Path, out: Path) -> list[dict]:
    """The windows of EXPECT whose scrapes meet their class's criteria, as labels.json entries."""
    found = []
    for name, _, bf, af, *_ in PAIRS:
        for side, flags in (("before", bf), ("after", af)):
            file = f"{name}_{side}.jsonl.gz"
            if not (out / file).exists():
                continue
            ps = phases(raw_dir, f"{name}_{side}")
            kinds = ["heavy" if p is ps[-1] else "light" for p in ps]
            words = flags.split()
            cap = int(words[words.index("--max-num-seqs") + 1]) if "--max-num-seqs" in words else None
            held = {}  # phase index -> (class, observation), for the phases whose scrapes meet their class
            for i, (p, kind) in enumerate(zip(ps, kinds, strict=True)):
                cls = EXPECT.get((name, side, kind))
                if cls is None:
                    continue
                o = observe(out / file, p["window"])
                why = check(cls, o, cap, None)
                if why:
                    print(f"NOT LABELLED: {file} {kind} {p['window']}: {why}; {describe(o)}", file=sys.stderr)
                    continue
                held[i] = (cls, o)
            for i, (cls, o) in held.items():
                entry = label(file, cls, ps[i], f"{name}, {side} the change, {kinds[i]} phase", flags, o)
                if kinds[i] == "light" and i + 1 not in held:
                    # the next phase is not labelled: where this class ends is not known, only where it began
                    del entry["load_end"]
                found.append(entry)
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", type=Path)
    ap.add_argument("out", type=Path)
    a = ap.parse_args()
    build(a.raw, a.out, PAIRS, LATER, SESSION, KV_SPACE)
    found = labels(a.raw, a.out)
    (a.out / "labels.json").write_text(json.dumps(found, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(found)} labels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
