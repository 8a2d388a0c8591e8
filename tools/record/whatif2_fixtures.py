"""Turn the second set of raw what-if pairs (record_pairs2.sh, record_pairs3.sh) into fixtures: recordings, pairs.json.

usage: tools/record/whatif2_fixtures.py RAW2_DIR OUT_DIR      (OUT_DIR: tests/fixtures/recordings/vllm-0.32-cpu-whatif2)
A raw recording is RAW2_DIR/NAME_SIDE.jsonl (or .jsonl.gz: session 5's llama_loadx2 is kept only as its fixture, the
whole raw file, so pointing RAW2_DIR at the fixture folder's copies reproduces it). Each kept line byte for byte,
gzipped with no name or mtime, so reruns are identical; pairs recorded from session 6 on keep one scrape every 2 s
(counters and histograms are cumulative, a thinned window measures what the full one did; the files stay ~350 kB).
Windows as whatif_fixtures.py takes them: from 15 s after each load phase began to the end of its duration, the
last phase the heavy one. No labels.json: these pairs score the what-if (benchmarks/bench_whatif.py); their classes
were not checked against the classifier's criteria. A pair whose change no `whatif --set` knob can express goes to
other_pairs.json instead (same schema, `change` in words; none since the prefix-caching and speculation knobs), for
a what-if that may one day express it; one whose raw files are missing is skipped and said so.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from ramp_fixtures import thin  # also puts the repo root on sys.path
from trim import read_lines, write_gzip
from whatif_fixtures import SERVE, describe, observe, phases

from kvdoctor.whatif.sources import recording_snaps
from kvdoctor.whatif.window import in_window, measure

F = "--dtype float32"
C = "prompt_min=100,prompt_max=300,out_min=32,out_max=96"
SPEC = '--speculative-config {"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4,"prompt_lookup_min":1}'
# (pair, change as knobs (None: the after recording's cache size; text: no knob), before flags, after flags, load,
#  seconds between kept scrapes (0: all))
PAIRS = [
    (
        "tiny_kvhalf",
        None,
        f"--max-model-len 1024 --kv-cache-memory-bytes 33554432 {F}",
        f"--max-model-len 1024 --kv-cache-memory-bytes 16777216 {F}",
        "tiny model; light: 2 workers 30 s (seed 401); heavy: closed loop 16 workers 60 s, prompt 100-200, out 400-600 "
        "(seed 402); KV cache halved under long outputs",
        2,
    ),
    (
        "llama_cap",
        {"max_num_seqs": 24},
        f"--max-model-len 2048 --max-num-seqs 8 {F}",
        f"--max-model-len 2048 --max-num-seqs 24 {F}",
        f"llama-shaped model; light: 2 workers 30 s (seed 411); heavy: closed loop 24 workers 90 s, {C} (seed 412)",
        2,
    ),
    (
        "llama_mnbt",
        {"max_num_batched_tokens": 1024},
        f"--max-model-len 2048 --max-num-batched-tokens 256 {F}",
        f"--max-model-len 2048 --max-num-batched-tokens 1024 {F}",
        "llama-shaped model; light: 1 worker 30 s (seed 421); heavy: closed loop 6 workers 90 s, prompt 500-1000, "
        "out 16-48 (seed 422)",
        2,
    ),
    (
        "llama_loadx2",
        {"load": 2.0},
        f"--max-model-len 2048 --max-num-seqs 32 {F}",
        f"--max-model-len 2048 --max-num-seqs 32 {F}",
        f"llama-shaped model; light: 2 workers 30 s (seed 431); heavy: open loop 0.5 req/s before, 1.0 after, at most "
        f"44 in flight, 90 s, {C} (seed 432): the after side crosses into saturation",
        0,
    ),
    (
        "tiny_prefix",
        {"enable_prefix_caching": False},
        f"--max-model-len 2048 --enable-prefix-caching {F}",
        f"--max-model-len 2048 --no-enable-prefix-caching {F}",
        "tiny model; the same 768-word system prompt before every prompt; light: 1 worker 30 s (seed 441); heavy: "
        "closed loop 8 workers 60 s (seed 442); prompt 32-96 after the shared prefix, out 32-64",
        2,
    ),
    (
        "tiny_caplow",
        {"max_num_seqs": 6},
        f"--max-model-len 2048 --max-num-seqs 16 {F}",
        f"--max-model-len 2048 --max-num-seqs 6 {F}",
        "tiny model; light: 2 workers 30 s (seed 451); heavy: closed loop 24 workers 60 s, prompt 100-300, "
        "out 64-256 (seed 452)",
        2,
    ),
    (
        "tiny_specdec",
        {"num_speculative_tokens": 3},
        f"--max-model-len 2048 {F}",
        f"--max-model-len 2048 {SPEC} {F}",
        "tiny model; light: 2 workers 30 s (seed 461, all sampled); heavy: closed loop 8 workers 60 s, prompt 50-200, "
        "out 32-128, half the requests greedy (load.py --greedy 0.5: their drafts are accepted, sampled ones' ~never) "
        "(seed 462)",
        2,
    ),
    (
        "tiny_mml",
        {"max_model_len": 512},
        f"--max-model-len 2048 {F}",
        f"--max-model-len 512 {F}",
        "tiny model; light: 2 workers 30 s, prompt 50-100, out 32-64 (seed 471); heavy: closed loop 8 workers 60 s, "
        "prompt 200-600, out 32-128 (seed 472): after the change a request whose prompt + max_tokens passes 512 is "
        "refused (HTTP 400; load.py moves on after 0.5 s)",
        2,
    ),
    (
        "llama_cobind",
        {"max_num_seqs": 64},
        f"--max-model-len 2048 --max-num-seqs 32 {F}",
        f"--max-model-len 2048 --max-num-seqs 64 {F}",
        f"llama-shaped model; light: open loop 0.2 req/s 60 s (seed 501); heavy: open loop 1.0 req/s 240 s, at most "
        f"200 in flight, {C} (seed 502): the co-binding load (record_cobinding.sh, CAP=32 then CAP=64), past "
        "capacity with the cap reached; does doubling the cap buy throughput there?",
        2,
    ),
]  # fmt: skip  (a data table: one pair a row group, as the recording script lists them)
# recorded after bench_whatif's tuned/set-aside rule was fixed: set aside, outside the every-third count
LATER = {"llama_cobind": "recorded in session 7, after every coefficient and interval constant was tuned"}
KV_SPACE = {"tiny_kvhalf": ""}  # the others ran with VLLM_CPU_KVCACHE_SPACE=1
SESSION = {
    "llama_loadx2": "session 5 campaign",
    "llama_cobind": "session 7, engine on core 0, the rest pinned to core 1",
}  # the others: session 6, engine on core 0, the rest pinned to core 1


def cache_tokens(path: Path) -> int:
    """num_gpu_blocks × block_size from the recording's first vllm:cache_config_info."""
    for line in read_lines(str(path)):
        text = json.loads(line).get("text", "")
        for ln in text.splitlines():
            if ln.startswith("vllm:cache_config_info{"):
                labels = dict(kv.split("=", 1) for kv in ln[ln.index("{") + 1 : ln.rindex("}")].split('",'))
                clean = {k.strip(): v.strip('"') for k, v in labels.items()}
                return int(clean["num_gpu_blocks"]) * int(clean["block_size"])
    raise SystemExit(f"{path}: no vllm:cache_config_info")


