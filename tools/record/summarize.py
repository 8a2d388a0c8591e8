"""Print a recording second by second, to check what state the server was really in before labelling it.

usage: tools/record/summarize.py REC.jsonl[.gz] [--start T0 --end T1]
Columns: seconds since the first scrape, unix time, KV usage (kv_cache_usage_perc, else gpu_cache_usage_perc),
running, waiting, preemptions (cumulative), mean inter-token latency over the last interval (from the histogram's
_sum/_count deltas). With --start/--end also prints the medians over that window and the preemptions in it.
Series are summed over engines (data parallel: one `engine` label per engine) unless --engine N picks one.
"""

import argparse
import gzip
import json
import re
import statistics

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")


def samples(text, engine=None):
    """Sum of each metric name over its label sets (or over those of one engine)."""
    out = {}
    tag = f'engine="{engine}"' if engine is not None else None
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if tag and m and 'engine="' in (m.group(2) or "") and tag not in m.group(2):
            continue
        if m and not line.startswith("#") and "_bucket" not in m.group(1):
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


def first(s, names, suffix=""):
    return next((s[n + suffix] for n in names if n + suffix in s), None)


def rows(path, engine=None):
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    prev = None
    for r in recs:
        if "error" in r:
            yield {"t": r["t"], "error": r["error"]}
            prev = None
            continue
        s = samples(r["text"], engine)
        row = {"t": r["t"], "kv": first(s, KV), "run": s.get("vllm:num_requests_running")}
        row.update(wait=s.get("vllm:num_requests_waiting"), pre=s.get("vllm:num_preemptions_total"), itl=None)
        itl_sum, itl_n = first(s, ITL, "_sum"), first(s, ITL, "_count")
        if prev and itl_n is not None and itl_n > prev[1]:
            row["itl"] = (itl_sum - prev[0]) / (itl_n - prev[1])
        prev = (itl_sum, itl_n) if itl_n is not None else None
        yield row


def fmt(v, spec):
    return format(v, spec) if v is not None else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rec")
    ap.add_argument("--start", type=float)
    ap.add_argument("--end", type=float)
    ap.add_argument("--quiet", action="store_true", help="only the window summary")
    ap.add_argument("--engine", help="only the series of this engine label (data parallel)")
    a = ap.parse_args()
    rs = list(rows(a.rec, a.engine))
    t0 = rs[0]["t"]
    for r in rs if not a.quiet else []:
        if "error" in r:
            print(f"{r['t'] - t0:6.1f} {r['t']:.3f} DOWN {r['error'][:70]}")
            continue
        cols = [fmt(r["kv"], ".3f"), fmt(r["run"], ".0f"), fmt(r["wait"], ".0f"), fmt(r["pre"], ".0f")]
        print(
            f"{r['t'] - t0:6.1f} {r['t']:.3f} kv {cols[0]} run {cols[1]} wait {cols[2]} preempt {cols[3]}",
            end="",
        )
        print(f" itl_ms {fmt(r['itl'] and r['itl'] * 1000, '.1f')}")
    if a.start is not None and a.end is not None:
        w = [r for r in rs if a.start <= r["t"] <= a.end and "error" not in r]
        med = {
            k: statistics.median([r[k] for r in w if r[k] is not None] or [float("nan")])
            for k in ("kv", "run", "wait")
        }
        itl = statistics.median([r["itl"] for r in w if r["itl"] is not None] or [float("nan")])
        pre = (w[-1]["pre"] or 0) - (w[0]["pre"] or 0)
        print(
            f"window {a.start:.3f}-{a.end:.3f} ({len(w)} scrapes): median kv {med['kv']:.3f} running {med['run']:g}",
            end="",
        )
        print(f" waiting {med['wait']:g}, preemptions +{pre:g}, median itl {itl * 1000:.1f} ms")


if __name__ == "__main__":
    main()
