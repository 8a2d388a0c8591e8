"""Turn the raw what-if recordings (rerecord_whatif.sh) into fixtures: trimmed files, pairs.json and labels.json.

usage: tools/record/whatif_fixtures.py RAW_DIR OUT_DIR
Windows come from each load phase's own start and duration (client.json): a steady window starts 15 s after the
phase began (ramp-up, and the classifier's 15 s window) and ends with the phase's duration (its drain excluded).
Every label is checked against what the scrapes show in its window (the criteria below) before it is written; a
window that does not meet its class's criteria stops the script instead of being labelled.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from summarize import rows
from trim import read_lines, write_gzip

SERVE = "--enforce-eager --load-format dummy"  # serve.sh adds these to every server
KV_SPACE = "VLLM_CPU_KVCACHE_SPACE=1 "
BC = "--max-model-len 2048 --max-num-seqs {} --dtype float32"
KV = "--max-model-len 1024 --kv-cache-memory-bytes {} --dtype float32"
MN = "--max-model-len 4096 --max-num-batched-tokens {} --dtype float32"
LX = "--max-model-len 2048 --dtype float32"

# (pair name, raw before, raw after, change, before flags, after flags, load, seed, phase classes)
PAIRS = [
    (
        "max_num_seqs_4_to_12",
        "batchcap_restart",
        "batchcap_restart",
        {"max_num_seqs": 12},
        KV_SPACE + BC.format(4),
        KV_SPACE + BC.format(12),
        "closed loop; light: 2 workers 20 s (seed 11); heavy: 24 workers 45 s then 3 s drain and the rest cancelled "
        "(seed 12); prompt 100-300, out 64-256 words (1 token each), ignore_eos, streamed; the same again after a "
        "restart with the new flag (record_restart.sh, PHASES + AFTER_FLAGS)",
        12,
        (None, "batch_cap"),
    ),
    (
        "kv_cache_doubled",
        "kv2x_before",
        "kv2x_after",
        {"kv_cache_tokens": 8192},
        KV.format(16777216),
        KV.format(33554432),
        "closed loop; light: 2 workers 30 s, prompt 50-100, out 32-64 (seed 21); heavy: 24 "
        "workers 60 s, prompt 200-500, out 300-500 (seed 22), then 3 s drain and the rest cancelled; ignore_eos, "
        "streamed; separate servers (record_pair.sh): what fp8 KV gives, done by doubling --kv-cache-memory-bytes",
        22,
        ("healthy", "kv_cache"),
    ),
    (
        "load_x1.5_healthy",
        "loadx15_before",
        "loadx15_after",
        {"load": 1.5},
        KV_SPACE + LX,
        KV_SPACE + LX,
        "light: 2 workers closed loop 30 s (seed 31); heavy: open loop Poisson 4 req/s before, 6 req/s after, 60 s "
        "(seed 32: same requests, inter-arrival times / 1.5), at most 40 in flight; prompt 100-300, out 32-128; "
        "ignore_eos, streamed",
        32,
        ("healthy", "healthy"),
    ),
    (
        "max_num_batched_tokens_2048_to_512",
        "mnbt_before",
        "mnbt_after",
        {"max_num_batched_tokens": 512},
        KV_SPACE + MN.format(2048),
        KV_SPACE + MN.format(512),
        "closed loop, long prompts (RAG-like); light: 1 "
        "worker 30 s (seed 41); heavy: 8 workers 60 s (seed 42), then 5 s drain and the rest cancelled; prompt "
        "1000-2000, out 16-64; ignore_eos, streamed",
        42,
        ("healthy", "compute"),
    ),
    (
        "load_x1.5_batch_capped",
        "loadcap_before",
        "loadcap_after",
        {"load": 1.5},
        KV_SPACE + BC.format(4),
        KV_SPACE + BC.format(4),
        "closed loop; light: 2 workers 30 s (seed 51); heavy: 16 workers before, 24 after (x1.5), "
        "60 s, then 3 s drain and the rest cancelled (seed 52); prompt 100-300, out 64-256; ignore_eos, streamed; "
        "separate servers (record_pair.sh, AFTER_ARGS): more clients on a server already at its cap",
        52,
        ("healthy", "batch_cap"),
    ),
    (
        "kv_cache_doubled_restart",
        "kv2x_restart",
        "kv2x_restart",
        {"kv_cache_tokens": 8192},
        KV.format(16777216),
        KV.format(33554432),
        "closed loop 24 workers 45 s + 3 s drain, prompt 200-500, out 300-500, seed 22 (the "
        "heavy phase of kv_cache_doubled), before the restart and again after it; no light phase in this file (its "
        "baseline: kv2x_before light)",
        22,
        ("kv_cache",),
    ),
]


def phases(raw: Path, scen: str) -> list[dict]:
    """Each load phase with its steady window."""
    out = []
    for p in json.loads((raw / f"{scen}.client.json").read_text())["phases"]:
        start, dur = p["load_start"], p["settings"]["duration"]
        w = (math.ceil((start + 15) * 2) / 2, math.floor((start + dur) * 2) / 2)
        out.append({**p, "window": w})
    return out


def observe(path: Path, w: tuple[float, float]) -> dict:
    """Medians and counts over a window, as summarize.py prints them."""
    rs = [r for r in rows(str(path)) if w[0] <= r["t"] <= w[1] and "error" not in r]

    def med(k: str) -> float:
        return statistics.median([r[k] for r in rs if r[k] is not None] or [math.nan])

    return {
        "scrapes": len(rs),
        "kv": med("kv"),
        "run": med("run"),
        "wait": med("wait"),
        "itl": med("itl"),
        "wait_min": min((r["wait"] for r in rs if r["wait"] is not None), default=math.nan),
        "pre": (rs[-1]["pre"] or 0) - (rs[0]["pre"] or 0),
        "gen": gen_rate(path, w),
    }


def gen_rate(path: Path, w: tuple[float, float]) -> float:
    """Generation tokens/s from the counter's first and last scrape in the window (summed over a data-parallel
    server's engines, one series each)."""
    pts = []
    for line in read_lines(str(path)):
        r = json.loads(line)
        if "text" in r and w[0] <= r["t"] <= w[1]:
            lines = [ln for ln in r["text"].splitlines() if ln.startswith("vllm:generation_tokens_total{")]
            if lines:
                pts.append((r["t"], sum(float(ln.rsplit(" ", 1)[1]) for ln in lines)))
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def check(cls: str, o: dict, cap: int | None, light_itl: float | None) -> str | None:
    """Why the window does not meet its class's criteria, None when it does."""
    if cls == "batch_cap" and not (
        o["run"] == cap and o["wait_min"] > 0 and o["kv"] < 0.05 and o["pre"] == 0
    ):
        return f"batch_cap needs running {cap}, a queue every scrape, KV < 0.05, no preemptions"
    if cls == "kv_cache" and not (o["kv"] >= 0.9 and o["wait"] > 0 and o["pre"] > 0):
        return "kv_cache needs KV ≥ 0.9, a queue and preemptions"
    if cls == "healthy" and not (o["wait"] == 0 and o["kv"] < 0.5 and o["pre"] == 0):
        return "healthy needs no queue, KV < 0.5, no preemptions"
    if cls == "compute" and not (light_itl and o["itl"] > 5 * light_itl and o["kv"] < 0.1 and o["wait"] == 0):
        return "compute needs ITL > 5x the light phase's, KV < 0.1, no queue"
    return None