def raw_file(raw: Path, scen: str) -> Path | None:
    """RAW/SCEN.jsonl, else RAW/SCEN.jsonl.gz, else None."""
    return next((p for p in (raw / f"{scen}.jsonl", raw / f"{scen}.jsonl.gz") if p.exists()), None)


def spec_note(path: Path, w: tuple[float, float]) -> str:
    """Speculative decoding's acceptance over a window (accepted / draft tokens), or '' without drafts."""
    win = in_window(recording_snaps(path), *w)
    a, b = win[0], win[-1]
    drafted = b.get("vllm:spec_decode_num_draft_tokens_total", 0.0) - a.get(
        "vllm:spec_decode_num_draft_tokens_total", 0.0
    )
    if not drafted:
        return ""
    accepted = b.get("vllm:spec_decode_num_accepted_tokens_total", 0.0) - a.get(
        "vllm:spec_decode_num_accepted_tokens_total", 0.0
    )
    return f", acceptance {accepted / drafted:.2f} of {drafted:.0f} draft tokens"


def side_note(kind: str, side: str, o: dict, p: dict, dst: Path) -> str:
    """One phase of one side: the scrapes, vLLM's own quantities and the client's, in the words of the notes."""
    q = measure(in_window(recording_snaps(dst), *p["window"]))
    refused = [e for e in p["errors"] if e and e.startswith("HTTP 4")]
    return (
        f"{kind}_{side}: {describe(o)}, generation {o['gen']:.0f} tok/s; vLLM TTFT p50/p95 {q.ttft_p50_s:.2f}/"
        f"{q.ttft_p95_s:.2f} s, ITL p50/p95 {q.itl_p50_s * 1000:.0f}/{q.itl_p95_s * 1000:.0f} ms"
        f"{spec_note(dst, p['window'])}; client TTFT p50/p95 {p['client_ttft_p50']:.2f}/"
        f"{p['client_ttft_p95']:.2f} s, e2e p50 {p['client_e2e_p50']:.2f} s, {p['requests_ok']} requests ok, "
        f"{p['requests_failed_or_cancelled']} failed or cancelled" + (" (HTTP 400)" if refused else "")
    )


