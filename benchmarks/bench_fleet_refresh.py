"""1,000 targets all at a limit on one core: how long a refresh of every prediction and headroom takes, and what it
does to the cycle.

usage: python benchmarks/bench_fleet_refresh.py [--targets 1000] [--interval 15] [--refresh 180] [--distinct 10]
           [--fill 75] [--threads] [--quick]

The process is pinned to one CPU. Every target replays a real vLLM 0.32 recording at a limit (compute_bound and
kv_bound in turn, each scrape parsed once per frame and shared: this measures the what-if, not the scrape), with
SLOs (ttft_p95 2 s, itl_p95 200 ms), through a Pipeline with the daemon's advisor and headroom workers on their
threads. Targets are offset by up to --distinct frames, so their windows (and fingerprints) differ as replicas'
would. Cycles run on the wall clock every --interval seconds: first --fill seconds with the workers held (the
cycle "without predictions"), then until every target has fresh effects on its advice and headroom, and one more
refresh period. Simulations run where the daemon runs them, in a nice-19 child process pinned to the same core
(--threads: on the worker threads, for comparison). Prints the cycle duration (wall, and the cycle thread's CPU) without and with the workers busy,
the time the first full refresh took against --refresh, the workers' CPU, and their counters (computed, shared,
dropped). Load average beside it: the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fleet_data import Template, recording_dir  # noqa: E402
from fleet_rss import Replayed  # noqa: E402

from kvdoctor.diagnosis.target import TargetFacts  # noqa: E402
from kvdoctor.pipeline import Pipeline  # noqa: E402
from kvdoctor.rules.loader import default_rule_files, load_files  # noqa: E402
from kvdoctor.samples import Scrape  # noqa: E402
from kvdoctor.whatif.advisor import Advisor  # noqa: E402
from kvdoctor.whatif.headroom import HeadroomWorker  # noqa: E402
from kvdoctor.whatif.offload import shared  # noqa: E402
from kvdoctor.whatif.sharing import MAX_QUEUE  # noqa: E402

AT_LIMIT = ("compute_bound", "kv_bound")


def _cpu(path: str) -> float:
    try:
        with open(path, encoding="ascii") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def workers_cpu_s(names: tuple[str, ...]) -> float:
    """CPU seconds the named Python threads and the simulation child have used."""
    threads = [t.native_id for t in threading.enumerate() if t.name in names and t.native_id is not None]
    child = sum(_cpu(f"/proc/{pid}/stat") for pid in shared().pids())
    return sum(_cpu(f"/proc/self/task/{tid}/stat") for tid in threads) + child


def fresh(diagnoses: list, since: float) -> tuple[int, int, int]:
    """Targets whose advice names a change, those of them with an effect computed since `since`, and targets
    with headroom computed since then."""
    want = sum(1 for d in diagnoses if any(a.change for a in d.advice))
    eff = sum(1 for d in diagnoses if any(a.effect is not None and a.effect.t >= since for a in d.advice))
    head = sum(1 for d in diagnoses if float(d.evidence.get("slo_headroom_timestamp", 0.0) or 0.0) >= since)
    return want, eff, head


def main() -> int:
    """Run the fleet on one core and print the measurements."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--interval", type=float, default=15.0)
    ap.add_argument("--refresh", type=float, default=180.0, help="the workers' refresh period, s")
    ap.add_argument("--distinct", type=int, default=10, help="frame offsets among targets (distinct windows)")
    ap.add_argument("--fill", type=float, default=75.0, help="seconds of cycles before the workers may run")
    ap.add_argument("--quick", action="store_true", help="100 targets, a 5 s interval, 60 s refresh")
    ap.add_argument("--threads", action="store_true", help="simulate on the worker threads, not in the child")
    args = ap.parse_args()
    if args.quick:
        args.targets, args.interval, args.refresh, args.fill = 100, 5.0, 60.0, 40.0
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})  # one core: the cycle and the workers compete for it as on a 1-CPU pod
    src = recording_dir()
    templates = [Template(src / f"{r}.jsonl.gz", 1e9, args.interval, set()) for r in AT_LIMIT]
    done: dict[int, Scrape] = {}
    offload = None if args.threads else shared()  # as the daemon: a nice-19 child process, on the same core
    advisor = Advisor(background=True, refresh_s=args.refresh, offload=offload)
    headroom = HeadroomWorker(
        advisor.snaps, refresh_s=args.refresh, background=True, max_queue=MAX_QUEUE, offload=offload
    )
    pipeline = Pipeline(load_files(default_rule_files()), advisor=advisor, headroom=None)
    facts = TargetFacts(slo_ttft_p95_s=2.0, slo_itl_p95_s=0.2)
    names = [f"vllm-{i:04d}:8000" for i in range(args.targets)]
    for name in names:
        pipeline.add_target(name, facts)
        # one parse per frame, shared: the scrape is not measured here
        pipeline._parsers[name] = Replayed(done)
    real_advisor = pipeline.advisor
    pipeline.advisor = None  # held: the fill phase's cycles are the cycle without predictions
    rows: list[tuple[str, float, float, int, int]] = []
    workers = ("kvdoctor-whatif", "kvdoctor-headroom")
    start = time.time()
    k = 0
    refreshed_at: float | None = None
    asked_at: float | None = None
    w_cpu0 = w_cpu = w_prev = 0.0
    last: tuple[dict[str, int], dict[str, int]] | None = None
    print(
        f"{args.targets} targets at a limit, interval {args.interval:g}s, refresh {args.refresh:g}s, "
        f"{args.distinct} distinct offsets, pinned to CPU {cpu}"
    )
    while True:
        slot = start + k * args.interval
        time.sleep(max(0.0, slot - time.time()))  # a benchmark on the wall clock, as the daemon paces cycles
        t = time.time()
        phase = "fill" if t - start < args.fill else "whatif"
        if phase == "whatif" and asked_at is None:
            pipeline.advisor, pipeline.headroom = real_advisor, headroom
            asked_at, w_cpu0 = t, workers_cpu_s(workers)
        c0, w0 = time.thread_time(), time.monotonic()
        for i, name in enumerate(names):
            tpl = templates[i % len(templates)]
            j = (k + (i // len(templates)) % args.distinct) % len(tpl.texts)
            ts, text = t - 0.5 + (i % 97) / 200, tpl.texts[j]
            pipeline.observe(name, ts, text)
            if pipeline.advisor is None:  # held: its history fills, as the pipeline's observe would fill it
                real_advisor.observe(name, ts, done[id(text)].samples)
        cycle = pipeline.evaluate(t)
        wall, cpu_s = time.monotonic() - w0, time.thread_time() - c0
        counts = (advisor.stats(), headroom.stats())
        spent, w_prev = workers_cpu_s(workers) - w_prev, workers_cpu_s(workers)
        # the refresh is done when both queues are empty, nothing was computed since the last cycle and the
        # workers (the child included) spent no CPU in between: none is in the middle of a simulation
        quiet = (
            asked_at is not None and counts == last and not counts[0]["queued"] and not counts[1]["queued"]
        )
        quiet = quiet and spent < 0.1
        last = counts
        want, eff, head = fresh(cycle.diagnoses, asked_at or 1e18)
        busy = asked_at is not None and refreshed_at is None and not quiet
        rows.append((phase if phase == "fill" else ("busy" if busy else "idle"), wall, cpu_s, eff, head))
        print(
            f"cycle {k:3d} {rows[-1][0]:5s} wall {wall:6.2f}s cpu {cpu_s:6.2f}s  effects {eff}/{want} "
            f"headroom {head}  whatif {counts[0]}  headroom {counts[1]}",
            flush=True,
        )
        if asked_at is not None and refreshed_at is None and quiet:
            refreshed_at = time.time()
            w_cpu = workers_cpu_s(workers) - w_cpu0
            print(
                f"refreshed: effects on {eff} of the {want} targets whose advice names a change, headroom on "
                f"{head} of {args.targets}"
            )
        if refreshed_at is not None and t - refreshed_at >= args.refresh:
            break
        if asked_at is not None and t - asked_at > 3 * args.refresh:
            print("not every target refreshed within 3 refresh periods")
            w_cpu = workers_cpu_s(workers) - w_cpu0
            break
        k += 1
    load = Path("/proc/loadavg").read_text().split()[:3]

    def med(kind: str, i: int) -> str:
        xs = [r[i] for r in rows[1:] if r[0] == kind]
        return f"{statistics.median(xs):.2f} s (max {max(xs):.2f}, {len(xs)} cycles)" if xs else "-"

    took = f"{refreshed_at - asked_at:.0f} s" if refreshed_at and asked_at else "not done"
    print(
        f"\ncycle wall, no predictions: {med('fill', 1)}; workers busy: {med('busy', 1)}; idle: {med('idle', 1)}"
    )
    print(f"cycle thread CPU, no predictions: {med('fill', 2)}; workers busy: {med('busy', 2)}")
    print(
        f"first full refresh of {args.targets} targets (effects and headroom): {took} of the {args.refresh:g} s "
        f"period; the workers' CPU {w_cpu:.1f} s; whatif {advisor.stats()}; headroom {headroom.stats()}; "
        f"load average {' '.join(load)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
