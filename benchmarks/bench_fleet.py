"""Fleet scale: kvdoctor's Prometheus source against its scrape source at 10, 100 and 1,000 vLLM targets.

usage: python benchmarks/bench_fleet.py [--sizes 10,100,1000] [--span 120] [--step 5] [--cycles 5] [--keep DIR]

The fleet is synthetic but every series is real: N targets (`instance` vllm-0000:8000 …), each a copy of one of the
real vLLM 0.32 recordings (kv_bound, batch_cap, healthy, compute_bound; ../shared/recordings, else the demo copies),
thinned to one scrape every --step seconds over their last --span seconds. For each size a Prometheus 2.42 gets
(a) the vLLM series the rule pack and the source read, plus `up`, backfilled with `promtool tsdb create-blocks-from
openmetrics`, and (b) the pack's recording rules backfilled with `promtool tsdb create-blocks-from rules`, one layer
of dependent rules at a time (Prometheus restarted in between). Then it measures
  * the Prometheus source: wall time of one cycle (PrometheusEvaluator.evaluate at the end of the data) and the
    queries it sent, median of --cycles cycles;
  * the scrape source: wall time of one cycle of a Pipeline ingesting the same N recorded expositions (parse,
    store, every rule of the pack, classification; no HTTP), median of the last --cycles cycles (earlier frames
    are ingested to fill the windows, the rules run on the last --cycles + 3).
Needs `prometheus` and `promtool` on PATH; not run in CI. Absolute times depend on the machine.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from doctor.capacity.live import CACHE_INFO  # noqa: E402
from doctor.ingest.parse import Parser  # noqa: E402
from doctor.ingest.recording import load_frames  # noqa: E402
from doctor.pipeline import EXPECTED, Pipeline  # noqa: E402
from doctor.rules.loader import default_rule_files, load_files  # noqa: E402
from doctor.sources.client import PromClient  # noqa: E402
from doctor.sources.prometheus import PrometheusEvaluator  # noqa: E402
from tests.support.prometheus import PrometheusServer, backfill, binaries  # noqa: E402

RECORDINGS = ("kv_bound", "batch_cap", "healthy", "compute_bound")
PACK = default_rule_files()[0]


def recording_dir() -> Path:
    """The shared recordings when present, else the copies shipped for the demo."""
    shared = ROOT.parent / "shared" / "recordings" / "vllm-0.32-cpu"
    return shared if (shared / "kv_bound.jsonl.gz").exists() else ROOT / "doctor" / "demo"


def kept_names() -> set[str]:
    """The vLLM sample names the pack's rules and the Prometheus source read."""
    names = set(re.findall(r"vllm:[a-z_:]*[a-z_]", PACK.read_text()))
    names |= {CACHE_INFO} | {a.replace("_bucket", "_count") for alts in EXPECTED.values() for a in alts}
    return names


class Template:
    """One real recording, thinned: frame offsets (s), exposition texts, and the kept series per frame."""

    def __init__(self, path: Path, span: float, step: float, keep: set[str]) -> None:
        frames = [f for f in load_frames(path) if f.text is not None]
        end = frames[-1].t
        self.offsets: list[float] = []
        self.texts: list[str] = []
        next_t = end - span
        for f in frames:
            if f.t >= next_t:
                self.offsets.append(round(f.t - (end - span), 3))
                self.texts.append(f.text or "")
                next_t = f.t + step - 0.5
        # sample name -> label text -> [(frame index, value)]
        self.series: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
        parser = Parser()
        for k, text in enumerate(self.texts):
            for s in parser.parse(text).samples:
                if s.name in keep:
                    labels = ",".join(f'{n}="{_esc(v)}"' for n, v in s.labels)
                    self.series[s.name][labels].append((k, s.value))


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(v: float) -> str:
    return "NaN" if v != v else ("+Inf" if v == float("inf") else repr(v))