def build(
    raw_dir: Path,
    out: Path,
    table: list,
    later: dict[str, str],
    session: dict[str, str],
    kv_space: dict[str, str] = KV_SPACE,
) -> None:
    """Write each pair of `table` whose raw files are in raw_dir to out (recordings, pairs.json, other_pairs.json)."""
    out.mkdir(parents=True, exist_ok=True)
    pairs, others = [], []
    for name, change, bf, af, load, every in table:
        raw = {side: raw_file(raw_dir, f"{name}_{side}") for side in ("before", "after")}
        if not all(p and (raw_dir / f"{name}_{s}.client.json").exists() for s, p in raw.items()):
            print(f"{name}: skipped, raw recording or client.json missing")
            continue
        if change is None:
            change = {"kv_cache_tokens": cache_tokens(raw["after"])}  # type: ignore[arg-type]
        env = kv_space.get(name, "VLLM_CPU_KVCACHE_SPACE=1 ")
        entry: dict = {
            "name": name,
            "before": f"{name}_before.jsonl.gz",
            "after": f"{name}_after.jsonl.gz",
            "change": change,
            "before_flags": f"{env}{bf} {SERVE}",
            "after_flags": f"{env}{af} {SERVE}",
            "load": load,
        }
        if name in later:
            entry["set_aside"] = later[name]
        notes = []
        for side in ("before", "after"):
            dst = out / f"{name}_{side}.jsonl.gz"
            lines = read_lines(str(raw[side]))
            kept = thin(lines, every, -math.inf, math.inf) if every else lines
            write_gzip(dst, kept)
            print(f"{dst.name}: {len(kept)} of {len(lines)} lines, {dst.stat().st_size / 1000:.0f} kB")
            (out / f"{name}_{side}.client.json").write_text(
                (raw_dir / f"{name}_{side}.client.json").read_text()
            )
            ps = phases(raw_dir, f"{name}_{side}")
            for p in ps:
                kind = "heavy" if p is ps[-1] else "light"
                entry[f"{kind}_{side}"] = list(p["window"])
                notes.append(side_note(kind, side, observe(dst, p["window"]), p, dst))
        thinned = f", one scrape every {every:g} s kept" if every else ""
        entry["notes"] = (
            f"recorded alone on the machine ({session.get(name, 'session 6')}){thinned}; " + "; ".join(notes)
        )
        (others if isinstance(change, str) else pairs).append(entry)
    (out / "pairs.json").write_text(json.dumps(pairs, indent=1, ensure_ascii=False) + "\n")
    other = out / "other_pairs.json"
    if others:
        other.write_text(json.dumps(others, indent=1, ensure_ascii=False) + "\n")
    elif other.exists():
        other.unlink()
    print(f"{len(pairs)} pairs, {len(others)} in other_pairs.json")


def cli(doc: str, table: list, later: dict[str, str], session: dict[str, str]) -> int:
    """RAW OUT from the command line, then build()."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", type=Path)
    ap.add_argument("out", type=Path)
    a = ap.parse_args()
    build(a.raw, a.out, table, later, session)
    return 0


def main() -> int:
    return cli(__doc__, PAIRS, LATER, SESSION)


if __name__ == "__main__":
    sys.exit(main())
