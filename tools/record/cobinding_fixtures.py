"""Turn the raw co-binding run (record_cobinding.sh) into a fixture: a thinned recording, its client.json, labels.json.

usage: tools/record/cobinding_fixtures.py RAW_DIR OUT_DIR [--every 1]
                                                   (OUT_DIR: tests/fixtures/recordings/vllm-0.32-cpu-cobinding)
The recording keeps one scrape every --every seconds (default 1: all, as recorded; 2.5 MB) from its first to ~85 s
into the idle tail, each kept line byte for byte, gzipped with no name or mtime (reruns are identical). Not thinned
to 2 s: replayed at a 15 s cadence those scrapes are 16 s apart, and one evaluation in the lull then says `unknown`. Windows, from the client's phase times and the scrapes:
- light: 15 s after its arrivals began to when they stopped: `healthy`;
- past capacity: from 15 s after running first reached the cap with a queue, to when arrivals stopped: the pack's
  `batch_cap`, `relief` compute (see the notes: the cap is reached, but throughput is compute's);
- the queue draining (no arrivals, in-flight cancelled at the phase's load_end): `batch_cap`, `relief` compute;
- the lull after load_end, 15-28 s: `healthy` (not yet idle_after without traffic); from 55 s: `idle`.
Each window is checked against its class's criteria (below) before it is written; one that fails stops the script.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from ramp_fixtures import thin  # noqa: E402
from summarize import rows  # noqa: E402
from trim import read_lines, write_gzip  # noqa: E402

from kvdoctor.whatif.sources import recording_snaps  # noqa: E402
from kvdoctor.whatif.window import in_window, measure  # noqa: E402

NAME = "llama_cobind_c32"
CAP = 32
FLAGS = "VLLM_CPU_KVCACHE_SPACE=1 --max-model-len 2048 --max-num-seqs 32 --dtype float32"
WHO = (
    "llama-shaped model (Qwen2 architecture, 8 layers, hidden 1024, 8 heads, 2 KV heads: head_dim 128, random "
    f"weights), {FLAGS}, vLLM 0.32.0 on an AMD EPYC without AVX-512 (engine on core 0)"
)
SETTLE_S = 15.0  # a window starts this long after its load changed (ramp-up, the classifier's 15 s window)
IDLE_FROM_S = 55.0  # idle_after 30 s plus a 15 s scrape and a cycle
TAIL_S = 85.0  # kept into the idle tail


def scrapes(path: Path, lo: float, hi: float) -> list[dict]:
    """summarize.py's per-scrape rows (running, waiting, KV, preemptions) with lo <= t <= hi."""
    return [r for r in rows(str(path)) if lo <= r["t"] <= hi and "error" not in r]


def seen(path: Path, lo: float, hi: float) -> dict:
    """What a window showed: per-scrape extremes and medians, and kvdoctor's `measure` of it."""
    rs = scrapes(path, lo, hi)
    q = measure(in_window(recording_snaps(path), lo, hi))
    return {
        "n": len(rs),
        "run": statistics.median(r["run"] for r in rs),
        "run_min": min(r["run"] for r in rs),
        "wait": statistics.median(r["wait"] for r in rs),
        "wait_min": min(r["wait"] for r in rs),
        "wait_max": max(r["wait"] for r in rs),
        "wait_first": rs[0]["wait"],
        "wait_last": rs[-1]["wait"],
        "kv": statistics.median(r["kv"] for r in rs),
        "kv_max": max(r["kv"] for r in rs),
        "pre": rs[-1]["pre"] - rs[0]["pre"],
        "flat": all(r["run"] == 0 and r["wait"] == 0 for r in rs),
        "q": q,
    }


def check(cls: str, o: dict) -> str | None:
    """Why a window does not meet its class's criteria, None when it does."""
    if cls == "healthy" and not (o["wait_max"] == 0 and o["kv_max"] < 0.1 and o["pre"] == 0):
        return "healthy needs no queue in any scrape, KV < 0.1, no preemption"
    if cls == "batch_cap" and not (
        o["run"] >= CAP - 1 and o["wait_min"] > 0 and o["kv_max"] < 0.2 and o["pre"] == 0
    ):
        return (
            f"batch_cap needs median running >= {CAP - 1}, a queue in every scrape, KV < 0.2, no preemption"
        )
    if cls == "idle" and not o["flat"]:
        return "idle needs running 0 and waiting 0 in every scrape"
    return None


