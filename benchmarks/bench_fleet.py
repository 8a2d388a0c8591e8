"""Fleet scale: kvdoctor's scrape source at 10 to 5,000 vLLM targets, per target, against its Prometheus source.

usage: python benchmarks/bench_fleet.py [--sizes 10,100,1000,5000] [--prom-sizes 10,100,1000]
           [--rss-sizes 10,100,1000,5000] [--pre-parsed-from 5000] [--span 120] [--step 5] [--cycles 5] [--keep DIR]

The fleet is synthetic but every series is real (fleet_data.py): N targets (`instance` vllm-0000:8000 …), each a
copy of one of the real vLLM 0.32 recordings (kv_bound, batch_cap, healthy, compute_bound), thinned to one scrape
every --step seconds over their last --span seconds. For each of --prom-sizes a Prometheus 2.42 gets (a) the vLLM
series the rule pack and the source read, plus `up`, backfilled with `promtool tsdb create-blocks-from openmetrics`,
and (b) the pack's recording rules backfilled with `promtool tsdb create-blocks-from rules`, one layer of dependent
rules at a time (Prometheus restarted in between). Then it measures
  * the Prometheus source: wall time of one cycle (PrometheusEvaluator.evaluate at the end of the data) and the
    queries it sent, median of --cycles cycles;
  * the scrape source, at every size: wall time of one cycle of a Pipeline ingesting the same N recorded
    expositions (parse, store, every rule of the pack, classification; no HTTP), median of the last --cycles
    cycles (earlier frames fill the windows, the rules run on the last --cycles + 3), per target, and the
    evaluation's share of it;
  * for --rss-sizes, in a process of its own (fleet_rss.py), the resident memory per target once 30 minutes of
    scrapes every 15 s and of the pack's recorded series are held (sizes from --pre-parsed-from replay scrapes
    parsed once and evaluate once a minute, to keep the run short).
Needs `prometheus` and `promtool` on PATH; not run in CI. Absolute times depend on the machine; the ratios do not.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fleet_data import PACK, RECORDINGS, Template, fleet, kept_names, recording_dir  # noqa: E402

from kvdoctor.pipeline import Pipeline  # noqa: E402
from kvdoctor.rules.loader import default_rule_files, load_files  # noqa: E402
from kvdoctor.sources.client import PromClient  # noqa: E402
from kvdoctor.sources.prometheus import PrometheusEvaluator  # noqa: E402
from tests.support.prometheus import PrometheusServer, backfill, binaries  # noqa: E402


def _fmt(v: float) -> str:
    return "NaN" if v != v else ("+Inf" if v == float("inf") else repr(v))


def write_openmetrics(
    path: Path, targets: list[tuple[str, int, float]], templates: list[Template], t0: float
) -> int:
    """The fleet's kept series and `up` as OpenMetrics; returns the sample count."""
    names = sorted({name for tpl in templates for name in tpl.series} | {"up"})
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        for name in names:
            for instance, ti, phase in targets:
                tpl = templates[ti]
                own = f'instance="{instance}",job="vllm"'
                series = (
                    {"": [(k, 1.0) for k in range(len(tpl.offsets))]}
                    if name == "up"
                    else tpl.series.get(name, {})
                )
                for labels, points in series.items():
                    prefix = f"{name}{{{labels + ',' if labels else ''}{own}}} "
                    fh.writelines(f"{prefix}{_fmt(v)} {t0 + tpl.offsets[k] + phase:.3f}\n" for k, v in points)
                    n += len(points)
        fh.write("# EOF\n")
    return n


def rule_layers() -> list[list[dict[str, str]]]:
    """The pack's recording rules in layers, each depending only on earlier layers (self-references dropped)."""
    doc = yaml.safe_load(PACK.read_text())
    rules = {r["record"]: r["expr"] for g in doc["groups"] for r in g["rules"] if "record" in r}
    deps = {
        n: set(re.findall(r"kvdoctor:[a-z0-9_:]*[a-z0-9_]", e)) & set(rules) - {n} for n, e in rules.items()
    }
    layers, done = [], set()
    while set(rules) - done:
        layer = sorted(n for n in set(rules) - done if deps[n] <= done)
        # `+ 0` drops __name__ so an `a or b` rule is one series per target in promtool's range queries
        # (else both branches become the same series, appended out of order: "out of order sample")
        layers.append([{"record": n, "expr": f"({rules[n].strip()}) + 0"} for n in layer])
        done |= set(layer)
    return layers