def fleet(n: int) -> list[tuple[str, int, float]]:
    """(instance, template index, scrape phase in s) per target."""
    return [(f"vllm-{i:04d}:8000", i % len(RECORDINGS), (i * 37 % 1000) / 1000) for i in range(n)]


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
        cmd = [promtool, "tsdb", "create-blocks-from", "rules", f"--start={start}", f"--end={end}",
               f"--url={prom.url}", f"--output-dir={out}", "--quiet", str(rules)]  # fmt: skip
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
) -> tuple[float, Counter[str]]:
    """Median seconds of the last `cycles` scrape-source cycles (ingest N expositions + evaluate)."""
    groups = load_files(default_rule_files())
    pipeline = Pipeline(groups)
    for instance, _, _ in targets:
        pipeline.add_target(instance)
    frames = min(len(t.offsets) for t in templates)
    times, last = [], None
    for k in range(frames):
        start = time.perf_counter()
        for instance, ti, phase in targets:
            pipeline.observe(instance, t0 + templates[ti].offsets[k] + phase, templates[ti].texts[k])
        # Early frames only fill the windows (at 1,000 targets a cycle takes tens of seconds); the last ones
        # run the whole cycle, with a few unmeasured first so `for` clauses and rates have settled.
        if k >= frames - cycles - 3:
            last = pipeline.evaluate(t0 + templates[0].offsets[k] + 1.0)
            times.append(time.perf_counter() - start)
    assert last is not None
    return statistics.median(times[-cycles:]), Counter(d.bottleneck for d in last.diagnoses)


def main() -> int:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--span", type=float, default=120.0, help="seconds of each recording to use")
    ap.add_argument("--step", type=float, default=5.0, help="seconds between kept scrapes")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--keep", help="work directory to keep (default: a temporary one, removed)")
    args = ap.parse_args()
    found = binaries()
    if found is None:
        print("bench_fleet: needs prometheus and promtool on PATH", file=sys.stderr)
        return 2
    promtool = found[1]
    sizes = [int(s) for s in args.sizes.split(",")]
    src = recording_dir()
    print(f"recordings: {src} ({', '.join(RECORDINGS)}); {args.span:g}s each, a scrape every {args.step:g}s")
    templates = [Template(src / f"{r}.jsonl.gz", args.span, args.step, kept_names()) for r in RECORDINGS]
    t0 = float(int(time.time()) - 6 * 3600)  # well behind Prometheus' head block
    end = t0 + max(t.offsets[-1] for t in templates) + 1.0
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="kvdoctor-bench-fleet-"))
    rows = []
    try:
        for n in sizes:
            targets = fleet(n)
            work = base / f"fleet-{n}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            start = time.perf_counter()
            samples = write_openmetrics(work / "fleet.om", targets, templates, t0)
            backfill(work / "fleet.om", work / "tsdb", promtool=promtool)
            (work / "fleet.om").unlink()
            prom = PrometheusServer(work / "tsdb", work, binary=found[0])
            prom.start(timeout=120)
            try:
                backfill_rules(prom, promtool, int(t0) - 60, int(end) + 60, work)
                load_s = time.perf_counter() - start
                p_s, p_q, p_classes = bench_prometheus(prom.url, end, args.cycles, n)
            finally:
                prom.stop()
            s_s, s_classes = bench_scrape(targets, templates, t0, args.cycles)
            rows.append((n, samples, load_s, p_s, p_q, s_s, p_classes, s_classes))
            print(f"  {n} targets: {samples:,} samples backfilled with rules in {load_s:.0f}s", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print()
    print(
        f"{'targets':>8} | {'prometheus source':>18} | {'queries/cycle':>13} | {'scrape source':>14} | ratio"
    )
    print(f"{'':>8} | {'s per cycle':>18} | {'':>13} | {'s per cycle':>14} | scrape/prom")
    for n, _, _, p_s, p_q, s_s, _, _ in rows:
        print(f"{n:>8} | {p_s:>18.3f} | {p_q:>13} | {s_s:>14.3f} | {s_s / p_s:>6.1f}×")
    print()
    for n, _, _, _, _, _, pc, sc in rows:
        print(
            f"classes at {n}: prometheus source {dict(sorted(pc.items()))}; scrape source {dict(sorted(sc.items()))}"
        )
    constant = len({r[4] for r in rows}) == 1
    print(
        f"\nqueries per cycle constant from {sizes[0]} to {sizes[-1]} targets: {'yes' if constant else 'NO'}"
    )
    return 0 if constant else 1


if __name__ == "__main__":
    sys.exit(main())