def say(o: dict) -> str:
    """One window's observation, in the words of the labels."""
    q = o["q"]
    out = (
        f"observed over {o['n']} scrapes: median running {o['run']:g} waiting {o['wait']:g} kv {o['kv']:.3f}"
    )
    if q.itl_p50_s == q.itl_p50_s:
        out += f", ITL p50 {q.itl_p50_s * 1000:.0f} ms, {q.generation_tokens_per_s:.0f} tok/s"
    if q.ttft_p95_s == q.ttft_p95_s:
        out += f", TTFT p95 {q.ttft_p95_s:.3g} s"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--every", type=float, default=1.0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    client = json.loads((a.raw / f"{NAME}.client.json").read_text())
    light, heavy = client["phases"]
    lines = read_lines(str(a.raw / f"{NAME}.jsonl"))
    first = json.loads(lines[0])["t"]
    end = heavy["load_end"]
    rec = a.out / f"{NAME}.jsonl.gz"
    write_gzip(str(rec), thin(lines, a.every, first, end + TAIL_S))
    shutil.copyfile(a.raw / f"{NAME}.client.json", a.out / f"{NAME}.client.json")
    kept = [r["t"] for r in rows(str(rec))]
    print(f"{rec}: {len(kept)} scrapes, {os.path.getsize(rec) / 1000:.0f} kB")

    ls, hs = light["load_start"], heavy["load_start"]
    l_stop, h_stop = ls + light["settings"]["duration"], hs + heavy["settings"]["duration"]
    capped = next(r["t"] for r in scrapes(rec, hs, h_stop) if r["run"] >= CAP - 1 and r["wait"] > 0)
    lw, sw, dw = (ls + SETTLE_S, l_stop), (capped + SETTLE_S, h_stop), (h_stop + 5.0, end - 1.0)
    lo, so, do = seen(rec, *lw), seen(rec, *sw), seen(rec, *dw)
    base = lo["q"].itl_p50_s
    arrivals = heavy["requests_started"] / heavy["settings"]["duration"]
    s = heavy["settings"]
    offered = arrivals * (s["out_min"] + s["out_max"]) / 2
    thirds = [measure(in_window(recording_snaps(rec), sw[0] + i * (sw[1] - sw[0]) / 3,
                                sw[0] + (i + 1) * (sw[1] - sw[0]) / 3)).generation_tokens_per_s
              for i in range(3)]  # fmt: skip
    co = (
        f"co-binding: the cap is reached, but generated tokens/s stay flat ({', '.join(f'{t:.0f}' for t in thirds)} "
        f"tok/s over the window's thirds) below the {offered:.0f} tok/s offered ({arrivals:.2f} req/s x "
        f"{(s['out_min'] + s['out_max']) / 2:g} tokens) while the queue grows, and ITL p50 is "
        f"{so['q'].itl_p50_s / base:.1f}x light: compute is what limits throughput (cf. vllm-0.32-cpu-ramps/"
        "llama_ramp_c32: tokens/s flat at 42-48 from 13 running to the cap); the pack names batch_cap (its label, "
        "`expected`), the careful verdict is compute with the cap co-binding (`relief`)"
    )
    labels, bad = [], []

    def label(cls: str, w: tuple[float, float], o: dict, notes: str, **extra: object) -> None:
        why = check(cls, o)
        if why:
            bad.append(f"{cls} {w}: {why}; {say(o)}")
        entry = {"file": rec.name, "vllm": "0.32.0", "expected": cls, "steady_from": round(w[0], 2),
                 "steady_to": round(w[1], 2), "notes": f"{notes}; {say(o)}; {WHO}"}  # fmt: skip
        entry.update(extra)
        labels.append(entry)

    label("healthy", lw, lo, f"light: open loop Poisson {light['settings']['rate']:g} req/s, prompt 100-300, out "
          f"32-96, seed {light['settings']['seed']}, {ls:.2f}-{light['load_end']:.2f} (60 s + up to 10 s drain); "
          "criteria: waiting 0 in every scrape, KV < 0.1, no preemption, requests finishing and tokens generated "
          "throughout; its ITL p50 is the light-load baseline", load_start=round(ls, 2))  # fmt: skip
    label("batch_cap", sw, so, f"past capacity, held: open loop {s['rate']:g} req/s (at most {s['concurrency']} in "
          f"flight, never reached), seed {s['seed']}, arrivals {hs:.2f}-{h_stop:.2f}; running first at the cap with "
          f"a queue at {capped:.2f}; criteria (the pack's batch_cap): median running >= {CAP - 1} of {CAP}, a "
          f"queue in every scrape (here {so['wait_first']:g} -> {so['wait_last']:g}, max {so['wait_max']:g}), "
          f"KV < 0.2 (max {so['kv_max']:.3f}), no preemption; {co}", relief="compute")  # fmt: skip
    label("batch_cap", dw, do, f"the queue draining: arrivals stopped at {h_stop:.2f}, the queue falls "
          f"{do['wait_first']:g} -> {do['wait_last']:g} with the batch still at the cap, in-flight cancelled at "
          f"load_end {end:.2f} (running and waiting drop to 0 in one scrape); criteria as past capacity; co-binding as "
          f"there: {do['q'].generation_tokens_per_s:.0f} tok/s, as while arrivals held, ITL p50 "
          f"{do['q'].itl_p50_s / base:.1f}x light; the careful verdict is compute (`relief`)",
          relief="compute", load_end=round(end, 2))  # fmt: skip
    lull = (end + SETTLE_S, end + 28.0)
    label("healthy", lull, seen(rec, *lull), f"the lull after load_end {end:.2f}, its first 30 s (not yet "
          "idle_after without traffic): running 0, waiting 0, counters flat")  # fmt: skip
    idle = (end + IDLE_FROM_S, kept[-1])
    label("idle", idle, seen(rec, *idle), f"the drain from {IDLE_FROM_S:g} s after load_end {end:.2f} (idle_after "
          "30 s plus a 15 s scrape and a cycle): running 0, waiting 0, KV 0, counters flat")  # fmt: skip
    for b in bad:
        print("NOT LABELLED:", b, file=sys.stderr)
    if bad:
        return 1
    (a.out / "labels.json").write_text(json.dumps(labels, indent=1, ensure_ascii=False) + "\n")
    for e in labels:
        print(e["expected"], e["steady_from"], e["steady_to"], e.get("relief", ""), sep="  ")
    print(f"light ITL p50 {base * 1000:.0f} ms; offered {offered:.0f} tok/s; thirds {thirds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