def backfill_rules(prom: PrometheusServer, promtool: str, start: int, end: int, work: Path) -> None:
    """Record the pack over [start, end], layer by layer."""
    for i, layer in enumerate(rule_layers()):
        rules = work / f"layer{i}.yml"
        rules.write_text(
            yaml.safe_dump({"groups": [{"name": f"layer{i}", "interval": "15s", "rules": layer}]})
        )
        out = work / "rule-blocks"
        cmd = [
            promtool,
            "tsdb",
            "create-blocks-from",
            "rules",
            f"--start={start}",
            f"--end={end}",
            f"--url={prom.url}",
            f"--output-dir={out}",
            "--quiet",
            str(rules),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"rule backfill failed: {proc.stdout}{proc.stderr}")
        prom.stop()
        for block in out.iterdir():
            shutil.move(str(block), prom.storage / block.name)
        shutil.rmtree(out)
        prom.start(timeout=120)


def bench_prometheus(url: str, t: float, cycles: int, n: int) -> tuple[float, int, Counter[str]]:
    """Median cycle seconds and queries per cycle of the Prometheus source; the classes of the last cycle."""
    groups = load_files(default_rule_files())
    ev = PrometheusEvaluator(PromClient(url), Pipeline(groups))
    ev.evaluate(t)  # warm Prometheus' caches as a running daemon would have
    times, queries = [], set()
    for _ in range(cycles):
        before = ev.client.queries_total
        start = time.perf_counter()
        cycle = ev.evaluate(t)
        times.append(time.perf_counter() - start)
        queries.add(ev.client.queries_total - before)
    if len(ev.discovered) != n or len(queries) != 1:
        raise RuntimeError(f"discovered {len(ev.discovered)} of {n} targets; queries per cycle {queries}")
    return statistics.median(times), queries.pop(), Counter(d.bottleneck for d in cycle.diagnoses)


def bench_scrape(
    targets: list[tuple[str, int, float]], templates: list[Template], t0: float, cycles: int
) -> tuple[float, float, float, Counter[str]]:
    """Medians over the last `cycles` scrape-source cycles (ingest N expositions + evaluate): wall seconds, CPU
    seconds, CPU seconds of the evaluation part; and the classes of the last cycle."""
    pipeline = Pipeline(load_files(default_rule_files()))
    for instance, _, _ in targets:
        pipeline.add_target(instance)
    frames = min(len(t.offsets) for t in templates)
    walls, cpus, evals, last = [], [], [], None
    for k in range(frames):
        if k == frames - cycles - 3:
            # The windows are filled: collect once so the cycles measured are the steady state, not the
            # collections Python's GC runs while the heap grows from nothing during the first frames.
            gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        for instance, ti, phase in targets:
            pipeline.observe(instance, t0 + templates[ti].offsets[k] + phase, templates[ti].texts[k])
        # Early frames only fill the windows; the last ones run the whole cycle, with a few unmeasured
        # first so `for` clauses and rates have settled.
        if k >= frames - cycles - 3:
            mid = time.process_time()
            last = pipeline.evaluate(t0 + templates[0].offsets[k] + 1.0)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
            evals.append(time.process_time() - mid)
    assert last is not None
    med = [statistics.median(x[-cycles:]) for x in (walls, cpus, evals)]
    return med[0], med[1], med[2], Counter(d.bottleneck for d in last.diagnoses)