def describe(o: dict) -> str:
    """One window's observation, in the words of the labels."""
    return (
        f"observed over {o['scrapes']} scrapes (summarize.py): median kv {o['kv']:.3f} running {o['run']:g} "
        f"waiting {o['wait']:g}, preemptions +{o['pre']:g}, median itl {o['itl'] * 1000:.1f} ms"
    )


def label(file: str, cls: str, phase: dict, what: str, flags: str, o: dict) -> dict:
    """One labels.json entry: a load phase's steady window of `file`, expected to show `cls`."""
    w = phase["window"]
    return {
        "file": file,
        "vllm": "0.32.0",
        "expected": cls,
        "steady_from": w[0],
        "steady_to": w[1],
        "notes": f"{what} (seed {phase['settings']['seed']}); {flags}; {describe(o)}",
        "load_start": round(phase["load_start"], 2),
        "load_end": round(phase["load_end"], 2),
    }


def trim(src: Path, dst: Path, start: float, end: float) -> None:
    """Scrapes with start <= t <= end, gzipped as trim.py writes them."""
    keep = [ln for ln in read_lines(str(src)) if start <= json.loads(ln)["t"] <= end]
    write_gzip(dst, keep)
    print(f"{dst.name}: {len(keep)} lines, {os.path.getsize(dst) / 1000:.0f} kB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", type=Path)
    ap.add_argument("out", type=Path)
    a = ap.parse_args()
    raw, out = a.raw, a.out
    stamp = {k: float((raw / f"batchcap_restart.{k}").read_text()) for k in ("sigint_at", "up_at")}
    kvr = {k: float((raw / f"kv2x_restart.{k}").read_text()) for k in ("sigint_at", "up_at")}
    bc = phases(raw, "batchcap_restart")
    # the batch-cap pair is cut from one restarted server; the restart file keeps heavy-before .. the end
    cuts = {
        "batchcap_before": ("batchcap_restart", 0.0, stamp["sigint_at"] - 3),
        "batchcap_after": ("batchcap_restart", stamp["up_at"] - 2, math.inf),
        "batchcap_restart": ("batchcap_restart", bc[1]["load_start"] + 9, math.inf),
        **{
            n: (n, 0.0, math.inf)
            for n in (
                "kv2x_before",
                "kv2x_after",
                "kv2x_restart",
                "loadx15_before",
                "loadx15_after",
                "mnbt_before",
                "mnbt_after",
                "loadcap_before",
                "loadcap_after",
            )
        },
    }
    for name, (src, t0, t1) in cuts.items():
        trim(raw / f"{src}.jsonl", out / f"{name}.jsonl.gz", t0, t1)
    for scen in (
        "batchcap_restart",
        "kv2x_before",
        "kv2x_after",
        "kv2x_restart",
        "loadx15_before",
        "loadx15_after",
        "mnbt_before",
        "mnbt_after",
        "loadcap_before",
        "loadcap_after",
    ):
        (out / f"{scen}.client.json").write_text((raw / f"{scen}.client.json").read_text())
    pairs, labels, bad = [], [], []
    for name, rb, ra, change, bf, af, load, seed, classes in PAIRS:
        pb, pa = phases(raw, rb), phases(raw, ra)
        if rb == ra:  # one restarted server: the first half of the phases ran before the restart
            half = len(pb) // 2
            pb, pa = pb[:half], pb[half:]
        files = {"max_num_seqs_4_to_12": ("batchcap_before.jsonl.gz", "batchcap_after.jsonl.gz")}.get(
            name, (f"{rb}.jsonl.gz", f"{ra}.jsonl.gz")
        )
        entry: dict = {"name": name, "before": files[0], "after": files[1]}
        if name == "max_num_seqs_4_to_12":
            entry["joined"] = "batchcap_restart.jsonl.gz"
        entry.update(
            change=change, before_flags=f"{bf} {SERVE}", after_flags=f"{af} {SERVE}", load=load, seed=seed
        )
        notes = []
        for side, ps, file in (("before", pb, files[0]), ("after", pa, files[1])):
            light_itl = None
            for p, cls in zip(ps[-len(classes) :], classes, strict=True):
                kind = "heavy" if p is ps[-1] else "light"
                w = p["window"]
                entry[f"{kind}_{side}"] = list(w)
                o = observe(out / file, w)
                if kind == "light":
                    light_itl = o["itl"]
                notes.append(
                    f"{kind}_{side}: {describe(o)}, generation {o['gen']:.0f} tok/s, client TTFT p50/p95 "
                    f"{p['client_ttft_p50']:.2f}/{p['client_ttft_p95']:.2f} s, {p['requests_ok']} requests"
                )
                if cls is None:
                    continue
                flags = (bf if side == "before" else af).split()
                cap = int(flags[flags.index("--max-num-seqs") + 1]) if "--max-num-seqs" in flags else None
                why = check(cls, o, cap, light_itl)
                if why:
                    bad.append(f"{file} {kind} {w}: {why}; {describe(o)}")
                targets = [file] + (["batchcap_restart.jsonl.gz"] if name == "max_num_seqs_4_to_12" else [])
                for f in dict.fromkeys(targets):
                    labels.append(
                        label(
                            f,
                            cls,
                            p,
                            f"{name}, {side} the change, {kind} phase",
                            bf if side == "before" else af,
                            o,
                        )
                    )
        if rb == ra:
            s = stamp if rb == "batchcap_restart" else kvr
            notes.append(f"restart: SIGINT {s['sigint_at']:.2f}, /health again {s['up_at']:.2f}")
        entry["notes"] = "recorded alone on the machine; " + "; ".join(notes)
        pairs.append(entry)
    for b in bad:
        print("NOT LABELLED:", b, file=sys.stderr)
    if bad:
        return 1
    (out / "pairs.json").write_text(json.dumps(pairs, indent=1, ensure_ascii=False) + "\n")
    (out / "labels.json").write_text(json.dumps(labels, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(pairs)} pairs, {len(labels)} labels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