def bench_rss(n: int, pre_parsed: bool) -> dict[str, float]:
    """fleet_rss.py's measurement for n targets, in a process of its own (large fleets: pre-parsed, the pack
    evaluated once a minute)."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "fleet_rss.py"), str(n)]
    proc = subprocess.run(
        cmd + ["--pre-parsed", "--eval-every", "4"] * pre_parsed, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"fleet_rss.py {n} failed: {proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def bench_prometheus_fleet(
    n: int, templates: list[Template], t0: float, end: float, args: argparse.Namespace, base: Path
) -> tuple[float, int, Counter[str]]:
    """Backfill a Prometheus with n targets and the pack's rules; the Prometheus source's cycle on it."""
    prom_bin, promtool = binaries() or ("prometheus", "promtool")
    work = base / f"fleet-{n}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    start = time.perf_counter()
    samples = write_openmetrics(work / "fleet.om", fleet(n), templates, t0)
    backfill(work / "fleet.om", work / "tsdb", promtool=promtool)
    (work / "fleet.om").unlink()
    prom = PrometheusServer(work / "tsdb", work, binary=prom_bin)
    prom.start(timeout=120)
    try:
        backfill_rules(prom, promtool, int(t0) - 60, int(end) + 60, work)
        print(
            f"  {n} targets: {samples:,} samples backfilled with rules in {time.perf_counter() - start:.0f}s"
        )
        return bench_prometheus(prom.url, end, args.cycles, n)
    finally:
        prom.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,100,1000,5000")
    ap.add_argument(
        "--prom-sizes", default="10,100,1000", help="sizes also run against a backfilled Prometheus"
    )
    ap.add_argument(
        "--rss-sizes", default="10,100,1000,5000", help="sizes whose RSS at 30 min retention is measured"
    )
    ap.add_argument(
        "--pre-parsed-from", type=int, default=5000, help="RSS runs this large replay pre-parsed scrapes"
    )
    ap.add_argument("--span", type=float, default=120.0, help="seconds of each recording to use")
    ap.add_argument("--step", type=float, default=5.0, help="seconds between kept scrapes")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--keep", help="work directory to keep (default: a temporary one, removed)")
    args = ap.parse_args()
    if binaries() is None:
        print("bench_fleet: needs prometheus and promtool on PATH", file=sys.stderr)
        return 2
    sizes, prom_sizes, rss_sizes = (
        [int(x) for x in v.split(",") if x] for v in (args.sizes, args.prom_sizes, args.rss_sizes)
    )
    src = recording_dir()
    print(f"recordings: {src} ({', '.join(RECORDINGS)}); {args.span:g}s each, a scrape every {args.step:g}s")
    templates = [Template(src / f"{r}.jsonl.gz", args.span, args.step, kept_names()) for r in RECORDINGS]
    t0 = float(int(time.time()) - 6 * 3600)  # well behind Prometheus' head block
    end = t0 + max(t.offsets[-1] for t in templates) + 1.0
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="kvdoctor-bench-fleet-"))
    rows = []
    try:
        for n in sizes:
            prom = bench_prometheus_fleet(n, templates, t0, end, args, base) if n in prom_sizes else None
            s_s, c_s, e_s, s_classes = bench_scrape(fleet(n), templates, t0, args.cycles)
            rss = bench_rss(n, n >= args.pre_parsed_from) if n in rss_sizes else None
            rows.append((n, prom, s_s, c_s, e_s, s_classes, rss))
            print(f"  {n} targets: scrape source {s_s:.3f}s per cycle ({c_s:.3f}s CPU)", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(
        f"\n{'targets':>8} | {'prometheus source':>17} | {'queries':>7} | {'scrape source':>13} | {'per target':>10} "
        f"| {'of which':>8} | {'ratio':>11} | {'RSS per target':>14}"
    )
    print(
        f"{'':>8} | {'s per cycle':>17} | {'/cycle':>7} | {'s per cycle':>13} | {'CPU ms':>10} "
        f"| {'eval ms':>8} | {'scrape/prom':>11} | {'MB at 30m/15s':>14}"
    )
    for n, prom, s_s, c_s, e_s, _, rss in rows:
        p_s, p_q = (f"{prom[0]:.3f}", str(prom[1])) if prom else ("-", "-")
        ratio = f"{s_s / prom[0]:.1f}×" if prom else "-"
        mb = (
            f"{(rss['rss_after'] - rss['rss_before']) / n / 2**20:.2f}{'*' * rss['pre_parsed']}"
            if rss
            else "-"
        )
        print(
            f"{n:>8} | {p_s:>17} | {p_q:>7} | {s_s:>13.3f} | {c_s / n * 1e3:>10.3f} | {e_s / n * 1e3:>8.3f} "
            f"| {ratio:>11} | {mb:>14}"
        )
    if any(r[6] and r[6]["pre_parsed"] for r in rows):
        print(
            "* scrapes pre-parsed once per frame and shared by the targets (parser caches not counted), the pack "
            "evaluated once a minute (recorded series hold a quarter of their samples)"
        )
    print(
        "(seconds per cycle are wall time; per target is CPU time of the cycle: the machine may be shared)\n"
    )
    for n, prom, *_, sc, _ in rows:
        pc = dict(sorted(prom[2].items())) if prom else "-"
        print(f"classes at {n}: prometheus source {pc}; scrape source {dict(sorted(sc.items()))}")
    per_target = [r[3] / r[0] for r in rows]
    spread = max(per_target) / min(per_target)
    print(
        f"\nscrape source CPU per target: {min(per_target) * 1e3:.3f}-{max(per_target) * 1e3:.3f} ms, "
        f"max/min {spread:.2f}"
    )
    queries = {r[1][1] for r in rows if r[1]}
    constant = len(queries) <= 1
    print(f"queries per cycle constant over {prom_sizes}: {'yes' if constant else 'NO'}")
    return 0 if constant else 1


if __name__ == "__main__":
    sys.exit(main())
